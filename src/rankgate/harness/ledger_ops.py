"""What the ledger (:mod:`rankgate.harness.ledger`) records, by name: torch.distributed's
collective functions, ProcessGroup's (and a backend's) methods and the op each is named
as, and where a call's reduce op and root are found. Standard library only."""

from __future__ import annotations

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "reduce",
    "all_gather",
    "all_gather_into_tensor",
    "gather",
    "scatter",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "scatter_object_list",
)
"""The torch.distributed functions recorded: every collective of the public API."""

PG_METHODS = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_coalesced": "all_gather_coalesced",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "gather": "gather",
    "scatter": "scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "barrier": "barrier",
    "monitored_barrier": "monitored_barrier",
    "send": "send",
    "recv": "recv",
    "recv_anysource": "recv",
}
"""ProcessGroup's methods recorded: method -> the op the ledger names (torch.distributed's
function of the same collective)."""

REDUCING = frozenset(
    (
        "all_reduce",
        "all_reduce_coalesced",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
    )
)
"""ProcessGroup methods (by their torch.distributed names) whose options carry a reduce op."""

ROOTED = {
    "broadcast": "src",
    "scatter": "src",
    "broadcast_object_list": "src",
    "scatter_object_list": "src",
    "reduce": "dst",
    "gather": "dst",
    "gather_object": "dst",
}
"""The collectives with a root, by the op the ledger names: the name of their root's
parameter (the ranks must agree on it, as on the tensor: a different root per rank hangs)."""

METHOD_ROOT_AT = {"broadcast": 1, "reduce": 1, "gather": 2, "scatter": 2}
"""A ProcessGroup method's positional argument (after self) holding its root, or its
options (``rootRank``): ``pg.broadcast(t, 0)``, ``pg.broadcast([t], opts)``."""
