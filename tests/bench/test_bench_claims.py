"""The docs' measured figures agree with the committed results they are rendered from."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.bench import claims

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
X = claims.TIMES


def test_every_block_in_the_readme_and_results_agrees_with_its_files():
    assert claims.check(ROOT) == []


def test_a_number_edited_in_the_readme_is_caught():
    readme = (ROOT / "README.md").read_text()
    assert "busbw 337.4 GB/s" in readme
    edited = readme.replace("busbw 337.4 GB/s", "busbw 339.4 GB/s")
    assert claims.check(ROOT, texts={"README.md": edited}) == [
        "README.md: block readme-comm differs from " + ", ".join(claims.CLAIMS[0].sources)
    ]


def test_a_number_edited_in_a_results_md_is_caught():
    doc = "benchmarks/results/nvidia-h200-x2/attention/ATTENTION.md"
    text = (ROOT / doc).read_text()
    edited = text.replace("| 64K | 230.53 | 117.21 | 1.967 |", "| 64K | 230.53 | 115.21 | 1.967 |")
    assert edited != text
    problems = claims.check(ROOT, texts={doc: edited})
    assert problems == [f"{doc}: block attention-run3 differs from {claims.ATTENTION_RUN3}"]


def test_a_result_file_that_changes_makes_its_blocks_stale():
    load = claims.file_loader(ROOT)

    def slower(path):
        data = load(path)
        if path == claims.RERUN:
            auto_1k = next(r for r in data["results"] if r["backend"] == "auto"
                           and r["bytes"] == 1024)  # fmt: skip
            auto_1k["eager_us"] = 12.0  # as if a rerun measured auto faster at 1 KiB
        return data

    assert claims.check(ROOT, load=slower) == [
        "README.md: block readme-comm differs from " + ", ".join(claims.CLAIMS[0].sources)
    ]


def test_a_figure_typed_outside_a_block_is_caught():
    readme = (ROOT / "README.md").read_text()
    typed = readme.replace(
        "\n## Parallelism suite", f"\nauto is now 1.01{X} the kernel.\n\n## Parallelism suite"
    )
    assert claims.check(ROOT, texts={"README.md": typed}) == [
        f"README.md: '## Communication layer': typed figure '1.01{X}'; render it"
    ]


def test_a_missing_block_is_named():
    readme = (ROOT / "README.md").read_text()
    gone = readme.replace("<!-- claims:readme-attention-table -->\n", "")
    assert "README.md: block readme-attention-table is missing" in claims.check(
        ROOT, texts={"README.md": gone}
    )


def test_the_readme_says_what_the_latest_auto_measurement_showed():
    """Until a 2xH200 rerun lands: 1.21x in a graph at 1 MiB, 1.42x eager (128 KiB)."""
    text = claims.readme_comm(claims.file_loader(ROOT))
    assert f"up to 1.21{X} the fastest in a graph (1 MiB)" in text.replace("\n", " ")
    assert f"up to 1.42{X} eagerly (128 KiB; 1.39{X} at 1 KiB" in text.replace("\n", " ")
