"""Command-line and ini options of the harness, and how they combine."""

from __future__ import annotations

import math
import re

import pytest

from rankgate.harness import ledger, rerun_bridge, timeout_bridge
from rankgate.harness.attempts import FLAKY_POLICIES
from rankgate.harness.spec import timeout_problem

SUBWORLD, LAUNCHER = "subworld", "launcher"
"""What LOCAL_RANK counts in an in-place sub-world (ini ``rankgate_subworld_local_rank``):
the sub-world's ranks on their host, or the launcher's (each rank keeps its own and its GPU)."""

DEFAULT_TIMEOUT_S = 300.0
DEFAULT_START_TIMEOUT_S = 120.0
DEFAULT_RENDEZVOUS_TIMEOUT_S = 60.0

MARKERS = {
    "world(n, backend='auto', timeout=None)": (
        "run the test body on n ranks with the default process group initialised"
    ),
    "unit": "single-process tests",
    "dist": "several ranks on CPU (gloo); added to every world test",
    "gpu": "needs CUDA; added to world tests with backend='nccl'",
    "hpc": "needs a SLURM cluster (a local one in CI)",
    "container": "needs podman or docker",
    "perf": "benchmarks: produce numbers, never assert wall time",
    "slow": "takes seconds or more; a quick run (rankgate run --quick) leaves it out",
    "launches": (
        "starts pytest sessions or launchers of its own; skipped where pytest was itself "
        "launched as ranks (in place every rank would start them)"
    ),
    "every_rank": (
        "in place (under a launcher), run this plain test on every rank instead of on one"
    ),
    "torch_dist": "exercises torch.distributed launch paths (torchrun)",
    "mpi_dist": "exercises MPI launch paths (mpirun)",
    "ray_dist": "exercises Ray launch paths",
    "deepspeed_dist": "exercises DeepSpeed launch paths",
}


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("rankgate", "rankgate multi-rank tests")
    group.addoption(
        "--rankgate-timeout",
        type=float,
        default=None,
        help="seconds before a world test counts as hung (overrides ini rankgate_timeout; "
        f"a marker's timeout= overrides both; default: the ini's, else {DEFAULT_TIMEOUT_S:g})",
    )
    group.addoption(
        "--rankgate-seed",
        type=int,
        default=0,
        help="base seed; each test's seed is derived from it and the test id (default 0)",
    )
    group.addoption(
        "--rankgate-mode",
        choices=("auto", "pool", "inplace"),
        default="auto",
        help="how world tests get their ranks: inplace (pytest itself runs as the ranks of "
        "torchrun, srun or mpirun), pool (rankgate's worker pools) or auto (in place when "
        "started by a launcher, else pools; default auto)",
    )
    group.addoption(
        "--rankgate-reruns",
        default=None,
        metavar="N",
        help="rerun a failed (crashed, hung) world test up to N more times on a fresh world "
        "(a new pool; in place, a new process group once every rank agrees); one that then "
        "passes is flaky (overrides ini rankgate_reruns; default 0)",
    )
    group.addoption(
        "--rankgate-flaky",
        default=None,
        metavar="pass|fail",
        help="what a flaky test (failed, then passed a rerun) counts as: pass (listed apart "
        "as flaky) or fail (overrides ini rankgate_flaky; default pass)",
    )
    group.addoption(
        "--rankgate-quarantine",
        default=None,
        metavar="FILE",
        help="a TOML file of quarantined tests (id, reason, issue): they run, and their "
        "failures do not fail the run (overrides ini rankgate_quarantine; default: none; "
        "docs/reruns.md)",
    )
    group.addoption(
        "--rankgate-max-ranks",
        default=None,
        metavar="N",
        help="under pytest-xdist: the most rank processes all workers' pools hold at once "
        "(overrides ini rankgate_max_ranks; default: 8 per CPU this run may use)",
    )
    add_shard_options(group)
    for name, (help_text, kind) in INI_OPTIONS.items():
        parser.addini(name, help_text, type=kind)


