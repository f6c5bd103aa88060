"""Splitting a suite over several runs by its measured durations.

- :mod:`.durations`: the durations file (JSON, node id -> seconds): read it, checked,
  and merge new times into it under a lock.
- :mod:`.split`: :func:`~.split.split`, greedy longest-processing-time over the stored
  times, the same answer for the same input on every rank and machine.
- :mod:`.plugin`: :class:`~.plugin.ShardPlugin`, the pytest side: ``--rankgate-shard K/N``
  keeps shard K and deselects the rest; ``--rankgate-store-durations FILE`` records each
  test's time (a world test's: its wall time over all its ranks).
"""
