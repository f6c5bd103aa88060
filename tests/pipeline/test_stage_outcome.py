"""A stage's kept outcome: stages/<name>.json, read by the report while other stages run."""

from __future__ import annotations

import json

import pytest

from rankgate.pipeline.options import Options
from rankgate.pipeline.stage_outcome import Outcome, record
from rankgate.report import runinfo

pytestmark = pytest.mark.unit


def test_a_reader_of_the_old_record_reads_it_whole_while_a_new_one_is_kept(tmp_path):
    """The report of one background stage reads every stage's file while another stage
    records: the file is replaced, never truncated and written in place."""
    options = Options(out_dir=tmp_path)
    record(Outcome(stage="hpc", status="skipped", reason="slow stage"), options)
    path = tmp_path / "stages" / "hpc.json"
    with path.open() as reader:  # opened before the new record, read after it
        record(Outcome(stage="hpc", status="passed", seconds=3.0), options)
        assert json.loads(reader.read())["status"] == "skipped"
    assert json.loads(path.read_text())["status"] == "passed"
    assert sorted(p.name for p in path.parent.iterdir()) == ["hpc.json"]  # no part left


def test_a_stage_marked_running_replaces_its_last_outcome_whole(tmp_path):
    options = Options(out_dir=tmp_path)
    record(Outcome(stage="unit", status="passed", seconds=1.0), options)
    path = tmp_path / "stages" / "unit.json"
    with path.open() as reader:
        runinfo.stage_started(tmp_path, "unit")
        assert json.loads(reader.read())["status"] == "passed"
    assert json.loads(path.read_text())["status"] == runinfo.RUNNING
    assert sorted(p.name for p in path.parent.iterdir()) == ["unit.json"]
