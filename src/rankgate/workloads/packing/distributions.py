"""Sequence-length distributions the packing algorithms are compared on.

Each is seeded and depends only on (n, cap, seed); lengths are in [1, cap].
"""

from __future__ import annotations

import random
from collections.abc import Callable


def _uniform(rng: random.Random, cap: int) -> float:
    return rng.uniform(1, cap)


def _bimodal(rng: random.Random, cap: int) -> float:
    # Chat-style data: mostly short turns, a third long documents.
    if rng.random() < 0.7:
        return rng.gauss(0.06 * cap, 0.02 * cap)
    return rng.gauss(0.45 * cap, 0.1 * cap)


def _power_law(rng: random.Random, cap: int) -> float:
    # Pareto tail (alpha 1.2) from a floor of 1% of the cap: many short, some very long.
    return 0.01 * cap * rng.paretovariate(1.2)


def _outlier_heavy(rng: random.Random, cap: int) -> float:
    # 95% short, 5% close to the cap: the outliers decide how many minibatches are needed.
    if rng.random() < 0.95:
        return rng.uniform(0.005 * cap, 0.05 * cap)
    return rng.uniform(0.6 * cap, cap)


DISTRIBUTIONS: dict[str, Callable[[random.Random, int], float]] = {
    "uniform": _uniform,
    "bimodal": _bimodal,
    "power_law": _power_law,
    "outlier_heavy": _outlier_heavy,
}


def sample_lengths(distribution: str, n: int, cap: int, seed: int = 0) -> list[int]:
    """``n`` lengths from the named distribution, clipped to [1, cap]."""
    try:
        draw = DISTRIBUTIONS[distribution]
    except KeyError:
        raise ValueError(
            f"unknown distribution {distribution!r}; use one of {', '.join(DISTRIBUTIONS)}"
        ) from None
    rng = random.Random(f"{distribution}:{seed}")
    return [min(cap, max(1, round(draw(rng, cap)))) for _ in range(n)]
