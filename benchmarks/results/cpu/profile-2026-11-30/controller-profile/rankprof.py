"""rankgate_worker_setup: each rank profiles itself from its start (the last test saves it)."""

import cProfile

PROFILER = cProfile.Profile()


def setup(rank):
    PROFILER.enable()
