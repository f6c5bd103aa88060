"""What runs inside each rank process of a pool.

Imports only the standard library, torch and the harness's rank-side modules (messages,
heap, leaks, ledger, ledgerdump, rankstate, rankwarnings, ranklogs, bells; never pytest),
so it can be preloaded into the fork server cheaply and read on its own. A rank:
redirects fds 1 and 2 to its own log files (so C-level output, crash messages and
faulthandler stacks land there too), joins the process group through a FileStore,
then runs test bodies until told to stop.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import importlib.util
import multiprocessing
import os
import pickle
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rankgate.harness import heap, hypothesis_bridge, leaks, ledger
from rankgate.harness.aftertest import AfterTestCheck
from rankgate.harness.pool import (
    bells,
    ledgerdump,
    messages,
    rankcoverage,
    ranklogs,
    rankwarnings,
)
from rankgate.harness.rankstate import (
    EnvironmentSnapshot,
    accelerators,
    breaks_process_group,
    call_worker_setup,
    destroy_subgroups,
    hint_for,
    reset_state,
    same_examples_on_every_rank,
    seed_everything,
    set_collective_timeout,
)


def worker_main(conn, config: messages.RankConfig) -> None:
    """Entry point of a rank process (what the fork server's child runs)."""
    os.setsid()  # own process group, so a kill of the group reaches the rank's children
    leaks.become_subreaper()  # and orphaned grandchildren come back to it, to be found
    _redirect_output(Path(config.stdout), Path(config.stderr))
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(messages.STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
    # Exactly its controller's environment: the run's fork server was started by another
    # process (under xdist the run's controller), with that process's.
    os.environ.clear()
    os.environ.update(config.env)
    # The test's own processes (DataLoader workers, a multiprocessing.Pool) start as in a
    # plain process: fork on Linux, whatever the fork server's interpreter chose.
    multiprocessing.set_start_method(None, force=True)
    rank = config.rank
    _exit_with_controller(config.controller_pid)
    _sync_sys_path(config.sys_path)
    rankcoverage.start_in_rank()  # the controller's pytest-cov settings, when it measures
    try:
        call_worker_setup(config.setup_hook, rank)
        torch.set_num_threads(config.threads)
        store = dist.FileStore(config.store_path, config.world)
        dist.init_process_group(
            config.backend,
            store=store,
            rank=rank,
            world_size=config.world,
            # Bounds the rendezvous only: each test sets its collectives' timeout.
            timeout=timedelta(seconds=config.rendezvous_timeout),
            **_device_kwargs(config),
        )
    except BaseException as exc:  # the controller reports it as an infrastructure error
        conn.send_bytes(messages.encode(messages.START_FAILED, rank=rank, error=_format(exc)))
        sys.stderr.flush()
        os._exit(3)
    accelerators()  # the driver's start, outside every test's timeout
    ledger.install(config.backend)
    pool_dir = Path(config.store_path).parent
    ledgerdump.serve(pool_dir, rank)
    rope = bells.BellRope(pool_dir)  # before READY: no ring is missed
    heap.keep_out_of_collections(tests_ran=False)  # torch and the harness, forked ready-made
    conn.send_bytes(messages.encode(messages.READY, rank=rank, pid=os.getpid()))
    # Taken once: a test's leftovers are ended after it, so this is also what every later
    # test starts with (a scan reads each thread's children, about 25 us a thread).
    _serve(conn, rope, config, set(leaks.children()))
    rankcoverage.save_in_rank()


def _exit_with_controller(controller_pid: int) -> None:
    """End this rank when the controller is gone (killed by CI, say), even mid-hang."""

    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(controller_pid, 0)
            except ProcessLookupError:
                os._exit(70)

    threading.Thread(target=watch, name="rankgate-controller-watch", daemon=True).start()


def _device_kwargs(config: messages.RankConfig) -> dict[str, Any]:
    if "nccl" in config.backend:  # nccl, or auto's cpu:gloo,cuda:nccl
        local = config.rank
        torch.cuda.set_device(local)
        return {"device_id": torch.device("cuda", local)}
    return {}


def _redirect_output(stdout: Path, stderr: Path) -> None:
    for path, fd in ((stdout, 1), (stderr, 2)):
        file_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(file_fd, fd)
        os.close(file_fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - lives as long as the rank
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115


def _serve(
    conn, rope: bells.BellRope, config: messages.RankConfig, children_before: set[int]
) -> None:
    while True:
        rope.wait()  # the controller wrote to every rank's pipe, then rang once
        name, kwargs = messages.decode_for_rank(conn.recv_bytes())
        if name == messages.SHUTDOWN:
            _shutdown()
            return
        result = _run_test(kwargs["task"], config, children_before)
        conn.send_bytes(messages.encode(messages.RESULT, **result))


def _shutdown() -> None:
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def _run_test(
    task: messages.TestTask, config: messages.RankConfig, children_before: set[int]
) -> dict[str, Any]:
    rank = config.rank
    # The last test's groups: every rank has finished it, since the controller sends a
    # test only once all ranks have answered the one before.
    destroy_subgroups()
    ledger.begin_test()
    saved_env, saved_cwd = EnvironmentSnapshot(), os.getcwd()
    check = AfterTestCheck(children_before)
    start = time.perf_counter()
    outcome, detail, broke_group, returned = "passed", "", False, ""
    warned: list = []
    try:
        func = _load_test_function(task)  # its module's import first, as in the controller
        _take_the_controllers_changes(task)
        kwargs = _fill_rank_values(pickle.loads(task.kwargs), rank, config)
        torch.set_default_dtype(getattr(torch, task.default_dtype))  # reset_state undoes it
        seed_everything(task.seed)
        same_examples_on_every_rank(func, task.seed)
        set_collective_timeout(task.collective_timeout)
        with (
            rankwarnings.recording(task.warning_filters) as warned,
            ranklogs.catching(task.log_settings),
        ):
            if task.prelude:  # an adopted test: the project's variables, set-up and way
                entry = importlib.import_module("rankgate.harness.adopt.rankentry")
                func = entry.enter(task.prelude, func)
            result = None if func is None else func(**kwargs)  # None: the set-up alone ran
            if func is None:
                pass
            elif task.async_backend is not None:
                _await_test_body(result, *task.async_backend)
            elif result is not None:  # `return x == y` for `assert x == y`: pytest warns
                returned = type(result).__name__
    except BaseException as exc:
        outcome, detail = _classify(exc)
        broke_group = breaks_process_group(exc)
    finally:
        duration = time.perf_counter() - start
        sys.stdout.flush()
        sys.stderr.flush()
        reset_state(saved_env, saved_cwd)
    problems = check.problems()
    if problems:
        broke_group = broke_group or not dist.is_initialized()
        outcome, detail = "failed", "\n".join(filter(None, [detail, *problems]))
    return {
        "test_id": task.test_id,
        "rank": rank,
        "outcome": outcome,
        "detail": detail,
        "duration": duration,
        "broke_group": broke_group,
        "returned": returned,
        "warnings": rankwarnings.records(warned),
        "digest": ledger.digest(),  # compared by the controller: the entries stay here
    }


NO_ASYNC_PLUGIN = (
    "async def test body, but no async plugin runs it (@pytest.mark.anyio with anyio, or "
    "pytest-asyncio): it did not run. pytest fails such a test too"
)


def _await_test_body(body, backend: str, options: dict) -> None:
    """Run a coroutine test body to its end as the controller's async plugin would."""
    if not backend:
        body.close()
        raise RuntimeError(NO_ASYNC_PLUGIN)
    if backend == "asyncio" and not options:
        import asyncio

        asyncio.run(body)
        return
    import anyio

    async def run() -> None:
        await body

    anyio.run(run, backend=backend, backend_options=options or None)


def _take_the_controllers_changes(task: messages.TestTask) -> None:
    """What the test's set-up changed in the controller's environment and working
    directory (``monkeypatch.setenv``, ``monkeypatch.chdir`` in a fixture), here too;
    undone with the rest of the test's changes when it ends."""
    for name, value in task.environ.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if task.cwd:
        os.chdir(task.cwd)


def _classify(exc: BaseException) -> tuple[str, str]:
    """pytest.skip/xfail raise their own exceptions: map them without importing pytest."""
    kind = type(exc).__name__
    if kind in ("Skipped", "SkipTest"):  # pytest.skip, unittest's skipTest
        return "skipped", str(getattr(exc, "msg", exc))
    if kind == "XFailed":
        return "xfailed", str(getattr(exc, "msg", exc))
    if kind == "AnotherRankFailedExample":  # hypothesis_bridge: that rank reports it
        return "passed", ""
    hint = hint_for(exc)
    return "failed", _format(exc) + (f"\n{hint}\n" if hint else "")


def _format(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    # Drop the harness's own frames (the worker's, the ledger's wrapper): the user's
    # frames are what explain the failure.
    own = str(Path(__file__).resolve())
    kept = [
        f
        for f in frames
        if str(Path(f.filename).resolve()) != own
        and not ledger.is_wrapper_file(f.filename)
        and not hypothesis_bridge.is_bridge_file(f.filename)
    ]
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(kept)]
    lines += traceback.format_exception_only(type(exc), exc)
    return "".join(lines)


def _fill_rank_values(
    kwargs: dict[str, Any], rank: int, config: messages.RankConfig
) -> dict[str, Any]:
    values = {"rank": rank, "device": _rank_device(config)}
    return {
        key: values[value.name] if isinstance(value, messages.RankValue) else value
        for key, value in kwargs.items()
    }


def _rank_device(config: messages.RankConfig) -> torch.device:
    if "nccl" in config.backend:
        return torch.device("cuda", config.rank)
    return torch.device("cpu")


# --- importing the test function -------------------------------------------------


def _sync_sys_path(entries: list[str]) -> None:
    """Make the controller's import path ours: test modules import as they did there."""
    for entry in reversed(entries):
        if entry not in sys.path:
            sys.path.insert(0, entry)


_CONFTESTS_IMPORTED: set[str] = set()


def _load_test_function(task: messages.TestTask):
    _sync_sys_path(task.sys_path)
    known = len(sys.modules)
    _import_conftests(task.conftests, task.rewrite)
    module = _import_test_module(task.module, task.module_file, task.rewrite)
    if len(sys.modules) != known:  # what the new modules made lives as long as the rank
        heap.keep_out_of_collections(tests_ran=True)
    owner: Any = module
    parts = task.qualname.split(".")
    for part in parts[:-1]:
        owner = getattr(owner, part)
    if isinstance(owner, type):
        if task.class_state:  # what the controller's setup_class set on the class
            for name, value in pickle.loads(task.class_state).items():
                setattr(owner, name, value)
        owner = owner()  # a fresh instance per test, as pytest does (a TestCase: runTest)
        if task.instance_state:  # with what the controller's set-up gave its instance
            vars(owner).update(pickle.loads(task.instance_state))
    return getattr(owner, parts[-1])


def _import_conftests(conftests: tuple[tuple[str, str], ...], rewrite: bool) -> None:
    """The test's conftest.py files, once per rank: their module-level set-up (a default
    dtype, a library configured, a path added) holds here as in pytest's own process."""
    for name, path in conftests:
        if path in _CONFTESTS_IMPORTED:
            continue
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__file__", None) != path:
            del sys.modules[name]  # another folder's conftest.py under the same name
        _import_test_module(name, path, rewrite)
        _CONFTESTS_IMPORTED.add(path)


def _import_test_module(name: str, path: str, rewrite: bool):
    if name in sys.modules:
        return sys.modules[name]
    if rewrite:
        module = _import_with_assert_rewriting(name, path)
        if module is not None:
            return module
    return importlib.import_module(name)


def _import_with_assert_rewriting(name: str, path: str):
    """Import a test module with pytest's assertion rewriting, as the controller did."""
    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:
        return None
    parent = name.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    source = Path(path).read_bytes()
    tree = ast.parse(source, filename=path)
    rewrite_asserts(tree, source, path, None)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(compile(tree, path, "exec", dont_inherit=True), module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module