INI_OPTIONS: dict[str, tuple[str, str | None]] = {
    "rankgate_reruns": ("reruns of a failed world test (default 0)", None),
    "rankgate_flaky": ("pass or fail: what a flaky test counts as (default pass)", None),
    "rankgate_quarantine": ("TOML file of quarantined tests (default: none)", None),
    "rankgate_timeout": (
        f"seconds before a world test counts as hung (default {DEFAULT_TIMEOUT_S:g})",
        None,
    ),
    "rankgate_start_timeout": (
        f"seconds for a pool to start and rendezvous (default {DEFAULT_START_TIMEOUT_S:g})",
        None,
    ),
    "rankgate_rendezvous_timeout": (
        "seconds ranks wait for each other while joining the process group "
        f"(default {DEFAULT_RENDEZVOUS_TIMEOUT_S:g}); collectives in a test get the test's timeout "
        "plus a margin instead",
        None,
    ),
    "rankgate_max_ranks": (
        "under pytest-xdist: the most rank processes all workers' pools hold at once "
        "(default: 8 per CPU this run may use)",
        None,
    ),
    "rankgate_cold_workers": (
        "under pytest-xdist: start each worker as a new python (its own import of torch) "
        "instead of forked from the run's fork server, which imports torch once for the "
        "run (default false)",
        "bool",
    ),
    "rankgate_subworld_local_rank": (
        "in place, what LOCAL_RANK counts in a sub-world: subworld (its ranks on the host, "
        "the default) or launcher (each rank keeps its launcher's, and its GPU) "
        "(docs/running-in-place.md)",
        None,
    ),
    "rankgate_one_world_per_rank": (
        "in place, each rank joins at most one world of two or more ranks, as a pool's rank "
        "does: for a suite whose set-up happens once per process (docs/subworlds.md; "
        "default false)",
        "bool",
    ),
    "rankgate_worker_setup": (
        "module:function called as function(rank) in every rank before rendezvous (default: none)",
        None,
    ),
    "rankgate_spawn_helpers": (
        "a suite's own spawn helpers to run on rankgate's ranks, one a line: module:function "
        "world=PARAM backend=PARAM args=PARAM kwargs=PARAM env=NAME={local_rank},... "
        "(docs/adopting.md; default: none)",
        "linelist",
    ),
    "rankgate_world_classes": (
        "a suite's own distributed test base classes, one a line: module:Class "
        "world=ATTR marker=MARKER backend=ATTR launcher=ATTR launches=ATTR:VALUE "
        "setup=module:function env=NAME={local_world_size},... (docs/adopting.md; default: none)",
        "linelist",
    ),
}
"""rankgate's ini options: name -> (help, pytest's type; None for a string)."""


def register_markers(config: pytest.Config) -> None:
    for signature, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{signature}: {help_text}")


