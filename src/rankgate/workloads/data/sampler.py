"""A deterministic, infinite, distributed sampler.

The global stream is the concatenation of one permutation of ``range(num_samples)``
per epoch; the permutation depends only on (seed, epoch), so every rank computes the
same one. Rank ``r`` of ``world_size`` takes stream positions ``r, r + world_size, ...``:
the ranks' shards are disjoint and together cover every sample once per epoch, also
when ``num_samples`` is not a multiple of the world size (a rank's shard then runs
into the next epoch). ``world_size=1`` gives every rank the whole stream, which the
packing collator needs (every rank sees the global batch and takes its share).
"""

from __future__ import annotations

import random
from collections.abc import Iterator


def check_rank(rank: int, world_size: int) -> None:
    """A ValueError naming both unless ``rank`` is one of ``world_size`` ranks."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1} (world_size {world_size})")


class InfiniteSampler:
    """Yields this rank's sample indices forever; ``state_dict`` resumes where it stopped."""

    def __init__(self, num_samples: int, *, seed: int = 0, rank: int = 0, world_size: int = 1):
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        check_rank(rank, world_size)
        self.num_samples = num_samples
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.position = 0
        """How many indices this rank has yielded (its position in its own shard)."""
        self._cache: tuple[int, list[int]] | None = None

    def permutation(self, epoch: int) -> list[int]:
        """Epoch ``epoch``'s order of the samples, the same on every rank."""
        if self._cache is None or self._cache[0] != epoch:
            order = list(range(self.num_samples))
            random.Random(f"rankgate-sampler:{self.seed}:{epoch}").shuffle(order)
            self._cache = (epoch, order)
        return self._cache[1]

    def index_at(self, position: int) -> int:
        """The sample at this rank's ``position``-th place of its shard."""
        stream = position * self.world_size + self.rank
        epoch, offset = divmod(stream, self.num_samples)
        return self.permutation(epoch)[offset]

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices of this rank (advances the position)."""
        start = self.position
        self.position += count
        return [self.index_at(p) for p in range(start, start + count)]

    def __iter__(self) -> Iterator[int]:
        while True:
            yield self.take(1)[0]

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position, "seed": self.seed, "world_size": self.world_size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if (state["seed"], state["world_size"]) != (self.seed, self.world_size):
            raise ValueError(
                f"sampler state is for seed {state['seed']} and world size {state['world_size']}, "
                f"this sampler has seed {self.seed} and world size {self.world_size}; resume "
                "with the same seed and number of ranks"
            )
        self.position = int(state["position"])
