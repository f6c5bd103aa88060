"""Remote dispatch: run a pipeline stage's tests on SLURM or through interLink.

Main API:

- :func:`rankgate.dispatch.profile.load_profile` — a site profile (TOML) as a
  validated :class:`~rankgate.dispatch.profile.Profile`.
- :func:`rankgate.dispatch.slurm.run_stage` — submit a stage to SLURM (local CLI or
  ssh to a login node), wait, and return a
  :class:`~rankgate.dispatch.results.DispatchResult` with every rank's results merged.
- :func:`rankgate.dispatch.interlink.dispatch.run_stage` — the same through an
  interLink virtual node (Kubernetes API or interLink's REST API).
- :mod:`rankgate.dispatch.outcome` — how a job ended: one
  :class:`~rankgate.dispatch.outcome.Outcome` per SLURM state and interLink failure class.
- :mod:`rankgate.dispatch.cli` — ``rankgate dispatch --profile P --stage S``.

Every subprocess call goes through :class:`rankgate.dispatch.command.Shell`.
scripts/slurm/local-slurm.sh starts a real one-node SLURM for the hpc tests.
"""
