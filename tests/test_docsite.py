"""The documentation site: its reference lists every option that exists, its placeholders
fill or fail the build, and it builds with --strict (as ``nox -s docs`` does)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rankgate import cli, docsite

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]

PLANTED = '''
def pytest_addoption(parser):
    parser.getgroup("rankgate").addoption("--rankgate-planted", help="not in the reference")
    parser.addini("rankgate_planted", "not in the reference either")
'''


def session_options(folder: Path) -> set[str]:
    """The --rankgate-* options and rankgate_* ini keys a pytest session in ``folder``
    has, as ``pytest --help`` lists them (the plugin and any conftest there)."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:randomly"],
        cwd=folder, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    options = set(re.findall(r"(--rankgate-[a-z-]+)", out))
    keys = set(re.findall(r"^\s+(rankgate_\w+) \(", out, re.M))
    assert options and keys, out[-2000:]
    return options | keys


def test_the_option_reference_lists_every_option_a_session_has(tmp_path):
    (page,) = (p for p in docsite.write(tmp_path / "docs") if p.name == "pytest-options.md")
    session = tmp_path / "session"
    session.mkdir()
    # a conftest adding an option and a key the reference cannot know: the check names them
    (session / "conftest.py").write_text(PLANTED)
    missing = docsite.unlisted(page.read_text(), session_options(session))
    assert missing == ["--rankgate-planted", "rankgate_planted"], (
        f"options a pytest session has that {docsite.OPTIONS_PAGE} does not list: {missing}"
    )


def test_every_pytest_option_and_ini_key_says_its_default():
    options, keys = docsite.pytest_options()
    assert {"--rankgate-timeout", "--rankgate-shard"} <= {n for o in options for n in o.names}
    assert "rankgate_world_classes" in {key.name for key in keys}
    vague = [o.names[0] for o in options if "default" not in o.help]
    vague += [key.name for key in keys if "default" not in key.help]
    assert not vague, f"their help does not say their default: {vague}"


def test_the_cli_reference_has_every_command_and_option():
    page = docsite.cli_page() + docsite.cli_bench_page()
    for parser in cli.every_parser():
        assert f"## `{parser.prog}`" in page
        for action in parser._actions:
            for name in action.option_strings:
                assert name in page, f"{parser.prog} {name}"


def test_an_include_takes_the_section_under_its_heading_to_the_next_of_its_level():
    page = (
        "# Title\n\n## Code map\n\nfirst\n\n```bash\n# a comment, not a heading\n```\n\n"
        "### A subsection\n\nkept\n\n## Next\n\nleft out\n"
    )
    body = docsite.section(page, "code-map")
    assert body.startswith("first") and "# a comment" in body and "kept" in body
    assert "left out" not in body and "## Next" not in body


def test_an_include_of_a_missing_heading_or_page_fails(tmp_path):
    (tmp_path / "long.md").write_text("# Long\n\n## Here\n\ntext\n")
    assert docsite.fill("<!-- rankgate:include long.md#here -->", tmp_path) == "text"
    with pytest.raises(docsite.DocsiteError, match=re.escape("no heading with anchor #gone in long.md")):
        docsite.fill("<!-- rankgate:include long.md#gone -->", tmp_path)
    with pytest.raises(docsite.DocsiteError, match=re.escape("no page other.md")):
        docsite.fill("<!-- rankgate:include other.md#here -->", tmp_path)


def test_no_page_of_the_site_is_over_the_word_limit():
    long = docsite.too_long(ROOT / "docs")
    assert long == {}, f"pages over {docsite.WORD_LIMIT} words (split each by task): {long}"


def test_a_page_over_the_limit_is_named_with_its_words_filled_in(tmp_path):
    (tmp_path / "short.md").write_text("# Short\n\n<!-- rankgate:include long.md#body -->\n")
    (tmp_path / "long.md").write_text("# Long\n\n## Body\n\n" + "word " * 30 + "\n")
    words = docsite.page_words(tmp_path)
    assert words["long.md"] == 34 and words["short.md"] == 32  # the include counts
    long = docsite.too_long(tmp_path, limit=32)
    assert long.pop("long.md") == 34 and "short.md" not in long
    assert set(docsite.PAGES) <= set(words)  # the generated references count too


def test_the_stage_table_names_every_stage():
    from rankgate.pipeline import stages

    table = docsite.fill("<!-- rankgate:stages -->", ROOT / "docs")
    for stage in stages.all_stages():
        assert f"| {stage.name} |" in table and f"`{stage.dagger}`" in table


def test_the_site_builds_with_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason="the docs (and dev) extra: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
         "-d", str(site)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "rankgate merge-junit" in (site / "reference" / "cli" / "index.html").read_text()
    assert "assert_parity" in (site / "reference" / "api" / "index.html").read_text()
    assert "content.code.copy" in (site / "index.html").read_text()


def test_the_site_is_published_from_main_only_after_every_ci_stage_passed():
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")
    from rankgate.pipeline import stages

    jobs = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())["jobs"]
    job = jobs["docs"]
    ci_stages = [s.workflow.split(":")[1] for s in stages.all_stages()
                 if s.workflow.startswith("ci.yml:")]  # fmt: skip
    assert sorted(job["needs"]) == sorted(ci_stages)
    condition = " ".join(job["if"].split())
    assert "github.event_name == 'push' && github.ref == 'refs/heads/main'" in condition
    for name in ci_stages:
        assert f"needs.{name}.result == 'success'" in condition
    # always() or !cancelled() would let it run past a failed stage
    assert "always()" not in condition and "cancelled()" not in condition
    runs = [step.get("run", "") for step in job["steps"]]
    uses = [step.get("uses", "") for step in job["steps"]]
    assert "nox -s docs" in runs
    assert uses[-1].startswith("actions/deploy-pages@")
