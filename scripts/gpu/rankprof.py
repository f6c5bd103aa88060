"""Run a module under cProfile on each rank of a launcher and dump the profile every
second, so a run stopped by a time limit still leaves one.

Usage: torchrun --nproc-per-node=N scripts/gpu/rankprof.py OUTDIR -m MODULE [ARGS...]
Writes OUTDIR/rank<RANK>.prof; read it with pstats.
"""

import cProfile
import os
import runpy
import sys
import threading
import time


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: rankprof.py OUTDIR -m MODULE [ARGS...]")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"rank{os.environ.get('RANK', '0')}.prof")
    profile = cProfile.Profile()

    def dump_every_second() -> None:
        while True:
            time.sleep(1.0)
            profile.disable()
            profile.dump_stats(path)
            profile.enable()

    threading.Thread(target=dump_every_second, daemon=True).start()
    sys.argv = [module, *args]
    profile.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        profile.disable()
        profile.dump_stats(path)


if __name__ == "__main__":
    main()
