"""Results of test runs, merged and summarised.

Main API:

- :func:`rankgate.report.junit.merge_junit` -> :class:`~rankgate.report.junit.MergedReport`:
  per-rank JUnit files (the harness's in-place mode) to one rank-aware verdict per test,
  ``MergedReport.write_xml(path)`` for one JUnit file (``rankgate merge-junit``).
- :func:`rankgate.report.shard_merge.merge_shards`: the shards of a sharded dispatch as one
  verdict, each test naming its shard's node, a lost shard's tests not run
  (``rankgate merge-junit --shards``, :mod:`~rankgate.report.merge_command`).
- :func:`rankgate.report.json_summary.summarize`: a small JSON summary of JUnit and benchmark
  files; :mod:`rankgate.report.report_command` (``rankgate report``) writes it with the HTML page
  (:func:`~rankgate.report.html.render_html`) and its Markdown twin.
- :func:`rankgate.report.junitfile.read_junit` / :func:`~rankgate.report.rankresults.read_any`:
  one rank's JUnit or results file, as the harness wrote it.
- :func:`rankgate.report.runs.pick_run`: one in-place run's files of a folder holding
  several runs' (the newest, or the one named); :mod:`~rankgate.report.mergedcase`
  reads a merged file's cases back into each rank's texts.
- :func:`rankgate.report.runinfo.git_commit` and ``describe_machine``: what a run ran on.
- :func:`rankgate.report.launched.run_pytest_under` -> ``LaunchedRun``: pytest under
  torchrun, srun or mpirun, with every rank's output and the merged verdicts.
- :mod:`rankgate.report.tracing_plugin` / :mod:`rankgate.report.outcome_plugin`: the
  pytest plugins that trace a stage and record outcomes.
"""
