"""Every ``rankgate bench`` subcommand checks its numbers and lists when it parses them:
a bad value is one line naming the option, the value and what is allowed, exit 2, no
traceback, and no rank has started (nothing on stdout)."""

from __future__ import annotations

import sys

import pytest

from rankgate import cli

pytestmark = pytest.mark.unit

LENGTHS = "a comma list of lengths >= 1, K = 1024 (e.g. 16K,32K or 256,512)"
WORLDS = "a comma list of integers >= 1 (e.g. 1,2,4)"
METHODS = "single, ring, torch-cp"

CASES = [
    # attention: lists
    (["attention", "--seq-lens", "abc"], f"argument --seq-lens: expected {LENGTHS}, got 'abc'"),
    (["attention", "--seq-lens", "0"], f"argument --seq-lens: expected {LENGTHS}, got '0'"),
    (["attention", "--seq-lens", "16K,"], f"argument --seq-lens: expected {LENGTHS}, got '16K,'"),
    (["attention", "--worlds", "abc"], f"argument --worlds: expected {WORLDS}, got 'abc'"),
    (["attention", "--worlds", "0,2"], f"argument --worlds: expected {WORLDS}, got '0,2'"),
    (["attention", "--methods", "ring,flash"],
     f"argument --methods: 'ring,flash': expected a comma list of {METHODS}"),
    (["attention", "--skip", "ring"],
     f"argument --skip: 'ring': expected METHOD@WORLD (e.g. ring@1), METHOD one of {METHODS}"),
    (["attention", "--skip", "ring@x"],
     f"argument --skip: 'ring@x': expected METHOD@WORLD (e.g. ring@1), METHOD one of {METHODS}"),
    # attention: counts and amounts
    (["attention", "--reps", "0"], "argument --reps: must be an integer >= 1, got 0"),
    (["attention", "--warmup", "-1"], "argument --warmup: must be an integer >= 0, got -1"),
    (["attention", "--batch", "0"], "argument --batch: must be an integer >= 1, got 0"),
    (["attention", "--batch", "two"], "argument --batch: 'two' is not an integer"),
    (["attention", "--heads", "0"], "argument --heads: must be an integer >= 1, got 0"),
    (["attention", "--kv-heads", "0"], "argument --kv-heads: must be an integer >= 1, got 0"),
    (["attention", "--head-dim", "-16"], "argument --head-dim: must be an integer >= 1, got -16"),
    (["attention", "--head-chunks", "0"],
     "argument --head-chunks: must be an integer >= 1, got 0"),
    (["attention", "--fit-cap-gib", "-1"], "argument --fit-cap-gib: must be a number >= 0, got -1"),
    (["attention", "--fit-cap-gib", "inf"],
     "argument --fit-cap-gib: must be a number >= 0, got inf"),
    (["attention", "--min-rep-seconds", "nan"],
     "argument --min-rep-seconds: must be a number >= 0, got nan"),
    (["attention", "--min-rep-seconds", "soon"],
     "argument --min-rep-seconds: 'soon' is not a number"),
    # packing
    *[
        (["packing", f"--{name}", value], f"argument --{name}: must be an integer >= 1, got {value}")
        for name in ("samples", "ranks", "cap", "repeats")
        for value in ("0", "-3")
    ],
    (["packing", "--ranks", "eight"], "argument --ranks: 'eight' is not an integer"),
    # comm: lists
    (["comm", "--backends", "nccl,mpi"],
     "argument --backends: 'nccl,mpi': expected a comma list of auto, p2p, nccl, gloo, "
     "p2p-push, p2p-oneshot, p2p-twoshot"),
    (["comm", "--collectives", "all_reduce,alltoall"],
     "argument --collectives: 'all_reduce,alltoall': expected a comma list of all_reduce, "
     "broadcast, all_gather, reduce_scatter, gather, send_recv"),
    (["comm", "--reference", "/nonexistent/nccl.txt"],
     "argument --reference: /nonexistent/nccl.txt: no such file or folder"),
    (["comm", "--check-max-bytes", "-1"],
     "argument --check-max-bytes: '-1' is not a size (e.g. 8, 64K, 2G)"),
    # compare, ledger, harness
    (["compare", "--threshold", "pool_median_ms"],
     "argument --threshold: 'pool_median_ms': expected METRIC=FRACTION, the fraction above 0 "
     "and below 10 (e.g. pool_median_ms=0.15)"),
    (["compare", "--threshold", "pool_median_ms=-0.1"],
     "argument --threshold: 'pool_median_ms=-0.1': expected METRIC=FRACTION, the fraction "
     "above 0 and below 10 (e.g. pool_median_ms=0.15)"),
    (["ledger", "--calls", "10"], "argument --calls: must be an integer >= 100, got 10"),
    (["ledger", "--repeat-inner", "0"], "argument --repeat-inner: must be an integer >= 1, got 0"),
    (["harness", "--worlds", "2", "x"], "argument --worlds: 'x' is not an integer"),
]  # fmt: skip

# Options that are fine alone and contradict each other, or this machine (no GPU here):
# checked before any rank starts, one line, exit 2 (``rankgate bench`` names no subcommand).
CROSS_CASES = [
    (["attention", "--cpu", "--worlds", "3,2"],
     "--worlds 3,2: each must divide the largest (3), which runs the smaller ones as groups "
     "side by side"),
    (["attention", "--cpu", "--worlds", "1,2", "--seq-lens", "102"],
     "--seq-lens: 102 is not a multiple of 2*world=4 (--worlds 1,2)"),
    (["attention", "--cpu", "--heads", "3"], "--heads 3 must be a multiple of --kv-heads 2"),
    (["attention", "--cpu", "--heads", "4", "--kv-heads", "4", "--head-chunks", "3"],
     "--head-chunks 3 must divide --kv-heads 4"),
    (["ledger", "--backends", "nccl"],
     "--backends nccl needs a CUDA GPU; none is visible. Use --backends gloo"),
]  # fmt: skip


def _main(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["rankgate"])  # cli.main rewrites sys.argv
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("argv", "line"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_bench_value_is_one_line_and_exit_2(argv, line, monkeypatch, capsys):
    got = _main(["bench", *argv], monkeypatch, capsys)
    assert got == (2, "", f"rankgate bench {argv[0]}: error: {line}\n")


@pytest.mark.parametrize(("argv", "line"), CROSS_CASES, ids=[" ".join(a) for a, _ in CROSS_CASES])
def test_bench_options_that_cannot_run_together_are_one_line_and_exit_2(
    argv, line, monkeypatch, capsys
):
    if argv[0] == "ledger":
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is visible: --backends nccl can run here")
    got = _main(["bench", *argv], monkeypatch, capsys)
    assert got == (2, "", f"rankgate bench: error: {line}\n")


@pytest.mark.parametrize("module", ["rankgate.bench.attention", "rankgate.bench.comm"])
def test_running_a_bench_module_directly_checks_the_same_way(module, capsys):
    import importlib

    argv = ["--cpu", "--heads", "3"] if module.endswith("attention") else ["--cpu", "--backends",
                                                                           "nccl"]  # fmt: skip
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(module).main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"rankgate bench {module.rsplit('.', 1)[1]}: error: --")


def test_skip_names_one_world_however_it_is_written():
    from rankgate.bench.attention import METHODS
    from rankgate.bench.benchargs import method_at_world_list

    assert method_at_world_list(METHODS)("ring@01, torch-cp@2,") == ["ring@1", "torch-cp@2"]
