"""The groups of files the stages' ``paths`` are made of (:mod:`rankgate.pipeline.stages`).

A stage runs under ``--changed-since`` only when a changed file matches one of its paths;
tests/pipeline/test_stage_paths.py checks that they cover every file its tests import.
"""

from __future__ import annotations

# Every pytest run loads the harness plugin and the tracing plugin (pytest11 entry
# points) and the project-wide conftest, whatever the stage selects.
PYTEST_RUN = (
    "conftest.py",
    "tests/warmstart.py",  # the root conftest.py sets up its warm python
    "src/rankgate/__init__.py",
    "src/rankgate/errors.py",  # every error's base
    "src/rankgate/pytest_plugin.py",
    "src/rankgate/fastexit.py",  # every pytest with the plugin: its exit
    "src/rankgate/harness/**",
    "src/rankgate/tomlfile.py",  # the quarantine list's reader
    "src/rankgate/launch/**",
    "src/rankgate/report/__init__.py",
    "src/rankgate/report/tracing*.py",
    "src/rankgate/report/outcome_plugin.py",
    # in place, each rank's results file (and merge-junit's reading of it)
    "src/rankgate/report/rankresults.py",
    "src/rankgate/report/junitfile.py",
)
COMMANDS = ("src/rankgate/proc/__init__.py", "src/rankgate/proc/command.py")
"""The one module that starts processes (dispatch's shell, launched jobs, containers)."""
# A pytest job under a launcher (the training suite's launcher matrix) and the module
# that starts it.
LAUNCHED = ("src/rankgate/report/launched.py", *COMMANDS)
# The new suites (parallelism, training, data) and the workloads they exercise.
WORKLOAD_SUITES = (
    "src/rankgate/workloads/**",
    "src/rankgate/parity.py",
    "suites/comm/**",
    "suites/parallel/**",
    "suites/trainer/**",
    "suites/data/**",
    *LAUNCHED,
)
# The training suite's launcher matrix runs its strategies under srun (an hpc test).
TRAINING_LAUNCH = (
    "src/rankgate/workloads/__init__.py",
    "src/rankgate/workloads/model.py",
    "src/rankgate/workloads/data/**",
    "src/rankgate/workloads/packing/**",
    "src/rankgate/workloads/trainer/**",
    "src/rankgate/workloads/ray_address.py",
    "suites/trainer/**",
    *LAUNCHED,
)
# The interLink end-to-end test is a dist test (ranks on this machine behind a fake
# interLink server): it goes through the round trip both targets share, so it needs
# every dispatch module; the command line (pipeline/dispatch_stage.py) only hpc's.
INTERLINK_E2E = (
    "tests/dispatch/test_dispatch_interlink_e2e.py",
    "tests/dispatch/conftest.py",
    "tests/dispatch/fake_interlink.py",
    "tests/dispatch/specs/**",
    "src/rankgate/dispatch/interlink/**",
    *COMMANDS,
    *(
        f"src/rankgate/dispatch/{name}.py"
        for name in (
            "__init__",
            "archive",
            "ended",
            "interrupts",
            "job",
            "job_outcome",
            "job_result",
            "profile",
            "run",
            "sbatch",
            "sharded_run",
            "shell",
            "slurm",
            "slurm_query",
            "target",
            "watch",
        )
    ),
)
# The hpc tests: a local SLURM (one node or two) that rankgate dispatches to.
LOCAL_SLURM_TESTS = (
    "tests/dispatch/conftest.py",
    "tests/dispatch/fake_interlink.py",  # the conftest they share with the interLink tests
    *(
        f"tests/dispatch/{name}.py"
        for name in (
            "test_dispatch_command", "test_local_slurm", "test_sharded_dispatch",
            "test_slurm_dispatch", "test_two_node_cluster", "test_two_nodes",
        )
    ),
)  # fmt: skip
JUNIT_MERGE = (
    "src/rankgate/report/junit.py",
    "src/rankgate/report/shard_merge.py",  # merge-junit --shards, a sharded dispatch's verdict
    "src/rankgate/report/merge_command.py",
    "src/rankgate/report/runs.py",  # which run's per-rank files a merge reads
    "src/rankgate/report/junitfile.py",
    "src/rankgate/report/rankresults.py",
    "src/rankgate/report/mergedtest.py",  # one test's merged verdict
    "src/rankgate/report/mergedxml.py",  # the merged JUnit file
    "src/rankgate/cliargs.py",
)
# The report's tests run real ranks (a failing world test) and the executor, then open
# the page in Chromium; the traces' tests run a traced stage: both are dist tests.
REPORT_TESTS = (
    "src/rankgate/report/**",
    "src/rankgate/pipeline/**",
    "src/rankgate/bench/**",
    "src/rankgate/proc/**",
    "src/rankgate/cli.py",
    "src/rankgate/envcheck.py",
    "tests/report/**",
    "benchmarks/baselines/**",
)

# Unit tests read almost everything: code, workflows, the Dagger module, the README's
# commands, the container matrix, the committed benchmark files and the documentation
# site (tests/test_docsite.py builds it).
UNIT_PATHS = (
    "src/**", "tests/**", "suites/**", "ci/**", "conftest.py", "noxfile.py", ".github/**",
    "README.md", "docs/**", "containers/**", "scripts/**", "benchmarks/**", "dagger.json",
    "mkdocs.yml",
)  # fmt: skip
