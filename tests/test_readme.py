"""The README opens with the two set-up commands, and CI runs the second one."""

import re
from pathlib import Path

import pytest

from rankgate.pipeline.lock import LOCK

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    first_block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    return [line for line in first_block.splitlines() if line and not line.startswith("#")]


# The lock first (every dependency at the version CI tested, hashes checked), then
# rankgate itself and the CPU torch, which the lock leaves to the machine.
INSTALL = f"pip install --no-deps -r {LOCK} && pip install torch==2.13.0 -e '.[dev]'"


def test_readme_opens_with_main_job_and_test_commands():
    main_job, tests = readme_commands()
    assert main_job == f"{INSTALL} && nox -s gate"
    assert tests.startswith(f"{INSTALL} && nox -s ")


def test_ci_runs_the_readme_test_command():
    ci_lines = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci_lines


def test_test_command_runs_every_stage_ci_can_run_here():
    # Through the gate, which runs package, hpc and container in the background beside the
    # others.
    # In full: the quick gate (nox -s gate alone) leaves out the tests and stages marked slow.
    assert readme_commands()[1].endswith(
        "nox -s gate -- --full --only lint,unit,dist,package,hpc,container"
    )


# --- a README a newcomer reads in two minutes (issue 62) ---------------------------------

README = ROOT / "README.md"
EXAMPLE = ROOT / "docs" / "examples" / "first"
SIX_PARTS = ["noxfile.py", "ci/", "suites/", "containers/", "pyproject.toml", "README.md"]
"""The top-level parts the design's layout names, in its order."""


def fenced(language: str) -> list[tuple[int, str]]:
    """Each ```language block of the README: its first line's number and its text."""
    text = README.read_text()
    return [(text[: m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(rf"^```{language}\n(.*?)^```", text, re.S | re.M)]  # fmt: skip


def test_the_readme_is_short():
    words = len(README.read_text().split())  # as wc -w counts
    assert words <= 700, f"README.md has {words} words; the rest belongs in docs/"


def test_its_first_example_is_within_its_first_40_lines():
    line, _ = fenced("python")[0]
    assert line <= 40


def test_its_example_and_failing_output_are_the_recorded_run():
    # docs/examples/first is run again in the dist stage (tests/test_docs_examples.py) with
    # the plugins the README's install brings, its output compared with output-dev.txt: the
    # README shows those files, not a retyped copy
    (_, code), (_, output) = fenced("python")[0], fenced("text")[0]
    assert code == (EXAMPLE / "test_first.py").read_text()
    assert output == (EXAMPLE / "output-dev.txt").read_text()
    assert "rank 1 failed; rank 0 passed" in output


def readme_links() -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", README.read_text())


def test_every_link_reaches_a_file_and_its_heading():
    from rankgate.docsite import slug

    for link in readme_links():
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {path}, which is not there"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / path).read_text(), re.M)
            assert anchor in {slug(h) for h in headings}, f"README.md: no #{anchor} in {path}"


def test_it_links_every_part_of_the_site():
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the dev extra")

    def pages(entry):
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            if isinstance(value, list):
                for inner in value:
                    yield from pages(inner)
            else:
                yield value

    # Each top-level entry of the site's navigation is a part (a page, or a section whose
    # first page links the others): the README links at least one page of each that is a
    # committed file (reference/cli.md and pytest-options.md are generated at build time)
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    linked = {link.partition("#")[0] for link in readme_links()}
    unlinked = []
    for part in nav[1:]:  # the first is the site's home, index.md
        committed = [p for p in pages(part) if (ROOT / "docs" / p).is_file()]
        if committed and not any(f"docs/{p}" in linked for p in committed):
            unlinked.append(committed)
    assert unlinked == []


def test_its_layout_table_starts_from_the_six_parts_the_design_names():
    section = README.read_text().split("## Layout", 1)[1]
    paths = re.findall(r"^\| `([^`]+)`", section, re.M)
    assert paths[: len(SIX_PARTS)] == SIX_PARTS
    for path in SIX_PARTS:
        assert (ROOT / path).exists()
