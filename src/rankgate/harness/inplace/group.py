"""In-place mode's process group and the store the ranks meet in.

The ranks of a launched job meet in the launcher's TCP store (``env://``) when
MASTER_ADDR/MASTER_PORT are set, else in a FileStore at ``$RANKGATE_STORE`` or in the
temp dir, keyed by the job id. A store can outlive a run (a FileStore a killed job
left, an elastic agent's store across restarts): each run counts its ranks in and
uses only its own generation of keys, so nothing an earlier run left is read. The
default group is ``cpu:gloo,cuda:nccl`` when every local rank has a GPU (torch's own
default), else gloo; it can be renewed on every rank after a test lost it. A test marked
``backend="gloo"`` sees a gloo-only default group there, as in a gloo pool. A rank
leaves its group before its plain tests, which see none, as in the pool's controller.

In a group, a test sees the variables of a launch of the group's ranks (a sub-world
looks like a launch of its own: :mod:`.subworld_env` says what each variable holds, and
docs/running-in-place.md has the table). Plain tests see the launcher's values, less
torchrun's TORCHELASTIC_USE_AGENT_STORE: with it, a rendezvous a test makes for itself
(``env://`` on an address it sets) only connects, to a port nobody serves, and waits
there; a plain test runs on one rank, a process of its own as in the pool, whose rank 0
hosts the store it asks for.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from rankgate.harness.inplace import subworld_env
from rankgate.harness.inplace.control import ControlChannel
from rankgate.harness.inplace.schedule import NO_GROUP, WHOLE_WORLD, Share
from rankgate.harness.rankstate import set_collective_timeout
from rankgate.harness.spec import AUTO_ON_GPUS
from rankgate.launch.env import LaunchEnv


class InPlaceGroup:
    """The store, this run's key prefix in it, the control channel and the default group."""

    def __init__(
        self, launch: LaunchEnv, rendezvous_s: float, local_rank_from: str = subworld_env.SUBWORLD
    ) -> None:
        self.launch = launch
        self.rendezvous_s = rendezvous_s
        self.local_rank_from = local_rank_from
        """What LOCAL_RANK counts in a sub-world (ini rankgate_subworld_local_rank)."""
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.has_gpus = gpus >= launch.local_world_size
        self.backend = AUTO_ON_GPUS if self.has_gpus else "gloo"
        self.device = torch.device("cuda", launch.local_rank) if self.has_gpus else None
        self.store_path: Path | None = None
        """The FileStore's path (rank 0 deletes it at the end); None for a TCP store."""
        store = self._open_store()
        self._base = dist.PrefixStore(self._join_generation(store), store)
        self.control = ControlChannel(
            dist.PrefixStore("control", self._base),
            launch.rank,
            launch.world_size,
            rendezvous_s,
            self.where,
        )
        self._groups_made = 0
        self.current = WHOLE_WORLD
        """The (phase, sub-world) of the default group (``schedule.Share.group``)."""
        self.members: tuple[int, ...] = tuple(range(launch.world_size))
        """The global ranks of the default group, in the order of their ranks in it."""
        self.changes: list[float] = []
        """Seconds each change of sub-world took to start its group (docs/subworlds.md)."""
        self._gloo_world: dist.ProcessGroup | None = None
        """Every rank in a gloo-only group, made at the first gloo test on a mixed group."""
        self._launcher_variables = subworld_env.launcher_values()
        self._set_rank_variables(())
        if not dist.is_initialized():
            self._init_group()

    def _open_store(self):
        launch = self.launch
        timeout = timedelta(seconds=self.rendezvous_s)
        try:
            if os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
                self.where = (
                    f"the TCP store at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
                )
                rendezvous = dist.rendezvous(
                    "env://", rank=launch.rank, world_size=launch.world_size, timeout=timeout
                )
                return next(rendezvous)[0]
            self.store_path = self._file_store_path()
            self.where = f"the FileStore at {self.store_path}"
            folder = self.store_path.parent
            if not (folder.is_dir() and os.access(folder, os.W_OK)):
                # FileStore itself would retry opening it for minutes, saying nothing.
                raise OSError(
                    f"{folder} is not a writable directory; RANKGATE_STORE must name a "
                    "file in a directory every rank can write"
                )
            return dist.FileStore(str(self.store_path), launch.world_size)
        except Exception as exc:
            message = f"rankgate in-place: cannot open {self.where}: {exc}"
            raise pytest.UsageError(message) from None

    def _file_store_path(self) -> Path:
        explicit = os.environ.get("RANKGATE_STORE")
        if explicit:
            return Path(explicit)
        safe = hashlib.sha1(self.launch.job_id.encode()).hexdigest()[:16]
        return Path(tempfile.gettempdir()) / f"rankgate-{self.launch.launcher}-{safe}.store"

    def _temp_dir_note(self) -> str:
        """The store in the temp dir is found only by ranks that share that dir."""
        if self.store_path is None or os.environ.get("RANKGATE_STORE"):
            return ""
        return (
            f". The store is in this rank's temp dir ({self.store_path.parent}): ranks "
            "with a different TMPDIR look for it elsewhere"
        )

    def _join_generation(self, store) -> str:
        """This run's key prefix in the store: ``rankgate/<generation>``.

        Run g's ranks are the world_size ranks that counted themselves in after run
        g-1's; they use only keys under ``rankgate/g``.
        """
        world = self.launch.world_size
        joined = store.add("rankgate/joined", 1)
        generation = (joined - 1) // world
        need = (generation + 1) * world
        deadline = time.monotonic() + self.rendezvous_s
        while (seen := store.add("rankgate/joined", 0)) < need:
            if time.monotonic() > deadline:
                raise pytest.UsageError(
                    f"rankgate in-place: only {seen - generation * world} of {world} ranks "
                    f"joined through {self.where} within {self.rendezvous_s:g} s "
                    "(rankgate_rendezvous_timeout). Start every rank; if the store was "
                    "left by an earlier run that died while starting, delete it (or point "
                    "RANKGATE_STORE at a fresh path)" + self._temp_dir_note()
                )
            time.sleep(0.01)
        return f"rankgate/{generation}"

    def _init_group(self) -> None:
        """A new default process group, under a key prefix no earlier group used."""
        self._groups_made += 1
        phase, subworld = self.current
        name = f"group{self._groups_made}"
        if self.current != WHOLE_WORLD:
            name = f"phase{phase}/subworld{subworld}/{name}"
        store = dist.PrefixStore(name, self._base)
        try:
            dist.init_process_group(
                self.backend,
                store=store,
                rank=self.members.index(self.launch.rank),
                world_size=len(self.members),
                # Bounds the rendezvous only: each test sets its collectives' timeout.
                timeout=timedelta(seconds=self.rendezvous_s),
            )
        except Exception as exc:
            raise pytest.UsageError(
                f"rankgate in-place: could not start the {self.backend} process group "
                f"through {self.where}: {exc}"
            ) from None

    def enter(self, share: Share, meet) -> None:
        """The default group of ``share``'s ranks, made when this rank is not in it yet:
        leave the current one, ``meet()`` the other ranks of the new one (each may still
        run the last phase's tests), start it. A plain test's share has no group: the
        rank only leaves its own, so the test sees none, as in the pool's controller."""
        if share.group == self.current:
            return
        self._leave()
        self.current, self.members, self._groups_made = share.group, share.ranks, 0
        if share.group == NO_GROUP:
            self._set_rank_variables(())
            return
        meet()
        started = time.monotonic()
        self._set_rank_variables(self._meet_members(share) if share.phase > 0 else ())
        self._init_group()
        self.changes.append(time.monotonic() - started)

    def _meet_members(self, share: Share) -> list[subworld_env.Member]:
        """Every rank of ``share``'s sub-world, as it told the others: its host, and from
        the first rank, the sub-world's port."""
        leader = share.ranks[0] == self.launch.rank
        mine = subworld_env.me(self.launch.rank, self.launch.local_rank, leader, self.control.store)
        phase, subworld = share.group
        name = f"phase{phase}/subworld{subworld}/members"
        return self.control.all_gather(name, mine, ranks=share.ranks)

    def _set_rank_variables(self, members) -> None:
        """What a test sees of its launch (:mod:`.subworld_env`): in a sub-world, a
        launch of its ``members``; and the current CUDA device, ``cuda:LOCAL_RANK``."""
        launch, launcher = self.launch, self._launcher_variables
        if self.current == NO_GROUP:
            values = subworld_env.plain(launcher)
        elif not members:
            n = launch.world_size
            values = subworld_env.whole_world(launcher, launch.rank, n, launch.local_rank)
        else:
            index = self.members.index(launch.rank)
            phase, subworld = self.current
            tag = f"phase{phase}-subworld{subworld}"
            values = subworld_env.subworld(launcher, members, index, tag, self.local_rank_from)
        subworld_env.apply(values)
        if self.has_gpus and self.current != NO_GROUP:
            local = values.get("LOCAL_RANK")
            self.device = torch.device("cuda", launch.local_rank if local is None else int(local))
            torch.cuda.set_device(self.device)

    def _leave(self) -> None:
        self._gloo_world = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass  # a broken group may fail to leave cleanly; it is dropped either way

    def ready(self, collective_s: float, requested: str | None) -> str:
        """The group entered, the test's collectives' timeout set on it (none for a plain
        test: no group); returns the backend its body runs on (``requested``: the one
        its world marker asks for, None for the session's)."""
        if dist.is_initialized():
            set_collective_timeout(collective_s)
        return self.body_backend(self.backend if requested is None else requested)

    def kept_groups(self) -> tuple:
        """Groups of the session's own that the cleanup after a test must not destroy."""
        return () if self._gloo_world is None else (self._gloo_world,)

    def body_backend(self, requested: str) -> str:
        """The backend of the default group a world test asking for ``requested`` sees in
        its body: gloo when it asks for gloo, the session's group otherwise."""
        return "gloo" if requested == "gloo" else self.backend

    @contextmanager
    def default_group_for(self, backend: str, collective_s: float) -> Iterator[None]:
        """The default group a world test's body sees.

        A test marked ``backend="gloo"`` promises a CPU world; where the session's group
        also has NCCL (every rank has a GPU) it gets a gloo-only group over the same
        ranks for its body, so ``dist.get_backend()``, DeviceMesh and the comm layer's
        ``auto`` see what a gloo pool shows them.
        """
        if self.body_backend(backend) == self.backend or not dist.is_initialized():
            yield
            return
        from torch.distributed.distributed_c10d import _set_pg_timeout, _world

        session_group = dist.GroupMember.WORLD
        if self._gloo_world not in _world.pg_map:
            self._gloo_world = dist.new_group(backend="gloo")  # every rank runs this test
        _set_pg_timeout(timedelta(seconds=collective_s), self._gloo_world)
        dist.GroupMember.WORLD = self._gloo_world
        try:
            yield
        finally:
            # Else the test destroyed every group; renew() starts them again.
            if dist.GroupMember.WORLD is self._gloo_world:
                dist.GroupMember.WORLD = session_group

    def renew(self) -> None:
        """Leave what is left of the default group and join a new one (every rank of it);
        between plain tests, leave only (a group a test started for itself)."""
        self._leave()
        if self.current != NO_GROUP:
            self._init_group()

    def lost(self) -> bool:
        """Whether this rank should have a default group and has none (a test destroyed
        it); never between plain tests, which have none."""
        return self.current != NO_GROUP and not dist.is_initialized()
