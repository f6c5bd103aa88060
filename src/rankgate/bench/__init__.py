"""Benchmarks, each a module with ``add_arguments`` and ``run`` behind ``rankgate bench NAME``.

- ``comm`` (``rankgate bench comm``): collective bandwidth and latency, measured like
  nccl-tests; ``commreport`` writes its table, crossovers and plots; ``busbw`` holds
  nccl-tests' formulas and parser; ``timing`` the device-event and CUDA-graph timers.
- ``pool_overhead`` (``rankgate bench harness``): the harness's per-test overhead, pool
  against spawning ranks per test.
- ``attention`` (``rankgate bench attention``): ring attention against one GPU and
  PyTorch's context parallel; ``attnreport`` writes its table, fits and plots.
- ``packing`` (``rankgate bench packing``): greedy against LPT packing.
- ``compare`` (``rankgate bench compare``): results against committed baselines.
- ``ranks``: spawning a benchmark's ranks and their process group (comm, attention).
- ``cli`` (``rankgate bench [--repeat N] NAME``): picks the module, repeats it, and adds
  the contention probe (:mod:`rankgate.proc.contention`) to its output.
"""
