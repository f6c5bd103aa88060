"""A stage that collects only some folders (``Stage.test_paths``) still runs every test
its markers select in the whole tree: none lies outside them."""

from __future__ import annotations

from pathlib import Path

import pytest
from tree_collection import selects

from rankgate.pipeline import stages
from rankgate.pipeline.stage_commands import collect_where

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
NARROWED = [stage for stage in stages.all_stages() if stage.test_paths]


def test_some_stage_collects_only_its_folders():
    assert {stage.name for stage in NARROWED} >= {"bench"}


@pytest.mark.parametrize("stage", NARROWED, ids=lambda stage: stage.name)
def test_every_test_the_stage_selects_lies_under_its_test_paths(collected_tree, stage):
    selected = [node for node, names in collected_tree.items() if selects(stage.markers, names)]
    assert selected, f"{stage.name} selects no test in the whole tree"
    outside = [
        node
        for node in selected
        if not any(Path(node.split("::", 1)[0]).is_relative_to(p) for p in stage.test_paths)
    ]
    assert not outside, (
        f"stage {stage.name} collects only {', '.join(stage.test_paths)}, and its markers "
        f"select {len(outside)} test(s) elsewhere that it would never run: add their folder "
        "to its test_paths in rankgate/pipeline/stages.py: " + "; ".join(outside[:10])
    )


def test_paths_given_to_the_run_replace_the_stages(monkeypatch):
    monkeypatch.chdir(ROOT)
    bench = stages.get("bench")
    assert collect_where(bench, ["-x"]) == list(bench.test_paths)
    assert collect_where(bench, ["tests/bench::test_x"]) == []


def test_run_outside_the_repository_leaves_collection_to_pytest(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert collect_where(stages.get("bench"), []) == []
