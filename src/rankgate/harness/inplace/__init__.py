"""In-place mode: torchrun, srun or mpirun started pytest on every rank, and each test
runs on all of them (world(k) tests in sub-worlds of k ranks, each plain test on one).

- :class:`.session.InPlaceSession`: the pytest hooks (set-up, each test's run and the
  exchange of outcomes, reporting, the end of the session).
- :class:`.stop.RunStop`: how a rank stops the run when a test hangs, a peer dies or a
  signal comes: it records that test and the rest, tells the others, and exits.
- :class:`.group.InPlaceGroup` (the store and the default group),
  :class:`.control.ControlChannel` (the ranks' messages through the store),
  :mod:`.collection` (one collection for every rank), :mod:`.verdict` (one verdict from
  every rank's result), :mod:`.records` (a rank's JUnit, results and ledger files,
  whose formats are :mod:`rankgate.harness.rankfiles`'s), :mod:`.schedule` (which rank
  runs which test), :mod:`.shares`, :mod:`.tempdirs`.
- Watchers: :class:`.hangwatch.HangWatch` (a test past its timeout) and
  :class:`.signalwatch.SignalWatch` (a stop signal while the main thread is stuck).
"""
