"""What a finished test left behind that fails it, the same in a pool's rank and in
place: a lost default group, processes still running (:mod:`.leaks`), threads still
running (:mod:`.threads_left`), torch.distributed functions it replaced
(:mod:`.replaced`). Each is named in the test's failure and cleared for the next test.

Imports only the standard library, torch and those modules (it runs inside rank
processes).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch.distributed as dist

from rankgate.harness import leaks, replaced, threads_left

GROUP_DESTROYED = (
    "the test destroyed the default process group (dist.destroy_process_group()); the "
    "harness creates it once and every later test needs it: remove the call "
    "(subgroups a test creates are destroyed for it after the test)"
)


class AfterTestCheck:
    """Taken as a test starts; :meth:`problems` once it has ended."""

    def __init__(self, children_before: set[int] | None = None) -> None:
        """``children_before``: the processes not the test's (default: this process's
        children now)."""
        self.children = set(leaks.children()) if children_before is None else children_before
        self.threads = threads_left.ThreadWatch()
        self.functions = replaced.FunctionWatch()

    def problems(
        self, has_group: bool = True, fixtures: Mapping[str, object] | None = None
    ) -> list[str]:
        """What the test left behind that fails it: a lost group (where it ran with one:
        ``has_group``), running processes and threads, replaced functions (``fixtures``:
        the test's fixtures by name, whose monkeypatch undoes its own)."""
        problems = []
        found = self.functions.put_back((fixtures or {}).values())
        if found:
            problems.append(replaced.problem(found))
        if has_group and not dist.is_initialized():
            problems.append(f"rankgate: {GROUP_DESTROYED}")
        left = leaks.end_leftovers(self.children)
        if left:
            problems.append(leaks.left_running_problem(left))
        threads = self.threads.left_running()
        if threads:
            problems.append(threads_left.problem(threads))
        return problems
