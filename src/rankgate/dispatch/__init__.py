"""Remote dispatch: run a pipeline stage's tests on SLURM or through interLink.

Main API:

- :func:`rankgate.dispatch.profile.load_profile` — a site profile (TOML) as a
  validated :class:`~rankgate.dispatch.profile.Profile`.
- :func:`rankgate.dispatch.run.run_stage` — submit a stage to the profile's target,
  wait, and return a :class:`~rankgate.dispatch.job_result.DispatchResult` with every
  rank's results merged; :func:`~rankgate.dispatch.run.run_sharded_stage` does it as
  ``profile.shards`` jobs, one shard of the tests each, merged into one verdict
  (:mod:`~rankgate.dispatch.sharded_run`); :func:`~rankgate.dispatch.run.wait_policy` builds the
  :class:`~rankgate.dispatch.watch.WaitPolicy` (deadlines, poll interval) once.
- :class:`rankgate.dispatch.target.Target` — the interface every target implements
  (submit, observe, cancel, release, fetch): :class:`~rankgate.dispatch.slurm.SlurmTarget`
  (local CLI or ssh to a login node) and
  :class:`~rankgate.dispatch.interlink.target.InterlinkTarget` (Kubernetes or REST).
- :mod:`rankgate.dispatch.job_outcome` — how a job ended: one
  :class:`~rankgate.dispatch.job_outcome.JobOutcome` per SLURM state and interLink failure class.
- ``rankgate dispatch --profile P --stage S`` is :mod:`rankgate.pipeline.dispatch_stage`:
  the command reads the pipeline's stage list, so it stands above this package.

Vocabulary: a *profile* names a *target* (where jobs run); a *job* (a
:class:`~rankgate.dispatch.job.JobSpec`) runs one stage's tests on every rank there.
Every command goes through :class:`rankgate.dispatch.shell.Shell` (and from there
:mod:`rankgate.proc.command`).
scripts/slurm/local-slurm.sh starts a real one-node SLURM for the hpc tests.
"""
