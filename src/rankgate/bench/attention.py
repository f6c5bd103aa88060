"""``rankgate bench attention``: ring attention against one GPU and PyTorch's context parallel.

One forward and backward of attention over one sequence (``--batch`` of them) per
iteration, causal by default, bf16 on GPUs. Methods, in one run:

- ``single``: ``scaled_dot_product_attention`` on one device over the whole sequence
  (world 1 only): the baseline every speedup is measured against.
- ``ring``: :func:`rankgate.workloads.ring_attention.ring_attention` on load-balanced
  dual-chunk shards (also at world 1, which shows its own overhead).
- ``torch-cp``: PyTorch's ``context_parallel`` (its ring, its head-tail shards; GPUs,
  world > 1): the same shapes, timed the same way.

Per (method, world, sequence length): ``--warmup`` iterations, then ``--reps``
repetitions of as many iterations as take ``--min-rep-seconds``, each timed with
device events (the host clock on CPUs) after a barrier; an iteration takes as long as
its slowest rank, and the figure is the median over repetitions. Tokens/s is
batch·seq over that time; speedup is over ``single`` at the same length; efficiency is
speedup over world. Peak memory per GPU is the allocator's peak (inputs included).
Communication is measured on every rank, never derived: NCCL kernel time in one
profiled iteration (torch.profiler), and for ``ring`` the time the compute stream
waited for transfers (CUDA events around each wait: the part not hidden by compute).

``--fit-cap-gib C``: for each method and world, the peak memory measured at the timed
lengths is fitted as ``a + b·seq`` (it is linear for these kernels), which gives the
longest sequence that fits in C GiB per GPU and in the whole GPU; one iteration at
97% of the C-GiB length is then run under a C-GiB allocator cap
(``set_per_process_memory_fraction``) to confirm it fits; at world 1, 105% is run too
and must not fit.

Ranks: started here (one process per GPU, FileStore rendezvous); what each runs is
:mod:`.attention_sweep`. A smaller world w runs on every rank at once, as world/w
independent groups of w consecutive ranks doing the same work (no rank idles through
another's sweep); group 0's figures are reported. Output: a table, ``--json`` (last
line), ``--out DIR`` (attention.json, attention.txt, PNG plots).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from rankgate.bench.attention_sweep import DTYPES, SAFE_ENV, rank_main
from rankgate.bench.benchargs import (
    int_list,
    length_list,
    method_at_world_list,
    name_list,
    number_at_least,
)
from rankgate.bench.ranks import run_ranks
from rankgate.bench.samples import save_run
from rankgate.cliargs import UsageError, int_at_least, make_output_folder, run_module_main

METHODS = ("single", "ring", "torch-cp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--worlds", type=int_list(1), default=None, help="comma list of world sizes (default: "
        "1 and powers of two up to the visible GPUs; 1,2 on CPU)")  # fmt: skip
    add("--seq-lens", type=length_list, default=None, help="comma list, K = 1024 (default "
        "16K,32K,64K,128K on GPUs, 256,512 on CPU)")  # fmt: skip
    add("--methods", type=name_list(METHODS), default=",".join(METHODS),
        help=f"comma list of {', '.join(METHODS)} (default: all)")  # fmt: skip
    add("--skip", type=method_at_world_list(METHODS), default=[],
        help="comma list of METHOD@WORLD not to run, e.g. ring@1 (default: none)")  # fmt: skip
    add("--ring-kernel", default="auto", choices=("auto", "cudnn", "flash", "math"),
        help="ring's per-block kernel (default auto: cuDNN, else flash, on GPUs)")
    add("--batch", type=int_at_least(1), default=1, help="sequences per iteration (default 1)")
    add("--heads", type=int_at_least(1), default=None, help="query heads (default 32; 4 on CPU)")
    add("--kv-heads", type=int_at_least(1), default=None,
        help="key/value heads (default 8; 2 on CPU)")  # fmt: skip
    add("--head-dim", type=int_at_least(1), default=None, help="default 128 (16 on CPU)")
    add("--dtype", choices=DTYPES, default=None, help="default bf16 on GPUs, fp32 on CPU")
    add("--full", action="store_true", help="full attention instead of causal")
    add("--head-chunks", type=int_at_least(1), default=None, help="ring's heads per kernel "
        "call, dividing --kv-heads (default: auto, <= 8 query heads)")  # fmt: skip
    add("--warmup", type=int_at_least(0), default=1, help="untimed iterations first (default 1)")
    add("--reps", type=int_at_least(1), default=5,
        help="timed repetitions; the median counts (default 5)")  # fmt: skip
    add("--min-rep-seconds", type=number_at_least(0), default=0.2, help="iterations per "
        "repetition: enough for this long (default 0.2)")  # fmt: skip
    add("--no-profile", action="store_true", help="skip the profiled iteration (comm kernels)")
    add("--fit-cap-gib", type=number_at_least(0), default=0.0, help="memory cap for the "
        "longest-sequence check (0: off; default 0)")  # fmt: skip
    add("--cpu", action="store_true", help="stay on the CPU even where GPUs are visible")
    add("--out", default=None, help="folder for attention.json, attention.txt and PNG plots "
        "(default: nothing saved)")  # fmt: skip
    add("--json", action="store_true", help="end with the results as one JSON line")


def _options(args: argparse.Namespace) -> dict:
    """The run's options with the machine's defaults; options that contradict each other,
    or a world this machine cannot start, are a UsageError."""
    import torch

    gpus = 0 if args.cpu or not torch.cuda.is_available() else torch.cuda.device_count()
    on_gpu = gpus >= 1
    worlds = args.worlds or ([w for w in (1, 2, 4, 8) if w <= gpus] if on_gpu else [1, 2])
    if on_gpu and max(worlds) > gpus:
        raise UsageError(f"--worlds asks for {max(worlds)} ranks but {gpus} GPUs are visible")
    for w in worlds:
        if max(worlds) % w:
            raise UsageError(f"--worlds {','.join(map(str, worlds))}: each must divide the "
                             f"largest ({max(worlds)}), which runs the smaller ones as groups "
                             "side by side")  # fmt: skip
    methods = args.methods.split(",")
    seqs = args.seq_lens or length_list("16K,32K,64K,128K" if on_gpu else "256,512")
    for s in seqs:
        for w in worlds:
            if s % (2 * w):
                raise UsageError(f"--seq-lens: {s} is not a multiple of 2*world={2 * w} "
                                 f"(--worlds {','.join(map(str, worlds))})")  # fmt: skip
    heads = args.heads or (32 if on_gpu else 4)
    kv_heads = args.kv_heads or (8 if on_gpu else 2)
    if heads % kv_heads:
        raise UsageError(f"--heads {heads} must be a multiple of --kv-heads {kv_heads}")
    if args.head_chunks and kv_heads % args.head_chunks:
        raise UsageError(f"--head-chunks {args.head_chunks} must divide --kv-heads {kv_heads}")
    return {
        "skip": args.skip,
        "ring_kernel": args.ring_kernel,
        "world": max(worlds),
        "worlds": worlds,
        "on_gpu": on_gpu,
        "methods": methods,
        "seq_lens": seqs,
        "batch": args.batch,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": args.head_dim or (128 if on_gpu else 16),
        "dtype": args.dtype or ("bf16" if on_gpu else "fp32"),
        "causal": not args.full,
        "head_chunks": args.head_chunks,
        "warmup": args.warmup,
        "reps": args.reps,
        "min_rep_seconds": args.min_rep_seconds,
        "profile": on_gpu and not args.no_profile,
        "fit_cap_gib": args.fit_cap_gib if on_gpu else 0.0,
    }


def validate(args: argparse.Namespace) -> None:
    """Before the run starts (``rankgate bench`` calls it)."""
    _options(args)
    make_output_folder("--out", args.out)


def run(args: argparse.Namespace) -> int:
    from rankgate.bench import attnreport

    for key, value in SAFE_ENV.items():
        os.environ.setdefault(key, value)
    opts = _options(args)
    result = run_ranks(rank_main, opts["world"], opts, name="attention")
    text = attnreport.table(result)
    print(text)
    if args.out:
        out = save_run(args.out, "attention", result, text)
        for path in attnreport.plots(result, out):
            print(f"# plot: {path}")
    if args.json:
        print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_module_main("rankgate bench attention", __doc__, sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
