"""What a test run in place sees of its launch: the variables and the CUDA device of
the whole world, of a sub-world and of a plain test (docs/running-in-place.md has the
table, and ``tests/harness/test_inplace_subworld_env.py`` checks each row).

A sub-world looks like a launch of its own: its k ranks see RANK and WORLD_SIZE of a
k-rank job, their own MASTER_ADDR/MASTER_PORT (a free port its first rank claimed, unique
in the run: a library that names shared memory or a folder after MASTER_PORT gets one
name per sub-world), a TORCHELASTIC_RUN_ID of their own and no agent store (no agent
serves their port: a rendezvous a test makes over ``env://`` hosts its own store on the
sub-world's rank 0). LOCAL_RANK and LOCAL_WORLD_SIZE count the sub-world's ranks on this
host (``subworld``, the default: "the rank with local rank 0 does it once per host" works
in every sub-world) or stay the launcher's (``launcher``: each rank keeps its own GPU);
ini ``rankgate_subworld_local_rank`` chooses. The current CUDA device is ``cuda:LOCAL_RANK``
either way, so code that builds ``cuda:LOCAL_RANK`` finds the device torch uses.

Launcher-specific variables (SLURM_*, OMPI_COMM_WORLD_*) stay the launcher's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rankgate.harness.options import LAUNCHER, SUBWORLD

"""The values of ini ``rankgate_subworld_local_rank``: what LOCAL_RANK counts in a sub-world."""

AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"
RUN_ID = "TORCHELASTIC_RUN_ID"
LOCAL = ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE")
"""What ``launcher`` leaves as the launcher set it."""
ONLY_WHERE_SET = ("GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", RUN_ID)
"""torchrun's: a sub-world gets its own only where the launcher set them (srun and mpirun
do not)."""
VARIABLES = (
    "RANK", "WORLD_SIZE", *LOCAL, "ROLE_RANK", "ROLE_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", RUN_ID, AGENT_STORE,
)  # fmt: skip
"""Every variable this module sets; the launcher's values are kept to put back."""

PORT_CLAIMS = "subworld-port"
"""Store keys ``subworld-port/<port>``: a port one sub-world of this run took."""
PORT_TRIES = 32


@dataclass(frozen=True, slots=True)
class Member:
    """One rank of a sub-world, as it tells the others when the sub-world starts."""

    host: str
    first_host: bool
    """It runs on the launch's first host (its global rank less its local rank is 0)."""
    port: int | None
    """The sub-world's MASTER_PORT: set by its first rank only."""


def launcher_values() -> dict[str, str | None]:
    """The launcher's values of :data:`VARIABLES` (None: unset), read once at the start."""
    return {name: os.environ.get(name) for name in VARIABLES}


def me(rank: int, local_rank: int, leader: bool, store) -> Member:
    """This rank's :class:`Member`; the sub-world's first rank claims its port."""
    port = claim_port(store) if leader else None
    return Member(socket.gethostname(), rank - local_rank == 0, port)


def claim_port(store) -> int:
    """A port free on this host now that no other sub-world of the run took (``store``
    counts the claims): the operating system's pick, so no fixed number collides with
    another job's."""
    for _ in range(PORT_TRIES):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if store.add(f"{PORT_CLAIMS}/{port}", 1) == 1:
            return port
    raise RuntimeError(f"rankgate in-place: no free port unclaimed in {PORT_TRIES} tries")


def whole_world(
    launcher: Mapping[str, str | None], rank: int, world_size: int, local_rank: int
) -> dict[str, str | None]:
    """The launch's: an every_rank test and a world(N) test see it, with RANK, WORLD_SIZE
    and LOCAL_RANK set where the launcher named them otherwise (srun, mpirun)."""
    numbers = {"RANK": rank, "WORLD_SIZE": world_size, "LOCAL_RANK": local_rank}
    return {**launcher, **{name: str(value) for name, value in numbers.items()}}


def plain(launcher: Mapping[str, str | None]) -> dict[str, str | None]:
    """A plain test's: the launcher's less the agent store (its own ``env://`` rendezvous
    hosts its store, as in the pool)."""
    return {**launcher, AGENT_STORE: None}


def subworld(
    launcher: Mapping[str, str | None],
    members: Sequence[Member],
    index: int,
    tag: str,
    local_rank_from: str = SUBWORLD,
) -> dict[str, str | None]:
    """What rank ``index`` of the sub-world ``members`` sees (``tag`` names the sub-world
    in its run id)."""
    mine, leader = members[index], members[0]
    hosts = list(dict.fromkeys(m.host for m in members))
    here = [i for i, m in enumerate(members) if m.host == mine.host]
    values = {
        **launcher,
        "RANK": str(index),
        "WORLD_SIZE": str(len(members)),
        "ROLE_RANK": str(index),
        "ROLE_WORLD_SIZE": str(len(members)),
        "LOCAL_RANK": str(here.index(index)),
        "LOCAL_WORLD_SIZE": str(len(here)),
        "GROUP_RANK": str(hosts.index(mine.host)),
        "GROUP_WORLD_SIZE": str(len(hosts)),
        "MASTER_ADDR": _address(launcher, leader, hosts),
        "MASTER_PORT": str(leader.port),
        RUN_ID: f"{launcher.get(RUN_ID)}-{tag}",
        AGENT_STORE: None,
    }
    if local_rank_from == LAUNCHER:
        values.update({name: launcher[name] for name in LOCAL})
    for name in ONLY_WHERE_SET:
        if launcher.get(name) is None:
            values[name] = None
    return values


def _address(launcher: Mapping[str, str | None], leader: Member, hosts: list[str]) -> str:
    """Where the sub-world's rank 0 serves: the launcher's MASTER_ADDR when it runs on
    the launch's first host, the loopback when the sub-world has one host, else its
    host's name."""
    if leader.first_host and launcher.get("MASTER_ADDR"):
        return str(launcher["MASTER_ADDR"])
    return "127.0.0.1" if len(hosts) == 1 else leader.host


def apply(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
