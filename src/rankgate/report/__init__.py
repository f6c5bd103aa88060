"""Results of test runs, merged and summarised.

Main API:

- :func:`rankgate.report.junit.merge_junit` -> :class:`~rankgate.report.junit.MergedReport`:
  per-rank JUnit files (the harness's in-place mode) to one rank-aware verdict per test,
  ``MergedReport.write_xml(path)`` for one JUnit file (``rankgate merge-junit``).
- :func:`rankgate.report.summary.summarize`: a small JSON summary of JUnit and benchmark
  files (``rankgate report``).
"""
