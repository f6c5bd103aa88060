"""Packing of sequence lengths into per-rank minibatches under a max-tokens-per-rank cap.

Main API: :func:`pack` (``algorithm="greedy"`` or ``"lpt"``) returns a :class:`Packing`:
minibatch ``m`` gives rank ``r`` the sample indices ``packing.minibatches[m][r]``; a rank
with nothing to do in a minibatch gets the padding slot ``(PADDING,)``, so every rank
runs the same number of minibatches. :func:`measure` adds the metrics (minibatch count,
balance, efficiency, time) and :func:`sample_lengths` draws the length distributions
the two algorithms are compared on (``rankgate bench packing``).
"""

from rankgate.workloads.packing.algorithms import (
    ALGORITHMS,
    PADDING,
    Packing,
    PackingError,
    greedy,
    lpt,
    pack,
)
from rankgate.workloads.packing.distributions import DISTRIBUTIONS, sample_lengths
from rankgate.workloads.packing.metrics import PackingMetrics, measure, metrics_of

__all__ = [
    "ALGORITHMS",
    "DISTRIBUTIONS",
    "PADDING",
    "Packing",
    "PackingError",
    "PackingMetrics",
    "greedy",
    "lpt",
    "measure",
    "metrics_of",
    "pack",
    "sample_lengths",
]
