"""The world marker, its fixtures, bad input, and what the pool keeps or resets."""

from __future__ import annotations

import pytest

from rankgate.harness.spec import uses_gpus

pytestmark = pytest.mark.dist


@pytest.mark.parametrize(
    ("marker", "problem"),
    [
        ("world(0)", "world size must be >= 1, got 0"),
        ("world(-1)", "world size must be >= 1, got -1"),
        ("world(1.5)", "world size must be an integer, got 1.5"),
        ("world('2')", "world size must be an integer, got '2'"),
        ("world()", "world() needs the number of ranks, e.g. @pytest.mark.world(2)"),
        ("world(2, backend='mpi')", "unknown backend 'mpi'; valid backends: auto, gloo, nccl"),
        ("world(2, timeout=0)", "timeout must be > 0 seconds, got 0"),
        ("world(2, timeout=-3)", "timeout must be > 0 seconds, got -3"),
        ("world(2, timeout='soon')", "timeout must be a number of seconds, got 'soon'"),
        (
            "world(2, ranks=2)",
            "world() got unknown argument(s) ['ranks']; valid: n, backend, timeout",
        ),
    ],
)
def test_bad_marker_is_a_collection_error_naming_test_and_problem(inner, marker, problem):
    result = inner(
        f"""
        import pytest

        @pytest.mark.{marker}
        def test_bad():
            pass

        def test_good():
            pass
        """,
        "--continue-on-collection-errors",
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"test_inner.py::test_bad: invalid @pytest.mark.world: {problem}"])


def test_nccl_without_enough_gpus_is_a_skip_saying_how_many(inner):
    from rankgate.harness.pool.gpus import visible_gpu_count

    visible = visible_gpu_count()  # every process sees them all, xdist workers too
    if visible >= 2:
        pytest.skip(f"{visible} GPUs: world(2, backend='nccl') runs here")
    result = inner(
        """
        import pytest

        @pytest.mark.world(2, backend="nccl")
        def test_needs_gpus():
            pass
        """
    )
    result.assert_outcomes(skipped=1)
    why = f"world(2, backend='nccl') needs 2 GPUs; {visible} visible here"
    result.stdout.fnmatch_lines([f"SKIPPED*{why}*"])


def test_fixtures_parametrize_and_rank_values(inner, auto_backend_for):
    # world(3) is on GPUs where this host has 3 (the harness's auto rule), else on the CPU
    on_gpus = uses_gpus(auto_backend_for(3))
    source = """
        import pytest
        import torch
        import torch.distributed as dist

        ON_GPUS = None

        @pytest.fixture
        def table(tmp_path):
            return {"rows": [1, 2, 3], "where": tmp_path}

        @pytest.mark.world(3)
        @pytest.mark.parametrize("scale", [1, 10])
        def test_body(rank, world_size, device, dist_tmp_path, table, scale):
            assert world_size == dist.get_world_size() == 3
            assert rank == dist.get_rank()
            assert device == (torch.device("cuda", rank) if ON_GPUS else torch.device("cpu"))
            assert table["where"].is_dir()
            (dist_tmp_path / f"rank{rank}").write_text(str(scale * sum(table["rows"])))
            dist.barrier()
            seen = sorted(p.read_text() for p in dist_tmp_path.iterdir())
            assert seen == [str(6 * scale)] * 3

        class TestInAClass:
            @pytest.mark.world(2)
            def test_method(self, rank):
                t = torch.tensor([rank])
                dist.all_reduce(t)
                assert t.item() == 1
        """
    result = inner(source.replace("ON_GPUS = None", f"ON_GPUS = {on_gpus!r}"), "-v")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["*test_body?1? PASSED*", "*test_body?10? PASSED*", "*test_method PASSED*"]
    )


def test_unpicklable_fixture_is_a_setup_error_naming_it(inner):
    result = inner(
        """
        import threading
        import pytest

        @pytest.fixture
        def lock():
            return threading.Lock()

        @pytest.mark.world(2)
        def test_uses_lock(lock):
            pass
        """
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_uses_lock*",
            "rankgate: fixture 'lock' (lock) cannot be sent into the ranks: TypeError: cannot pickle '_thread.lock' object.*create this object inside the test body*",
        ]
    )


