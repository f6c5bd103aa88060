"""The pipeline as code: one stage list driving nox, the Dagger module and the workflows.

Main API:

- :mod:`rankgate.pipeline.stages` — :class:`Stage` and the registry (``get``,
  ``all_stages``, ``names``): lint, unit, dist, gpu, hpc, bench, container, gate, and
  latest (scheduled, never in the gate).
- :mod:`rankgate.pipeline.executor` — ``run_stage`` / ``run_gate`` (the verdict table)
  and ``verdict`` (what blocks a gate).
- :mod:`rankgate.pipeline.runner` — ``rankgate run``, the seed runner's options mapped
  onto stages and markers.
- :mod:`rankgate.pipeline.probe` — what this machine can run (GPUs, SLURM, engine).
- :mod:`rankgate.pipeline.lock` — the lock of the dependency set (``python -m
  rankgate.pipeline.lock`` makes it; ``problems`` says where it and pyproject.toml differ).
- :mod:`rankgate.pipeline.latest` — stage latest: unit and dist against the newest
  releases, without the lock, in an environment of its own.
"""
