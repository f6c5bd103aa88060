"""How a ledger entry's reduce op and argument read in a verdict: "SUM", "float32[4]".

Standard library only: the ledger records raw values on every collective and words them
only when a verdict or a digest needs them.
"""

from __future__ import annotations


def describe_reduce(op) -> str:
    """'SUM', 'MAX' (torch's RedOpType), 'PREMUL_SUM'; '' for none."""
    if op is None:
        return ""
    name = getattr(op, "name", None)
    if name is None:  # a ReduceOp object (premul_sum) rather than its type
        name = str(op).rpartition(".")[2].split(":")[0].strip("<> ")
    return str(name)


def describe_arg(arg) -> str:
    """'float32[4]', '2x float32[4]' (a list), '' (none)."""
    if arg is None:
        return ""
    if isinstance(arg[0], int):
        return f"{arg[0]}x {describe_arg(arg[1])}"
    dtype, shape = arg
    return f"{str(dtype).removeprefix('torch.')}[{', '.join(map(str, shape))}]"
