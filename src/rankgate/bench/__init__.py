"""Benchmarks, each a module with ``add_arguments`` and ``run`` behind ``rankgate bench NAME``.

- ``comm`` (``rankgate bench comm``): collective bandwidth and latency, measured like
  nccl-tests; ``commreport`` writes its table, crossovers and plots; ``busbw`` holds
  nccl-tests' formulas and parser; ``timing`` the device-event and CUDA-graph timers.
- ``pool_overhead`` (``rankgate bench harness``): the harness's per-test overhead, pool
  against spawning ranks per test.
"""
