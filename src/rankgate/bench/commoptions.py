"""``rankgate bench comm``'s command line and the options record every rank receives.

:class:`CommOptions` is built once from the arguments in the parent, checked there,
and sent to each rank unchanged (it is frozen): what a run measures is what it was
asked, and the JSON's ``meta.options`` is that record.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass

from rankgate.bench.benchargs import existing_path, name_list
from rankgate.bench.busbw import parse_size
from rankgate.cliargs import int_at_least

FORCED = {"p2p-push": "push", "p2p-oneshot": "oneshot", "p2p-twoshot": "twoshot"}
"""Backend names that force the p2p all-reduce onto one kernel (for the crossovers)."""
BACKENDS = ("auto", "p2p", "nccl", "gloo", *FORCED)
GPU_DEFAULT_BACKENDS = "nccl,p2p-push,p2p-oneshot,p2p-twoshot,auto"
GPU_DEFAULT_COLLECTIVES = "all_reduce,broadcast,all_gather,reduce_scatter,send_recv"
COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "reduce_scatter", "gather", "send_recv")
DTYPES = ("fp32", "bf16", "fp16", "int32")
AUTO_THRESHOLDS = ("measured", "defaults")


def byte_size(text: str) -> str:
    """A size such as 8, 64K or 2G, at least 1 byte (kept as text: the caller parses it)."""
    try:
        value = parse_size(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (e.g. 8, 64K, 2G)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a size >= 1 byte (e.g. 8, 64K, 2G), got {text}")
    return text


def size_or_zero(text: str) -> str:
    """A size, or 0 for off."""
    return text if text.strip() == "0" else byte_size(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--backends", type=name_list(BACKENDS), default=None,
        help=f"comma list of {', '.join(BACKENDS)} "
        f"(default: {GPU_DEFAULT_BACKENDS} with GPUs, gloo without)")  # fmt: skip
    add("--collectives", type=name_list(COLLECTIVES), default=None,
        help="comma list (default: all_reduce on CPU; "
        f"{GPU_DEFAULT_COLLECTIVES} on GPUs)")  # fmt: skip
    add("--dtype", default="fp32", choices=DTYPES, help="element type (default fp32)")
    add("-b", "--min-bytes", type=byte_size, default="8", help="smallest size (default 8)")
    add("-e", "--max-bytes", type=byte_size, default=None,
        help="largest size (default 2G on GPUs, 1M on CPU)")  # fmt: skip
    add("-f", "--factor", type=int_at_least(2), default=4, help="size step factor (default 4)")
    add("--iters", type=int_at_least(1), default=20, help="calls per timed repetition (default 20)")
    add("--warmup", type=int_at_least(0), default=5, help="untimed calls first (default 5)")
    add("--reps", type=int_at_least(1), default=5,
        help="timed repetitions; the median counts (default 5)")  # fmt: skip
    add("--rounds", type=int_at_least(1), default=1, help="sweeps over every size; at each size "
        "every backend is timed in turn, the order reversed every size and every round; each "
        "figure is the median over rounds (default 1)")  # fmt: skip
    add("--graph-max-bytes", type=size_or_zero, default="64M",
        help="also time in a CUDA graph up to this size (0: off; default 64M)")  # fmt: skip
    add("--check-max-bytes", type=size_or_zero, default="64M",
        help="check results on the host up to this size (0: off; default 64M)")  # fmt: skip
    add("--buffer-bytes", type=byte_size, default=None, help="p2p symmetric buffer per rank "
        "(default: P2PConfig's, 32M)")  # fmt: skip
    add("--auto-thresholds", choices=AUTO_THRESHOLDS, default="measured",
        help="p2p sizes for auto: the crossovers of a first sweep, in as many rounds, over "
        "the single backends listed (default; list nccl and p2p-push/-oneshot/-twoshot) or "
        "P2PConfig's defaults (what auto ships with)")  # fmt: skip
    add("--world", type=int_at_least(2), default=None,
        help="ranks (default: visible GPUs, or 2 on CPU)")  # fmt: skip
    add("--cpu", action="store_true", help="stay on the CPU even where GPUs are visible")
    add("--reference", type=existing_path, action="append", default=[],
        help="nccl-tests output file or folder to compare with; repeatable "
        "(default: none)")  # fmt: skip
    add("--nccl-tests", default=None, metavar="DIR", help="folder of nccl-tests binaries "
        "(all_reduce_perf, ...): run them after the ranks, eagerly and in a CUDA graph, and "
        "put their time beside every backend's (default: not run)")  # fmt: skip
    add("--out", default=None, help="folder for comm.json, comm.txt and the PNG plots "
        "(default: nothing saved)")  # fmt: skip
    add("--json", action="store_true", help="end with the results as one JSON line")


@dataclass(frozen=True, kw_only=True, slots=True)
class CommOptions:
    """What one ``rankgate bench comm`` run measures, and how."""

    world: int
    """Ranks."""
    on_gpu: bool
    """One GPU per rank (NCCL and p2p); False: gloo ranks on the CPU."""
    backends: tuple[str, ...]
    """Backends swept, in order (names of :data:`BACKENDS`)."""
    collectives: tuple[str, ...]
    """Collectives measured for each backend (forced p2p backends: all_reduce only)."""
    dtype: str
    """Element type, one of :data:`DTYPES`."""
    sizes: tuple[int, ...]
    """Message sizes in bytes, before each collective fits them to its element count."""
    iters: int = 20
    """Back-to-back calls per timed repetition."""
    warmup: int = 5
    """Untimed calls before the repetitions."""
    reps: int = 5
    """Timed repetitions; their median is the figure."""
    rounds: int = 1
    """Sweeps over every size, the backends in turn at each; the median over rounds counts."""
    graph_max: int = 0
    """Sizes up to this are timed in a CUDA graph too (0: never; always 0 on the CPU)."""
    check_max: int = 64 << 20
    """Results are checked on the host up to this size."""
    buffer_bytes: int | None = None
    """The p2p symmetric buffer per rank; None: P2PConfig's default."""
    auto_thresholds: str = "measured"
    """``measured``: auto's sizes from a calibrating sweep of the single backends;
    ``defaults``: P2PConfig's shipped sizes."""
    nccl_tests: str | None = None
    """Folder of the user's nccl-tests binaries, run beside the bench (None: not run)."""

    def __post_init__(self) -> None:
        for name in ("world", "iters", "reps", "rounds"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name} must be >= 1")
        if self.warmup < 0:
            raise ValueError("--warmup must be >= 0")
        for b in self.backends:
            if b not in BACKENDS:
                raise ValueError(f"unknown backend {b!r}; valid: {', '.join(BACKENDS)}")
        for c in self.collectives:
            if c not in COLLECTIVES:
                raise ValueError(f"unknown collective {c!r}; valid: {', '.join(COLLECTIVES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        if self.auto_thresholds not in AUTO_THRESHOLDS:
            raise ValueError(f"--auto-thresholds is one of {', '.join(AUTO_THRESHOLDS)}")
        if not self.sizes:
            raise ValueError("no message sizes: check -b, -e and -f")
        if self.nccl_tests is not None and not os.path.isdir(self.nccl_tests):
            raise ValueError(
                f"--nccl-tests {self.nccl_tests}: not a folder (give the one holding "
                "all_reduce_perf and the other nccl-tests binaries)"
            )
        gpu_only = [b for b in self.backends if b not in ("gloo", "auto")]  # auto: gloo on CPU
        if gpu_only and not self.on_gpu:
            raise ValueError(
                f"--backends {','.join(gpu_only)} needs one GPU per rank and this run is on the "
                f"CPU ({self.world} ranks); use --backends gloo, or run where "
                f"{self.world} GPUs are visible without --cpu"
            )

    @classmethod
    def from_args(cls, args: argparse.Namespace, gpus: int) -> CommOptions:
        """The record for ``args`` on a machine with ``gpus`` visible GPUs."""
        from rankgate.bench.busbw import message_sizes

        gpus = 0 if args.cpu else gpus
        world = args.world or (gpus if gpus >= 2 else 2)
        on_gpu = gpus >= world
        backends = args.backends or (GPU_DEFAULT_BACKENDS if on_gpu else "gloo")
        collectives = args.collectives or (GPU_DEFAULT_COLLECTIVES if on_gpu else "all_reduce")
        max_bytes = parse_size(args.max_bytes or ("2G" if on_gpu else "1M"))
        return cls(
            world=world,
            on_gpu=on_gpu,
            backends=tuple(backends.split(",")),
            collectives=tuple(collectives.split(",")),
            dtype=args.dtype,
            sizes=tuple(message_sizes(parse_size(args.min_bytes), max_bytes, args.factor)),
            iters=args.iters,
            warmup=args.warmup,
            reps=args.reps,
            rounds=args.rounds,
            graph_max=parse_size(args.graph_max_bytes) if on_gpu else 0,
            check_max=parse_size(args.check_max_bytes),
            buffer_bytes=parse_size(args.buffer_bytes) if args.buffer_bytes else None,
            auto_thresholds=args.auto_thresholds,
            nccl_tests=getattr(args, "nccl_tests", None),
        )

    def p2p_config(self, **sizes):
        """A P2PConfig on this run's buffer (P2PConfig's own default when none was given)."""
        from rankgate.workloads.comm import P2PConfig

        if self.buffer_bytes is not None:
            sizes["buffer_bytes"] = self.buffer_bytes
        return P2PConfig(**sizes)

    def as_meta(self) -> dict:
        """JSON-ready, for ``meta.options`` (sizes are in the results)."""
        out = dataclasses.asdict(self)
        del out["sizes"]
        out["backends"], out["collectives"] = list(self.backends), list(self.collectives)
        return out
