"""Reference implementations the suites exercise, one folder per technique.

- :mod:`rankgate.workloads.comm` — ``create_backend`` (gloo, nccl, p2p on symmetric
  memory, ``auto``) and ``detect_topology``.
- :mod:`rankgate.workloads.cp` — ``DualChunkSharding``: which tokens each rank holds.
- :mod:`rankgate.workloads.ring_attention` — ``ring_attention`` over those shards.
- :mod:`rankgate.workloads.packing` — ``pack`` sequence lengths into per-rank minibatches.
- :mod:`rankgate.workloads.data` — ``JsonlDataset``, ``InfiniteSampler``,
  ``MaxTokensPerRankCollator``.
- :mod:`rankgate.workloads.trainer` — ``Trainer`` and ``create_strategy`` (local, ddp,
  fsdp2, deepspeed, ray).
- :mod:`rankgate.workloads.model` — ``build_model``: the tiny transformer they train.
"""
