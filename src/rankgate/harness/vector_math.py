"""torch's vector-math kernels picked before a rank computes: each function called once,
on one element.

torch hands contiguous float and double unary ops (exp, log, sqrt, ...) to oneMKL's
vector math, which picks each function's kernel on its first call. Where that first call
runs on several intra-op threads at once (a fresh process's first sizable op), one thread
can run a low-accuracy kernel over its share of the call: pytorch/pytorch#188792, oneMKL
2024.2 (which torch's x86 wheels link); torch's own fix, pytorch/pytorch#188791, makes the
same one-element calls. On such a build a world-1 ring-attention check read a relative L2
error of 1.0e-5 to 2.1e-5 against its 1e-5 (docs/suites.md).

The fork server calls them before its first fork (every rank forked after inherits the
kernels) and an in-place rank before its first test. One element runs on the calling
thread: no parallel region, so no OpenMP threads for a fork to break.
"""

from __future__ import annotations

VECTOR_MATH_OPS = (
    "acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2",
    "sin", "sqrt", "tan", "tanh", "trunc",
)  # fmt: skip
"""ATen's unary ops that call oneMKL's vector math for float and double
(aten/src/ATen/cpu/vml.h)."""


def pick_kernels() -> None:
    """Call each vector-math op once on one float and one double element."""
    import torch

    for dtype in (torch.float32, torch.float64):
        one = torch.full((1,), 0.5, dtype=dtype)
        for name in VECTOR_MATH_OPS:
            getattr(torch, name)(one)
