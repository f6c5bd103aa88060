"""The pipeline as code: one stage list driving nox, the Dagger module and the workflows.

Main API:

- :mod:`rankgate.pipeline.stages` — :class:`Stage` and the registry (``get``,
  ``all_stages``, ``names``): lint, unit, dist, gpu, hpc, bench, container, gate, and
  latest (scheduled, never in the gate).
- :mod:`rankgate.pipeline.executor` — ``run_gate``: the gate as a tuple of steps (plan,
  checks, stages, gate.json, table), and ``verdict`` (what blocks a gate).
- :mod:`rankgate.pipeline.stage_commands` — ``run_stage``: one stage's commands here,
  dispatched, or skipped saying why.
- :mod:`rankgate.pipeline.options` — ``Options`` (nox posargs, ``rankgate run`` flags);
  :mod:`~rankgate.pipeline.stage_outcome` — ``Outcome`` and ``record``;
  :mod:`~rankgate.pipeline.table` — ``summary_table``, the verdict table.
- :mod:`rankgate.pipeline.run_stages` — ``rankgate run``, the seed runner's options
  mapped onto stages and markers.
- :mod:`rankgate.pipeline.dispatch_stage` — ``rankgate dispatch --profile P --stage S``:
  one stage on a remote target (:mod:`rankgate.dispatch`).
- :mod:`rankgate.pipeline.probe` — what this machine can run (GPUs, SLURM, engine).
- :mod:`rankgate.pipeline.changes` — which stages a change since a git ref touches.
- :mod:`rankgate.pipeline.lock` — the lock of the dependency set (``python -m
  rankgate.pipeline.lock`` makes it; ``problems`` says where it and pyproject.toml differ).
- :mod:`rankgate.pipeline.latest` — stage latest: unit and dist against the newest
  releases, without the lock, in an environment of its own.
- :mod:`rankgate.pipeline.container` — the image matrix (containers/) and its builds.

Commands start through :mod:`rankgate.proc.command`.
"""
