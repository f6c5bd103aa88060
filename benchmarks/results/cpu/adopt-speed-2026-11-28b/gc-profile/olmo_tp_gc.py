"""One OLMo-core tensor-parallel checkpoint test body, three times on 2 gloo ranks of a
warm process (as a pool rank runs it): its time each round, what one gc.collect() costs
there, and (rank 0, round 3, PROFILE=1) a cProfile. FREEZE=1 freezes the heap first
(gc.collect(); gc.freeze()), as rankgate's ranks do.
Run from OLMo-core's src/ (fa6c5014c): python olmo_tp_gc.py"""
import gc
import os
import pathlib
import sys
import tempfile
import time

import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, ".")


def body(rank, tmp):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29731", RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from test.distributed.checkpoint_test import run_save_and_load_tensor_parallel_model as f

    gc.collect()
    start = time.perf_counter()
    gc.collect()
    print(f"rank {rank}: {len(gc.get_objects())} objects tracked, one gc.collect() "
          f"{time.perf_counter() - start:.3f} s", flush=True)
    if os.environ.get("FREEZE"):
        gc.freeze()
    for i in range(3):
        d = pathlib.Path(tmp) / f"r{i}"
        if rank == 0:
            d.mkdir()
        dist.barrier()
        profile = i == 2 and rank == 0 and os.environ.get("PROFILE")
        if profile:
            import cProfile
            import pstats

            pr = cProfile.Profile()
            pr.enable()
        start = time.perf_counter()
        f(d, False, False)
        took = time.perf_counter() - start
        if profile:
            pr.disable()
            pstats.Stats(pr).sort_stats("tottime").print_stats(6)
        print(f"rank {rank} round {i + 1}: {took:.2f} s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(body, args=(tempfile.mkdtemp(),), nprocs=2)
