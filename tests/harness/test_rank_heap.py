"""A rank leaves what it imported out of its tests' garbage collections (harness/heap.py)."""

from __future__ import annotations

import gc
import textwrap

import pytest
import torch

pytestmark = pytest.mark.dist


@pytest.mark.world(2)
def test_what_the_rank_imported_is_left_out_of_collections():
    # gc.get_objects() lists what a collection walks; frozen objects are not among them.
    walked = {id(o) for o in gc.get_objects()}
    assert id(globals()) not in walked  # this test module's, imported in the rank
    assert id(vars(torch.nn.functional)) not in walked


def test_an_earlier_tests_garbage_is_freed_before_the_freeze(pytester):
    # Test a leaves a reference cycle behind with the collector off; importing test b's
    # module freezes the rank's heap. The cycle must be freed first, not kept for good.
    pytester.makepyfile(
        refs="boxes = []",
        test_a=textwrap.dedent(
            """
            import gc, weakref
            import pytest
            import refs

            class Box:
                pass

            @pytest.mark.world(2)
            def test_leaves_a_cycle():
                gc.disable()
                box = Box()
                box.me = box
                refs.boxes.append(weakref.ref(box))
            """
        ),
        test_b=textwrap.dedent(
            """
            import gc
            import pytest
            import refs

            @pytest.mark.world(2)
            def test_the_cycle_is_gone():
                gc.enable()
                assert [box() for box in refs.boxes] == [None]
            """
        ),
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
