"""rankgate's own agreement on each Hypothesis example stays out of the test's ledger."""

from __future__ import annotations

import re

import pytest
import torch.distributed as dist

from rankgate.harness import hypothesis_bridge, ledger

pytestmark = pytest.mark.unit


def test_the_examples_agreement_is_not_one_of_the_tests_collectives(tmp_path, monkeypatch):
    monkeypatch.setenv(ledger.ENV, "1")
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    was_installed = ledger.installed()
    try:
        assert ledger.install("gloo")
        ledger.begin_test()
        assert hypothesis_bridge._exchange(0) == [0]
        assert ledger.snapshot() == []
        dist.barrier()  # the test's own call is still recorded, as #1
        assert [(e["op"], e["seq"]) for e in ledger.snapshot()] == [("barrier", 1)]
    finally:
        ledger.begin_test()
        if not was_installed:
            ledger.uninstall()
        dist.destroy_process_group()


def test_hypothesis_leaves_the_bridge_out_of_its_explanations():
    from hypothesis.internal import scrutineer

    hypothesis_bridge._not_an_explanation()
    hypothesis_bridge._not_an_explanation()  # once is enough
    ours = [loc for loc in scrutineer.UNHELPFUL_LOCATIONS if "rankgate" in loc]
    assert ours == ["/rankgate/harness/hypothesis_bridge.py"]
    unhelpful = re.compile(scrutineer._glob_to_re(scrutineer.UNHELPFUL_LOCATIONS))
    assert unhelpful.search(hypothesis_bridge.__file__)
    assert not unhelpful.search(__file__)
    assert hypothesis_bridge.is_bridge_file(hypothesis_bridge.__file__)
