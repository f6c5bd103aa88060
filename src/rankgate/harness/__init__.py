"""The pytest plugin that runs a test body on n ranks (``@pytest.mark.world(n)``).

Entry point: :mod:`.plugin` (pytest11 ``rankgate``), which reads the options
(:mod:`.options`) and the world marker (:mod:`.spec`), then hands world tests to one of
two modes, each a folder of its own that never imports the other:

- :mod:`.pool`: pytest runs once; :class:`.pool.session.PoolSession` runs each world
  test's body on the ranks of a reusable pool.
- :mod:`.inplace`: a launcher (torchrun, srun, mpirun) started pytest on every rank;
  :class:`.inplace.session.InPlaceSession` runs each test there.

What both modes share sits here: a test's spec, seed and timeouts
(:mod:`.item_settings`), one verdict from every rank's outcome (:mod:`.verdict`,
:mod:`.outcome`), the wording of ranks in every report (:mod:`.verdict_lines`), where a
hung rank's stack waits (:mod:`.stacks`), a rank's per-test state (:mod:`.rankstate`,
:mod:`.leaks`, :mod:`.locks`), captured output (:mod:`.output`), the failure report's
shape (:mod:`.failure_repr`), and adopting an existing suite (:mod:`.adopt`).
"""