def test_async_world_tests_run_on_every_rank_as_their_plugin_would(
    inner, anyio_plugin_in_inner_runs
):
    # A coroutine body was called and never awaited: a pass that ran nothing. Now it runs
    # as anyio would run it in this process; with no async plugin it fails, as pytest's
    # own check fails it (in place that check runs on each rank).
    result = inner(
        """
        import pytest
        import torch
        import torch.distributed as dist

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        @pytest.mark.world(2)
        @pytest.mark.anyio
        async def test_all_reduce(rank):
            t = torch.ones(1)
            dist.all_reduce(t)
            assert t.item() == 2

        @pytest.mark.world(2)
        @pytest.mark.anyio
        async def test_fails_on_rank_1(rank):
            assert rank == 0, "rank 1 ran the body"

        @pytest.mark.world(2)
        async def test_without_a_plugin(rank):
            pass
        """
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*rank 1 failed; rank 0 passed*",
            "*AssertionError: rank 1 ran the body*",
            "*ranks 0, 1 failed*",
            "RuntimeError: async def test body, but no async plugin runs it*",
        ]
    )


@pytest.mark.parametrize("as_error", [False, True], ids=["warning", "error"])
def test_a_world_test_that_returns_a_value_gets_pytests_warning(inner, as_error):
    # `return t.item() == 3` for `assert ...` passes whatever the value: pytest warns a
    # plain test of it, and now a world test too (and fails it under -W error).
    source = """
        import pytest

        @pytest.mark.world(2)
        def test_returns(rank):
            return rank == 5
        """
    args = ["-W", "error::pytest.PytestReturnNotNoneWarning"] if as_error else []
    result = inner(source, *args)
    message = (
        "*PytestReturnNotNoneWarning: Test functions should return None, but "
        "test_inner.py::test_returns returned bool on ranks 0, 1."
    )
    if as_error:
        result.assert_outcomes(failed=1)
    else:
        result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([message, "*Did you mean to use `assert` instead of `return`?"])


def test_what_the_controllers_set_up_gives_the_instance_reaches_every_rank(inner):
    # setup_method and fixtures that set self.x run in the controller, as fixtures do;
    # the ranks' own instances get those attributes (in place each rank runs them itself).
    result = inner(
        """
        import threading
        import pytest

        @pytest.mark.world(2)
        class TestState:
            def setup_method(self):
                self.base = 40

            @pytest.fixture(autouse=True)
            def _more(self):
                self.more = 2

            def test_sees_it(self, rank):
                assert self.base + self.more == 42

        @pytest.mark.world(2)
        class TestLock:
            def setup_method(self):
                self.lock = threading.Lock()

            def test_uses_lock(self, rank):
                pass
        """
    )
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of TestLock.test_uses_lock*",
            "rankgate: self.lock (lock) cannot be sent into the ranks: TypeError: cannot pickle '_thread.lock' object.*create this object inside the test body*",
        ]
    )


def test_what_set_up_changes_in_the_environment_and_directory_reaches_every_rank(inner):
    # An autouse monkeypatch.setenv in a conftest is common: before, it reached the
    # controller only, and a world test that passed under torchrun failed in the pool.
    result = inner(
        """
        import os
        import pytest

        os.environ["GONE_IN_TEST"] = "at import"  # before the pool starts: the ranks have it

        @pytest.fixture(scope="session", autouse=True)
        def session_flag():
            os.environ["SESSION_FLAG"] = "s"  # after the pool started, kept for every test

        @pytest.fixture
        def in_tmp(tmp_path, monkeypatch):
            monkeypatch.setenv("TEST_FLAG", "t")
            monkeypatch.delenv("GONE_IN_TEST")
            monkeypatch.chdir(tmp_path)
            return tmp_path

        @pytest.mark.world(2)
        def test_set_up_here(rank, in_tmp):
            assert (os.environ["TEST_FLAG"], os.getcwd()) == ("t", str(in_tmp))
            assert "GONE_IN_TEST" not in os.environ
            assert (os.environ["SESSION_FLAG"], os.environ["RANK"]) == ("s", str(rank))

        @pytest.mark.world(2)
        def test_undone_for_the_next(rank):
            assert "TEST_FLAG" not in os.environ
            assert os.environ["GONE_IN_TEST"] == "at import"
            assert (os.environ["SESSION_FLAG"], os.environ["RANK"]) == ("s", str(rank))
        """,
        subprocess=True,  # the module sets os.environ: not in this process
    )
    result.assert_outcomes(passed=2)


@pytest.mark.parametrize(
    "use", ["[10, 20][rank]", 'f"shard-{rank}.bin"'], ids=["index", "f_string"]
)
def test_rank_used_inside_a_fixture_explains_the_rule(inner, use):
    result = inner(
        f"""
        import pytest

        @pytest.fixture
        def shard(rank):
            return {use}

        @pytest.mark.world(2)
        def test_shard(shard):
            pass
        """
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*RuntimeError: the 'rank' fixture has no value outside a rank: fixtures run once in the controller*"
        ]
    )


