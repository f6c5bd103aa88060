"""Real per-rank JUnit files, written by real pytest runs (one subprocess per rank)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.once import once_per_run

# One test module whose outcome depends on the rank it is told it runs as
# (RG_TEST_RANK, not RANK: the harness's in-place mode must not wake up).
RANKED_TESTS = textwrap.dedent(
    """
    import os
    import sys

    import pytest

    RANK = int(os.environ["RG_TEST_RANK"])


    def test_pass():
        print(f"hello from rank {RANK}")


    def test_fail_on_rank1():
        assert RANK != 1, f"rank {RANK} is broken"


    @pytest.fixture
    def breaks_on_rank2():
        if RANK == 2:
            raise RuntimeError("fixture broke on rank 2")


    def test_error_on_rank2(breaks_on_rank2):
        pass


    def test_skip_everywhere():
        pytest.skip("no GPU here")


    def test_skip_on_rank1():
        if RANK == 1:
            pytest.skip("rank 1 skips")


    if RANK == 0:
        def test_only_on_rank0():
            pass


    @pytest.mark.parametrize("x", [1, 2])
    def test_param(x):
        assert x


    def test_fail_everywhere():
        print(f"stderr of rank {RANK}", file=sys.stderr)
        raise ValueError(f"boom on rank {RANK}")


    @pytest.mark.xfail(reason="known bug")
    def test_xfail():
        assert False
    """
)

EXPECTED_VERDICTS = {  # what merge-junit must make of three ranks of RANKED_TESTS
    "test_ranked::test_pass": "passed",
    "test_ranked::test_fail_on_rank1": "failed",
    "test_ranked::test_error_on_rank2": "error",
    "test_ranked::test_skip_everywhere": "skipped",
    "test_ranked::test_skip_on_rank1": "error",
    "test_ranked::test_only_on_rank0": "error",
    "test_ranked::test_param[1]": "passed",
    "test_ranked::test_param[2]": "passed",
    "test_ranked::test_fail_everywhere": "failed",
    "test_ranked::test_xfail": "xfailed",
}


def inner_pytest_env() -> dict[str, str]:
    """The environment of a pytest run inside a test: plain pytest, no rankgate harness."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return env


def run_pytest_as_ranks(
    directory: Path, ranks: range, *args: str, junit_name: str = "junit.rank{rank}.xml"
) -> list[Path]:
    """Run test_ranked.py once per rank, side by side, each writing its own JUnit file."""
    (directory / "test_ranked.py").write_text(RANKED_TESTS)
    env = inner_pytest_env()
    procs, paths = [], []
    for rank in ranks:
        path = directory / junit_name.format(rank=rank)
        cmd = [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-o", "junit_logging=all", f"--junitxml={path}", *args, "test_ranked.py",
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=directory, env={**env, "RG_TEST_RANK": str(rank)},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            )
        )
        paths.append(path)
    for proc, path in zip(procs, paths):
        out, _ = proc.communicate(timeout=120)
        assert path.is_file(), f"pytest wrote no {path.name}:\n{out}"
    return paths


@pytest.fixture(scope="session")
def inner_env() -> dict[str, str]:
    return inner_pytest_env()


@pytest.fixture
def expected_verdicts() -> dict[str, str]:
    return dict(EXPECTED_VERDICTS)


# The pytest runs below are made once per run and shared by the xdist workers
# (tests/once.py): their tests only read the files.
@pytest.fixture(scope="session")
def ranked_junit(request, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """junit.rank0..2.xml of test_ranked.py on three ranks."""
    return once_per_run(
        request, lambda: run_pytest_as_ranks(tmp_path_factory.mktemp("ranked"), range(3))
    )


@pytest.fixture(scope="session")
def clean_junit(request, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """junit.rank0..1.xml of the tests of test_ranked.py that pass on every rank."""
    return once_per_run(
        request,
        lambda: run_pytest_as_ranks(
            tmp_path_factory.mktemp("clean"), range(2), "-k", "test_pass or test_param"
        ),
    )
