"""ci.yml appends each stage's out/summary.md to the job summary, and keeps out/report.html."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.pipeline import stages

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_ci_stage_job_appends_its_summary_and_uploads_the_report():
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    jobs = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]
    for stage in stages.all_stages():
        file, job_id = stage.workflow.split(":")
        if file != "ci.yml":
            continue
        steps = jobs[job_id]["steps"]
        last = steps[-1]
        assert last["if"] == "always()", job_id
        assert last["run"] == '[ ! -f out/summary.md ] || cat out/summary.md >> "$GITHUB_STEP_SUMMARY"'
        uploads = [s["with"]["path"] for s in steps if "upload-artifact" in s.get("uses", "")]
        assert uploads in ([], ["out/"]), f"{job_id} uploads {uploads}, not out/ with report.html"


def test_chromium_is_installed_for_the_report_test():
    ci = (ROOT / ".ci/run").read_text()
    assert "command -v chromium >/dev/null || missing+=(chromium)" in ci
    assert 'apt-get install -y -qq --no-install-recommends "${missing[@]}"' in ci