def test_pool_is_reused_and_state_reset_between_tests(inner):
    result = inner(
        """
        import os, random
        import pytest
        import torch
        import torch.distributed as dist

        PIDS = {}

        @pytest.mark.world(2)
        def test_leaks(rank, dist_tmp_path):
            torch.set_default_dtype(torch.float64)
            os.environ["LEAKED"] = "1"
            dist.new_group([0, 1])
            (dist_tmp_path.parent / f"pid-a-{rank}").write_text(str(os.getpid()))

        @pytest.mark.world(2)
        def test_clean(rank, dist_tmp_path):
            assert torch.get_default_dtype() == torch.float32
            assert "LEAKED" not in os.environ
            from torch.distributed.distributed_c10d import _world
            assert len(_world.pg_map) == 1, "a subgroup leaked from the previous test"
            (dist_tmp_path.parent / f"pid-b-{rank}").write_text(str(os.getpid()))

        @pytest.mark.world(2)
        @pytest.mark.parametrize("i", [0, 1])
        def test_seeded(i, dist_tmp_path):
            (dist_tmp_path.parent / f"seed-{i}").write_text(str(torch.rand(1).item()))
        """,
        "-p",
        "no:randomly",
        "--basetemp=bt",
    )
    result.assert_outcomes(passed=4)
    base = inner.pytester.path / "bt"
    read = lambda name: (base / name).read_text()  # noqa: E731
    assert [read("pid-a-0"), read("pid-a-1")] == [read("pid-b-0"), read("pid-b-1")]
    # Each test has its own seed, derived from its id: parametrized twins differ.
    assert read("seed-0") != read("seed-1")


def test_same_seed_on_every_rank_and_across_runs(inner):
    source = """
        import pytest, torch, torch.distributed as dist

        @pytest.mark.world(2)
        def test_draw(rank, dist_tmp_path):
            x = torch.rand(4)
            everyone = [torch.zeros(4), torch.zeros(4)]
            dist.all_gather(everyone, x)
            assert torch.equal(everyone[0], everyone[1]), "ranks drew different numbers"
            print("draw", x.tolist())
        """
    first = inner(source, "-s").stdout.str()
    second = inner(source, "-s").stdout.str()
    draws = [line for line in first.splitlines() if "draw [" in line]
    assert draws and draws == [line for line in second.splitlines() if "draw [" in line]


def test_crash_respawns_the_pool_for_the_next_test(inner):
    result = inner(
        """
        import os
        import pytest
        import torch.distributed as dist

        @pytest.mark.world(2)
        def test_a(rank, dist_tmp_path):
            (dist_tmp_path.parent / f"a{rank}").write_text(str(os.getpid()))
            if rank == 0:
                os._exit(1)

        @pytest.mark.world(2)
        def test_b(rank, dist_tmp_path):
            dist.barrier()
            (dist_tmp_path.parent / f"b{rank}").write_text(str(os.getpid()))
        """,
        "--basetemp=bt",
    )
    result.assert_outcomes(passed=1, failed=1)
    base = inner.pytester.path / "bt"
    before = {(base / f"a{r}").read_text() for r in (0, 1)}
    after = {(base / f"b{r}").read_text() for r in (0, 1)}
    assert before.isdisjoint(after), "the crashed pool was reused"


def test_inconsistent_launcher_variables_are_a_usage_error(inner, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # torchrun sets these too
    monkeypatch.setenv("MASTER_PORT", "29500")
    result = inner(
        """
        def test_plain():
            pass
        """
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: rankgate: the launcher's variables are inconsistent: torchrun: rank 2 is "
            "outside 0..1 (RANK='2', WORLD_SIZE='2'). Fix them, or pass --rankgate-mode=pool *"
        ]
    )


@pytest.mark.parametrize("workers", ["2", "auto"])
def test_xdist_workers_under_a_launcher_are_a_usage_error(inner, monkeypatch, workers):
    # Each xdist worker would run a share of the tests on worker pools: the launch's
    # ranks would not run the tests in place, and every launched rank would run them all.
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    result = inner(
        """
        def test_plain():
            pass
        """,
        "--rankgate-mode=inplace",
        "-n",
        workers,
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "ERROR: rankgate: torchrun started this pytest as rank 1 of 2, and pytest-xdist "
            f"was asked for {'*' if workers == 'auto' else workers} worker(s) (-n): in place, "
            "every rank runs every test itself, in the same order. Pass -n 0 under the "
            "launcher, or run pytest without the launcher to use worker pools (-n works there)"
        ]
    )
