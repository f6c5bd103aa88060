"""What a LEDGER_VARIANT (scripts/ledger/pool_variant) installs in a rank, in one line of
JSON: run it the way scripts/gpu/ledger-ab.sh runs a variant, before trusting a timing.

Usage: LEDGER_VARIANT=V PYTHONPATH=scripts/ledger/pool_variant:$PYTHONPATH \
         python scripts/ledger/check_variant.py [--backend gloo|nccl]
A 1-rank group (FileStore in a temporary folder; nccl on GPU 0), the ledger installed as
a pool rank installs it, then one test's worth of calls: ``dist.all_reduce(t)``,
``dist.all_reduce(t, async_op=True).wait()`` and ``pg.allreduce([t]).wait()``. Prints
whether torch.distributed's functions (``functions``), c10d's own names (``c10d``) and
ProcessGroup's methods (``methods``) are the ledger's wrappers, how many entries the test
left (``entries``), how many of them hold a Work (``works``), and the digest sent with
the result (``digest``: null when none is sent).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from datetime import timedelta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    args = parser.parse_args()
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from rankgate.harness import ledger

    with tempfile.TemporaryDirectory(prefix="rankgate-check-variant-") as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        device = torch.device("cpu")
        kwargs = {}
        if args.backend == "nccl":
            torch.cuda.set_device(0)
            device = kwargs["device_id"] = torch.device("cuda", 0)
        dist.init_process_group(
            args.backend, store=store, rank=0, world_size=1, timeout=timedelta(seconds=60),
            **kwargs,
        )  # fmt: skip
        try:
            installed = ledger.install(args.backend)  # as worker_main does
            ledger.begin_test()  # as each pool test does
            t = torch.ones(4, device=device)
            dist.all_reduce(t)
            dist.all_reduce(t, async_op=True).wait()
            dist.group.WORLD.allreduce([t]).wait()
            entries = list(ledger._entries)
            report = {
                "variant": os.environ.get("LEDGER_VARIANT", "none"),
                "backend": args.backend,
                "install": installed,
                "functions": _wrapped(dist.all_reduce),
                "c10d": _wrapped(c10d.all_reduce),
                "methods": _wrapped(dist.ProcessGroup.__dict__.get("allreduce")),
                "entries": len(entries),
                "works": sum(1 for e in entries if not isinstance(e[6], str | type(None))),
                "digest": ledger.digest(),
            }
        finally:
            ledger.uninstall()
            dist.destroy_process_group()
    print(json.dumps(report))


def _wrapped(function) -> bool:
    return bool(getattr(function, "__rankgate_ledger__", False))


if __name__ == "__main__":
    main()
