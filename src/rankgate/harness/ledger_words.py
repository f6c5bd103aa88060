"""How a ledger entry's reduce op, argument and root read in a verdict: "SUM",
"float32[4]", "src 0".

The ledger records raw values on every collective and words them only when a verdict or
a digest needs them. Standard library only, but for torch's ReduceOp type, read when a
ReduceOp object is worded.
"""

from __future__ import annotations


def describe_reduce(op) -> str:
    """'SUM', 'MAX' (torch's RedOpType), 'PREMUL_SUM'; '' for none."""
    if op is None:
        return ""
    if isinstance(op, str):  # torch's default, recorded as its name
        return op
    name = getattr(op, "name", None)
    if name is None:  # a ReduceOp object rather than its type: dist.ReduceOp(SUM), premul_sum
        name = _type_of(op)
    return str(name)


def _type_of(op) -> str:
    """The name of the RedOpType a ReduceOp object equals: its repr names only its
    address, which differs on every rank."""
    from torch.distributed import ReduceOp  # only a ledger with torch gets here

    for name, member in ReduceOp.RedOpType.__members__.items():
        try:
            if op == member:
                return name
        except Exception:  # a ReduceOp that compares only with its own kind
            continue
    return type(op).__name__


def describe_arg(arg) -> str:
    """'float32[4]', '2x float32[4]' (a list), '' (none)."""
    if arg is None:
        return ""
    if isinstance(arg[0], int):
        return f"{arg[0]}x {describe_arg(arg[1])}"
    dtype, shape = arg
    return f"{str(dtype).removeprefix('torch.')}[{', '.join(map(str, shape))}]"


def describe_root(op: str, root) -> str:
    """'src 0' (broadcast, scatter), 'dst 1' (reduce, gather), 'src group rank 1' (given
    as ``group_src=``); '' for none."""
    if root is None:
        return ""
    word = (
        "src"
        if op in ("broadcast", "scatter", "broadcast_object_list", "scatter_object_list")
        else "dst"
    )
    if isinstance(root, tuple):
        return f"{word} group rank {root[1]}"
    return f"{word} {root}"
