"""The docs' measured figures agree with the committed results they are rendered from."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankgate.bench import claims

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
X = claims.TIMES


def test_every_block_in_the_readme_docs_and_results_agrees_with_its_files():
    assert claims.check(ROOT) == []


def test_a_number_edited_in_the_readme_is_caught():
    readme = (ROOT / "README.md").read_text()
    assert "| NCCL 337.4 GB/s |" in readme
    edited = readme.replace("| NCCL 337.4 GB/s |", "| NCCL 339.4 GB/s |")
    assert claims.check(ROOT, texts={"README.md": edited}) == [
        "README.md: block readme-figures differs from " + ", ".join(claims.CLAIMS[0].sources)
    ]


def test_a_number_edited_in_the_benchmarks_page_is_caught():
    page = claims.BENCH_PAGE
    text = (ROOT / page).read_text()
    assert "busbw 337.4 GB/s" in text
    edited = text.replace("busbw 337.4 GB/s", "busbw 339.4 GB/s")
    assert claims.check(ROOT, texts={page: edited}) == [
        f"{page}: block bench-comm differs from " + ", ".join(claims.CLAIMS[1].sources)
    ]


def test_a_number_edited_in_a_results_md_is_caught():
    doc = "benchmarks/results/nvidia-h200-x2/attention/ATTENTION.md"
    text = (ROOT / doc).read_text()
    edited = text.replace("| 64K | 230.53 | 117.21 | 1.967 |", "| 64K | 230.53 | 115.21 | 1.967 |")
    assert edited != text
    problems = claims.check(ROOT, texts={doc: edited})
    assert problems == [f"{doc}: block attention-run3 differs from {claims.ATTENTION_RUN3}"]


def _rerun_at_1k(backend: str, field: str, us: float):
    """The committed files, but for ``field`` of ``backend`` at 1 KiB in the rerun file:
    as if a rerun had measured it at ``us``."""
    load = claims.file_loader(ROOT)

    def edited(path):
        data = load(path)
        if path == claims.RERUN:
            row = next(r for r in data["results"] if r["backend"] == backend
                       and r["bytes"] == 1024)  # fmt: skip
            row[field] = us
        return data

    return edited


def test_a_result_file_that_changes_makes_its_blocks_stale():
    slower = _rerun_at_1k("auto", "eager_us", 12.0)  # auto faster at 1 KiB
    assert claims.check(ROOT, load=slower) == [
        f"{claims.BENCH_PAGE}: block bench-comm differs from " + ", ".join(claims.CLAIMS[1].sources)
    ]


def test_a_result_file_behind_the_readme_table_makes_it_stale():
    slower = _rerun_at_1k("p2p-push", "graph_us", 4.0)  # push faster at 1 KiB
    assert claims.check(ROOT, load=slower) == [
        "README.md: block readme-figures differs from " + ", ".join(claims.CLAIMS[0].sources),
        f"{claims.BENCH_PAGE}: block bench-comm differs from "
        + ", ".join(claims.CLAIMS[1].sources),
    ]


def test_a_figure_typed_outside_a_block_is_caught():
    page = claims.BENCH_PAGE
    text = (ROOT / page).read_text()
    typed = text.replace(
        "\n## `rankgate bench attention`",
        f"\nauto is now 1.01{X} the kernel.\n\n## `rankgate bench attention`",
    )
    assert typed != text
    assert claims.check(ROOT, texts={page: typed}) == [
        f"{page}: '## The communication layer': typed figure '1.01{X}'; render it"
    ]


def test_a_figure_typed_in_the_readme_outside_its_table_is_caught():
    readme = (ROOT / "README.md").read_text()
    typed = readme.replace("\n## Layout", "\nA pool test takes 2.1 ms.\n\n## Layout")
    assert typed != readme
    assert claims.check(ROOT, texts={"README.md": typed}) == [
        "README.md: '## Figures': typed figure '2.1 ms'; render it"
    ]


def test_a_missing_block_is_named():
    readme = (ROOT / "README.md").read_text()
    gone = readme.replace("<!-- claims:readme-figures -->\n", "")
    assert "README.md: block readme-figures is missing" in claims.check(
        ROOT, texts={"README.md": gone}
    )
    page = (ROOT / claims.BENCH_PAGE).read_text()
    gone = page.replace("<!-- claims:bench-attention-table -->\n", "")
    assert f"{claims.BENCH_PAGE}: block bench-attention-table is missing" in claims.check(
        ROOT, texts={claims.BENCH_PAGE: gone}
    )


def test_the_benchmarks_page_says_what_the_latest_auto_measurement_showed():
    """Until a 2xH200 rerun lands: 1.21x in a graph at 1 MiB, 1.42x eager (128 KiB)."""
    text = claims.bench_comm(claims.file_loader(ROOT))
    assert f"up to 1.21{X} the fastest in a graph (1 MiB)" in text.replace("\n", " ")
    assert f"up to 1.42{X} eagerly (128 KiB; 1.39{X} at 1 KiB" in text.replace("\n", " ")
