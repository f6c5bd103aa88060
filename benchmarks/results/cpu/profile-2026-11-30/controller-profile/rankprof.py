import cProfile
PROFILER = cProfile.Profile()
def setup(rank):
    PROFILER.enable()
