"""rankgate: CI-pipeline-as-code for distributed PyTorch.

Entry points: the pytest plugin (:mod:`rankgate.pytest_plugin`, the ``pytest11`` entry
point, which registers :mod:`rankgate.harness.plugin` and the tracing plugin), the
``rankgate`` command (:mod:`rankgate.cli`: env-check, run, bench, dispatch, merge-junit,
report), and the stage list
(:mod:`rankgate.pipeline.stages`) behind the nox sessions, the Dagger module and the
workflows.

Vocabulary, used the same way everywhere in this package:

rank        one process of a distributed job, numbered 0..world-1.
local rank  a rank's index among the ranks on its own host (picks its GPU).
world       the number of ranks of a job (``world_size``).
worker      a rank process the harness keeps alive between tests.
pool        the workers of one (world, backend), started once and reused.
stage       one step of the pipeline (lint, unit, dist, package, gpu, hpc, bench, container,
            gate).
target      where a dispatched stage runs (slurm over CLI or ssh, interLink).
profile     a site's settings for a target (TOML).

PYTEST_DONT_REWRITE: pytest leaves this package's asserts alone where it finds its modules
imported before it started, as in a process forked from rankgate's fork server
(:mod:`rankgate.harness.pool.program`), and says nothing of them. Its pytest plugins say
the same for ``-p MODULE``.
"""

__version__ = "0.1.0"