def _positive_float(config: pytest.Config, ini_name: str, default: float) -> float:
    raw = config.getini(ini_name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(f"ini option {ini_name} = {raw!r} is not a number") from None
    if not value > 0:  # NaN too
        raise pytest.UsageError(f"ini option {ini_name} must be > 0, got {value:g}")
    if not math.isfinite(value):
        raise pytest.UsageError(f"ini option {ini_name} must be a finite number, got {value:g}")
    return value


def default_timeout(config: pytest.Config) -> float:
    cli = config.getoption("rankgate_timeout")
    if cli is not None:
        problem = timeout_problem(cli, "--rankgate-timeout")
        if problem:
            raise pytest.UsageError(problem)
        return cli
    if not config.getini("rankgate_timeout"):
        borrowed = timeout_bridge.session_seconds(config)  # pytest-timeout's --timeout
        if borrowed is not None:
            return borrowed
    value = _positive_float(config, "rankgate_timeout", DEFAULT_TIMEOUT_S)
    problem = timeout_problem(value, "ini option rankgate_timeout")
    if problem:
        raise pytest.UsageError(problem)
    return value


def start_timeout(config: pytest.Config) -> float:
    return _positive_float(config, "rankgate_start_timeout", DEFAULT_START_TIMEOUT_S)


def rendezvous_timeout(config: pytest.Config) -> float:
    return _positive_float(config, "rankgate_rendezvous_timeout", DEFAULT_RENDEZVOUS_TIMEOUT_S)


def local_rank_setting(raw: str) -> str:
    """ini ``rankgate_subworld_local_rank``'s value; ValueError naming the choices."""
    value = (raw or SUBWORLD).strip()
    if value not in (SUBWORLD, LAUNCHER):
        raise ValueError(
            f"ini option rankgate_subworld_local_rank = {raw!r}: set {SUBWORLD} (LOCAL_RANK "
            f"counts a sub-world's ranks on its host; the default) or {LAUNCHER} (each rank "
            "keeps its launcher's LOCAL_RANK and GPU)"
        )
    return value


def subworld_local_rank(config: pytest.Config) -> str:
    try:
        return local_rank_setting(config.getini("rankgate_subworld_local_rank"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def one_world_per_rank(config: pytest.Config) -> bool:
    return _flag(config, "rankgate_one_world_per_rank")


def cold_workers(config: pytest.Config) -> bool:
    return _flag(config, "rankgate_cold_workers")


def _flag(config: pytest.Config, ini_name: str) -> bool:
    try:
        return bool(config.getini(ini_name))
    except (ValueError, pytest.UsageError) as exc:  # pytest's names the value alone
        raise pytest.UsageError(
            f"ini option {ini_name}: {exc}; give true or false (or yes/no, 1/0)"
        ) from None


def check(config: pytest.Config) -> None:
    """Read every option now: a bad value is a usage error at the start, in either mode,
    rather than an error of the first test that would have read it."""
    default_timeout(config)
    # in the order the pool reads them
    rendezvous_timeout(config)
    start_timeout(config)
    worker_setup(config)
    reruns(config)
    flaky_policy(config)
    subworld_local_rank(config)
    one_world_per_rank(config)
    cold_workers(config)
    problem = ledger.setting_problem()
    if problem:
        raise pytest.UsageError(problem)


def _cli_or_ini(config: pytest.Config, name: str) -> tuple[str, str] | None:
    """(where it was said, the value) of ``--rankgate-<name>``, else of ini
    ``rankgate_<name>``; None when neither says it."""
    cli = config.getoption(f"rankgate_{name}")
    if cli is not None:
        return f"--rankgate-{name}", str(cli).strip()
    ini = (config.getini(f"rankgate_{name}") or "").strip()
    return (f"ini option rankgate_{name}", ini) if ini else None


def reruns(config: pytest.Config) -> int:
    """How many times a failed world test runs again (0: never)."""
    said = _cli_or_ini(config, "reruns") or rerun_bridge.global_reruns(config)
    if said is None:
        return 0
    where, raw = said
    try:
        value = int(raw)
    except ValueError:
        raise pytest.UsageError(
            f"{where}={raw!r} is not a whole number (say 2: a failed test runs up to twice more)"
        ) from None
    if value < 0:
        raise pytest.UsageError(f"{where} must be 0 or more, got {value}")
    return value


def flaky_policy(config: pytest.Config) -> str:
    """``pass`` (a flaky test passes, listed apart) or ``fail``."""
    said = _cli_or_ini(config, "flaky")
    if said is None:
        return "pass"
    where, raw = said
    if raw not in FLAKY_POLICIES:
        raise pytest.UsageError(f"{where}={raw!r}: choose pass or fail")
    return raw


def quarantine_file(config: pytest.Config) -> str | None:
    """The quarantine file named by ``--rankgate-quarantine`` or ini ``rankgate_quarantine``
    (an ini path is relative to the ini file's folder)."""
    said = _cli_or_ini(config, "quarantine")
    if said is None:
        return None
    where, raw = said
    if where.startswith("ini") and config.inipath is not None:
        return str(config.inipath.parent / raw)
    return raw


def worker_setup(config: pytest.Config) -> str | None:
    """The ini option rankgate_worker_setup, checked to be ``module:function``."""
    spec = (config.getini("rankgate_worker_setup") or "").strip()
    if spec and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):
        raise pytest.UsageError(
            f"ini option rankgate_worker_setup = {spec!r} is not module:function "
            "(say mypkg.testing:setup_rank, called as setup_rank(rank) on every rank)"
        )
    return spec or None


# --- shards by measured duration (rankgate.harness.shards) -----------------------------


def add_shard_options(group) -> None:
    """``--rankgate-shard K/N`` and the durations files it splits by."""
    group.addoption(
        "--rankgate-store-durations",
        metavar="FILE",
        default=None,
        help="record each test's time (a world test's: its wall time over all ranks) and "
        "merge it into FILE (JSON: node id -> seconds); in place rank 0 writes it (default: "
        "not recorded)",
    )
    group.addoption(
        "--rankgate-durations",
        metavar="FILE",
        default=None,
        help="stored times --rankgate-shard splits by (default: the "
        "--rankgate-store-durations file, when it exists)",
    )
    group.addoption(
        "--rankgate-shard",
        metavar="K/N",
        default=None,
        help="run shard K of N (1-based): tests split by stored time, longest first, each "
        "to the shard with least so far; the other tests are deselected (default: every test)",
    )
