"""Launchers: who started this process, and the command that starts n ranks.

Main API:

- :func:`rankgate.launch.env.detect_launch` -> :class:`~rankgate.launch.env.LaunchEnv`
  (rank, world, local rank, launcher) under torchrun, srun, mpirun or MPICH's Hydra;
  :func:`~rankgate.launch.env.inspect_launch` also says why a set of variables does
  not count (inherited from an sbatch script or a parent rank).
- :func:`rankgate.launch.rankvars.export_torchrun_names`: RANK, WORLD_SIZE, LOCAL_RANK
  for libraries that read only torchrun's names.
- :func:`rankgate.launch.markers.launcher_skip_reason`: which launchers a strategy test
  (``torch_dist``, ``mpi_dist``, ``ray_dist``, ``deepspeed_dist``) can run under.
- :func:`rankgate.launch.launchers.launcher_argv`: the torchrun / srun / mpirun command
  for n ranks (a job under it runs through :mod:`rankgate.report.launched`).
"""
