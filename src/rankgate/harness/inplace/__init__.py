"""In-place mode: torchrun, srun or mpirun started pytest on every rank, and each test
runs on all of them (world(k) tests in sub-worlds of k ranks, each plain test on one).

- :class:`.session.InPlaceSession`: the pytest plugin; each hook goes to the part of the
  run that does its job, made at set-up by :func:`.start.start`.
- :class:`.round.TestRound`: one test's round: enter its group, run an attempt, exchange
  results with the other ranks, judge, rerun if asked, record, show.
  :class:`.body.TestBody` is around the test's own phases (its timeout, its group, what
  it leaves behind); :class:`.ending.RunEnd` the session's end.
- :class:`.schedule.Schedule`: which ranks run which test (sub-worlds, plain tests on
  one rank), and what a test's fixtures see of its world.
- :class:`.stop.RunStop`: how a rank stops the run when a test hangs (:mod:`.hang`), a
  peer dies or a signal comes; :class:`.lastrecord.LastRecord` records that test and the
  rest, tells the others, and the rank exits. :class:`.running.StopGate` keeps the main
  thread and the watchers from both recording a test.
- :class:`.group.InPlaceGroup` (the store and the default group),
  :class:`.control.ControlChannel` (the ranks' messages through the store),
  :class:`.peers.Peers` (whether the others still run), :mod:`.collection` (one
  collection for every rank), :mod:`.verdict` (one verdict from every rank's result),
  :mod:`.records` (a rank's JUnit, results and ledger files, whose formats are
  :mod:`rankgate.harness.rankfiles`'s), :mod:`.tally` and :mod:`.summary` (what the
  run's end says), :mod:`.tempdirs`.
- Watchers: :class:`.hangwatch.HangWatch` (a test past its timeout) and
  :class:`.signalwatch.SignalWatch` (a stop signal while the main thread is stuck).
"""
