"""``--rankgate-shard K/N`` and ``--rankgate-store-durations`` through real pytest runs."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

pytestmark = pytest.mark.dist

SUITE = """
    import time
    import pytest

    @pytest.mark.parametrize("i", range(9))
    def test_plain(i):
        pass

    @pytest.mark.world(2)
    @pytest.mark.parametrize("i", range(3))
    def test_world(rank, i):
        pass

    @pytest.mark.slow
    def test_slow_one():
        pass

    class TestGroup:
        def test_a(self):
            pass

        def test_b(self):
            pass
    """


def _collected(result) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(" ")]


def test_every_test_lands_in_exactly_one_shard(inner, pytester):
    # Stored times for some tests, none for the others (counted at the mean of the known).
    stored = {f"test_inner.py::test_plain[{i}]": 0.5 * (i + 1) for i in range(6)}
    stored["test_inner.py::test_world[0]"] = 4.0
    stored["test_inner.py::test_gone"] = 99.0  # a test no longer there counts for nothing
    (pytester.path / "d.json").write_text(json.dumps(stored))
    everything = _collected(inner(SUITE, "--collect-only", "-q", "-m", "not slow"))
    assert len(everything) == 14
    for shards in (1, 2, 3, 4):
        seen: list[str] = []
        for k in range(1, shards + 1):
            result = inner(
                SUITE, "--collect-only", "-q", "-m", "not slow",
                f"--rankgate-shard={k}/{shards}", "--rankgate-durations=d.json",
            )  # fmt: skip
            mine = _collected(result)
            assert result.ret == 0, result.stdout.str()
            assert f"rankgate shard {k}/{shards}: {len(mine)} of 14 tests" in result.stdout.str()
            # The others are deselected, counted as pytest counts -m's (the slow test too).
            assert f"{len(mine)}/15 tests collected ({15 - len(mine)} deselected)" in (
                result.stdout.str()
            )
            seen += mine
        assert sorted(seen) == sorted(everything), f"{shards} shards"
        assert len(seen) == len(set(seen))


def test_two_shards_balance_the_stored_times(inner, pytester):
    stored = {f"test_inner.py::test_plain[{i}]": float(i + 1) for i in range(9)}  # 45 s
    (pytester.path / "d.json").write_text(json.dumps(stored))
    source = """
        import pytest

        @pytest.mark.parametrize("i", range(9))
        def test_plain(i):
            pass
        """
    result = inner(
        source, "--collect-only", "-q", "--rankgate-shard=2/2", "--rankgate-durations=d.json"
    )
    # LPT: 9,6,5,2,1 | 8,7,4,3 -> 23 s and 22 s, 4.5 % apart.
    assert "predicted 22.0 s (shards: 23.0, 22.0 s; times from d.json)" in result.stdout.str()
    assert sorted(_collected(result)) == sorted(
        f"test_inner.py::test_plain[{i}]" for i in (2, 3, 6, 7)
    )


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--rankgate-shard=3/2"], "--rankgate-shard '3/2': K must be 1 to N"),
        (["--rankgate-shard=0/2"], "got K=0, N=2"),
        (["--rankgate-shard=one/2"], "write K/N with whole numbers"),
        (
            ["--rankgate-shard=1/2", "--rankgate-durations=none.json"],
            "durations file none.json does not exist",
        ),
        (
            ["--rankgate-shard=1/2", "--rankgate-durations=bad.json"],
            "durations file bad.json is not JSON",
        ),
        (["--rankgate-store-durations=bad.json"], "durations file bad.json is not JSON"),
    ],
)
def test_bad_input_is_a_usage_error_before_any_test_runs(inner, pytester, args, problem):
    (pytester.path / "bad.json").write_text("{not json")
    result = inner("def test_a():\n    raise SystemExit('ran')\n", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert problem in result.stderr.str()
    assert (pytester.path / "bad.json").read_text() == "{not json"


def test_store_records_world_tests_wall_time_and_merges(inner, pytester):
    (pytester.path / "d.json").write_text(json.dumps({"test_other.py::test_kept": 7.0}))
    source = """
        import time
        import pytest

        @pytest.mark.world(2)
        def test_world_sleeps(rank):
            time.sleep(0.4 + 0.3 * rank)  # the test lasts as long as its slowest rank

        def test_quick():
            pass

        def test_fails():
            assert False
        """
    result = inner(source, "--rankgate-store-durations=d.json", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1)
    assert "rankgate: stored 3 tests' durations in d.json" in result.stdout.str()
    stored = json.loads((pytester.path / "d.json").read_text())
    assert set(stored) == {
        "test_other.py::test_kept",
        "test_inner.py::test_world_sleeps",
        "test_inner.py::test_quick",
        "test_inner.py::test_fails",
    }
    assert stored["test_other.py::test_kept"] == 7.0
    assert stored["test_inner.py::test_world_sleeps"] >= 0.7
    assert stored["test_inner.py::test_quick"] < 0.5
    # The next run splits by what this one stored: the world test alone in one shard.
    again = inner(
        source, "--collect-only", "-q", "--rankgate-shard=1/2", "--rankgate-store-durations=d.json"
    )
    assert _collected(again) == ["test_inner.py::test_world_sleeps"]


@pytest.mark.slow
@pytest.mark.torch_dist
def test_in_place_every_rank_runs_the_same_shard_and_rank_0_stores(tmp_path):
    (tmp_path / "test_suite.py").write_text(textwrap.dedent(SUITE))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    stored = {f"test_suite.py::test_plain[{i}]": 0.1 * i for i in range(9)}
    (tmp_path / "d.json").write_text(json.dumps(stored))
    proc = run_torchrun_pytest(
        tmp_path, "-q", "test_suite.py", "-m", "not slow", "--rankgate-shard=2/2",
        "--rankgate-store-durations=d.json", "--junitxml=out/junit.xml", timeout=180,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = {
        rank: sorted(
            c.get("name")
            for c in ET.parse(tmp_path / "out" / f"junit.rank{rank}.xml").iter("testcase")
        )
        for rank in (0, 1)
    }
    # Both ranks picked the same shard, then shared it out: the world tests on both, each
    # other test on one of them.
    shard = set(names[0]) | set(names[1])
    both = set(names[0]) & set(names[1])
    assert 0 < len(shard) < 14
    assert both == {n for n in shard if n.startswith("test_world")}
    assert set(names[0]) - both and set(names[1]) - both
    after = json.loads((tmp_path / "d.json").read_text())
    # Rank 0 stores the times of the whole shard, those rank 1 ran too.
    ran = {n.split("::")[-1] for n in after if n not in stored}
    assert ran | {n for n in shard if n.startswith("test_plain")} == shard, (ran, shard)
    assert all(n.split("::")[-1] in shard or n in stored for n in after)
    assert f"rankgate: stored {len(shard)} tests' durations in d.json" in proc.stdout


def test_under_xdist_the_controller_stores_every_workers_tests(inner, pytester):
    source = """
        import pytest

        @pytest.mark.parametrize("i", range(6))
        def test_plain(i):
            pass

        @pytest.mark.world(2)
        def test_world(rank):
            pass
        """
    result = inner(source, "-n", "2", "--rankgate-store-durations=d.json", subprocess=True)
    result.assert_outcomes(passed=7)
    assert "rankgate: stored 7 tests' durations in d.json" in result.stdout.str()
    assert len(json.loads((pytester.path / "d.json").read_text())) == 7
    # Each worker collects and splits alike: shard 1 of 2 runs its half, once.
    shard = inner(
        source, "-n", "2", "--rankgate-shard=1/2", "--rankgate-durations=d.json", subprocess=True
    )
    alone = inner(
        source, "--collect-only", "-q", "--rankgate-shard=1/2", "--rankgate-durations=d.json"
    )
    shard.assert_outcomes(passed=len(_collected(alone)))
    assert 0 < len(_collected(alone)) < 7
