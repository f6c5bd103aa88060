"""The documentation site's generated parts, read from the code, never typed.

mkdocs loads this file as a hook (mkdocs.yml: ``hooks``); it adds three pages, makes the
code map's pages afresh and fills four kinds of placeholder:

- ``reference/cli.md`` and ``reference/cli-bench.md``: every ``rankgate`` command's
  ``--help``, from its parser (:func:`rankgate.cli.every_parser`), the benchmarks' apart;
- ``reference/pytest-options.md``: every ``--rankgate-*`` option and ``rankgate_*`` ini
  key with its default, from the plugins' own ``pytest_addoption`` on a fresh pytest
  parser (tests/test_docsite.py compares it with the options a real session has);
- ``code-map.md`` and ``code-map/*.md``: each package and module with its docstring's
  first sentence (:mod:`rankgate.codemap`), served as the code says at build time in
  place of the committed copies;
- ``<!-- rankgate:stages -->``: the pipeline's stages as a table (``rankgate.pipeline``);
- ``<!-- rankgate:suites -->``: each suite under suites/, its test modules and what each
  one's docstring says it proves;
- ``<!-- rankgate:include PAGE#ANCHOR -->``: the section of another page under that
  heading, so a short page shows a long page's section without a copy that drifts;
- ``<!-- rankgate:example NAME/FILE -->``: a file of a runnable example under
  docs/examples/NAME as a code block (its command, from example.toml, with
  ``NAME/command``); tests/test_docs_examples.py runs each example in the dist stage and
  compares its output with the recorded one.

``python -m rankgate.docsite DIR`` writes the three reference pages into DIR.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rankgate import codemap
from rankgate.errors import RankgateError

CLI_PAGE = "reference/cli.md"
CLI_BENCH_PAGE = "reference/cli-bench.md"
OPTIONS_PAGE = "reference/pytest-options.md"
HELP_COLUMNS = "100"
"""--help is wrapped at this width on the page, whatever the terminal that builds it."""

_INCLUDE = re.compile(r"<!-- rankgate:include ([\w./-]+\.md)#([\w-]+) -->")
_STAGES = "<!-- rankgate:stages -->"
_SUITES = "<!-- rankgate:suites -->"
_EXAMPLE = re.compile(r"^([ \t]*)<!-- rankgate:example ([\w-]+)/([\w.-]+) -->$", re.M)
EXAMPLES = "examples"
"""The runnable examples' folder, under the docs folder."""
_LANGUAGES = {".py": "python", ".txt": "text", ".toml": "toml"}
WORD_LIMIT = 2500
"""The most words a page of the site may have: past it, the page is split by task."""


class DocsiteError(RankgateError):
    """A placeholder this module cannot fill (a page or heading that is not there)."""


# --- the CLI ---------------------------------------------------------------------------


@contextmanager
def _columns(width: str) -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = width  # argparse wraps at shutil.get_terminal_size()
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _help_page(title: str, lead: str, bench: bool) -> str:
    """The --help of every ``rankgate`` command (``bench``: those of ``rankgate bench``,
    else the others), one section each."""
    from rankgate import cli

    lines = [title, "", "Generated from the parsers (`rankgate.docsite`): what `rankgate "
             f"COMMAND --help` prints. Options that take no value are off unless given. {lead}",
             ""]  # fmt: skip
    with _columns(HELP_COLUMNS):
        for parser in cli.every_parser():
            if parser.prog.startswith("rankgate bench") != bench:
                continue
            text = parser.format_help().rstrip()
            lines += [f"## `{parser.prog}`", "", "```text", text, "```", ""]
    return "\n".join(lines)


def cli_page() -> str:
    """Every ``rankgate`` command's --help but the benchmarks'."""
    return _help_page("# Command line: `rankgate`",
                      f"The benchmarks' commands: [`rankgate bench`]({Path(CLI_BENCH_PAGE).name}).",
                      bench=False)  # fmt: skip


def cli_bench_page() -> str:
    """Every ``rankgate bench`` command's --help."""
    return _help_page("# Command line: `rankgate bench`",
                      f"The other commands: [`rankgate`]({Path(CLI_PAGE).name}).",
                      bench=True)  # fmt: skip


# --- the pytest options ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One ``--rankgate-*`` command-line option of the plugin."""

    names: tuple[str, ...]
    metavar: str
    default: object
    help: str


@dataclass(frozen=True, slots=True)
class IniKey:
    """One ``rankgate_*`` ini key of the plugin."""

    name: str
    type: str
    default: object
    help: str


def plugin_parser():
    """A fresh pytest parser with only rankgate's options on it, added by the plugins'
    own ``pytest_addoption`` hooks (those the ``rankgate`` entry point registers)."""
    from _pytest.config.argparsing import Parser

    from rankgate.pytest_plugin import PLUGINS

    parser = Parser(_ispytest=True)
    for _name, plugin in PLUGINS:
        hook = getattr(plugin, "pytest_addoption", None)
        if hook is None:
            continue
        wanted = inspect.signature(hook).parameters
        hook(**{k: v for k, v in {"parser": parser, "pluginmanager": None}.items() if k in wanted})
    return parser


def pytest_options(parser=None) -> tuple[list[Option], list[IniKey]]:
    """rankgate's command-line options and ini keys, as the parser holds them."""
    parser = parser or plugin_parser()
    options = []
    for group in parser._groups:
        for option in group.options:
            attrs = option.attrs()
            names = tuple(option.names())
            if any(name.startswith("--rankgate-") for name in names):
                metavar = attrs.get("metavar") or ""
                if not metavar and attrs.get("choices"):
                    metavar = "|".join(attrs["choices"])
                options.append(Option(names, metavar, attrs.get("default"), attrs.get("help", "")))
    keys = []
    for name, (help_text, kind, default) in parser._inidict.items():
        if name.startswith("rankgate_"):
            keys.append(IniKey(name, kind or "string", default, help_text))
    return options, keys


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value: object, help_text: str) -> str:
    """The registered default, or else the one the help states ("default 0")."""
    if value not in (None, "", []):
        return f"`{value}`"
    stated = re.search(r"\bdefault:? ([^;)]+)", help_text)
    return stated.group(1).strip() if stated else "none"


def options_page() -> str:
    """Every ``--rankgate-*`` option and ``rankgate_*`` ini key, with its default."""
    options, keys = pytest_options()
    lines = [
        "# pytest options and ini keys",
        "",
        "Generated from the plugin's `pytest_addoption` (`rankgate.docsite`). A default in "
        "code font is the one registered with pytest; the others are the ones the help "
        "states (a command-line option falls back to its ini key, and that to its default).",
        "",
        "## Command-line options",
        "",
        "| option | default | what it does |",
        "|---|---|---|",
    ]
    for option in options:
        shown = ", ".join(f"`{name}{' ' + option.metavar if option.metavar else ''}`"
                          for name in option.names)  # fmt: skip
        lines.append(f"| {_cell(shown)} | {_cell(_default(option.default, option.help))} | "
                     f"{_cell(option.help)} |")  # fmt: skip
    lines += ["", "## ini keys", "",
              "`[tool.pytest.ini_options]` in pyproject.toml, or `[pytest]` in pytest.ini.", "",
              "| key | type | default | what it does |", "|---|---|---|---|"]  # fmt: skip
    for key in keys:
        lines.append(f"| `{key.name}` | {key.type} | {_cell(_default(key.default, key.help))} | "
                     f"{_cell(key.help)} |")  # fmt: skip
    return "\n".join(lines) + "\n"


PAGES = {CLI_PAGE: cli_page, CLI_BENCH_PAGE: cli_bench_page, OPTIONS_PAGE: options_page}


def unlisted(page: str, names: set[str]) -> list[str]:
    """The option or key names that ``page`` does not list (each is listed in code font)."""
    return sorted(name for name in names if not re.search(rf"`{re.escape(name)}[` ]", page))


def write(folder: Path) -> list[Path]:
    """The generated pages, written under ``folder``."""
    written = []
    for name, make in PAGES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(make())
        written.append(path)
    return written


# --- placeholders ----------------------------------------------------------------------


def stages_table() -> str:
    from rankgate.pipeline import stages

    lines = ["| stage | what it runs | nox | Dagger function | GitHub Actions job |",
             "|---|---|---|---|---|"]  # fmt: skip
    for stage in stages.all_stages():
        lines.append(f"| {stage.name} | {_cell(stage.description)} | `nox -s {stage.name}` | "
                     f"`{stage.dagger}` | `{stage.workflow}` |")  # fmt: skip
    return "\n".join(lines)


def suites_table(root: Path) -> str:
    """Each test module under ``root``/suites with the first sentence of its docstring."""
    import ast

    lines = []
    for suite in sorted(p for p in (root / "suites").iterdir() if p.is_dir()):
        lines += [f"### `suites/{suite.name}/`", "", "| module | what it proves |", "|---|---|"]
        for module in sorted(suite.glob("test_*.py")):
            doc = ast.get_docstring(ast.parse(module.read_text())) or ""
            paragraph = " ".join(doc.split("\n\n", 1)[0].split())
            first = re.split(r"(?<=\.) ", paragraph, maxsplit=1)[0]
            lines.append(f"| `{module.name}` | {_cell(first)} |")
        lines.append("")
    return "\n".join(lines)


def example_settings(folder: Path) -> dict:
    """An example's example.toml: ``command``, ``exit_code``, ``recorded_in``."""
    from rankgate.tomlfile import TomlFileError, read

    try:
        settings = read(folder / "example.toml")
    except TomlFileError as exc:
        raise DocsiteError(f"example {folder.name}: {exc}") from None
    missing = {"command", "exit_code", "recorded_in"} - set(settings)
    if missing:
        lacking = ", ".join(sorted(missing))
        raise DocsiteError(f"example {folder.name}: example.toml lacks {lacking}")
    return settings


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc gives a heading."""
    text = re.sub(r"[^\w\s-]", "", heading).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def section(markdown: str, anchor: str) -> str:
    """The body of the section whose heading's anchor is ``anchor`` (headings inside
    fenced code are not headings)."""
    lines = markdown.splitlines()
    fenced = False
    start = level = None
    for number, line in enumerate(lines):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else re.match(r"(#{1,6}) (.*)", line)
        if not match:
            continue
        if start is None and slug(match.group(2)) == anchor:
            start, level = number + 1, len(match.group(1))
        elif start is not None and len(match.group(1)) <= level:
            return "\n".join(lines[start:number]).strip("\n")
    if start is None:
        raise DocsiteError(f"no heading with anchor #{anchor}")
    return "\n".join(lines[start:]).strip("\n")


def fill(markdown: str, docs_dir: Path) -> str:
    """The page with its placeholders filled."""

    def include(match: re.Match) -> str:
        page, anchor = match.groups()
        path = docs_dir / page
        if not path.is_file():
            raise DocsiteError(f"include {page}#{anchor}: no page {page} in {docs_dir}")
        try:
            return section(path.read_text(), anchor)
        except DocsiteError as exc:
            raise DocsiteError(f"include {page}#{anchor}: {exc} in {page}") from None

    def example(match: re.Match) -> str:
        indent, name, file = match.groups()
        folder = docs_dir / EXAMPLES / name
        if file == "command":
            text, language = example_settings(folder)["command"], "bash"
        elif (folder / file).is_file():
            text, language = (folder / file).read_text(), _LANGUAGES.get(Path(file).suffix, "")
        else:
            raise DocsiteError(f"example {name}/{file}: no file {folder / file}")
        block = [f"```{language}", *text.rstrip("\n").splitlines(), "```"]
        return "\n".join(f"{indent}{line}" if line else "" for line in block)

    markdown = _INCLUDE.sub(include, markdown)
    markdown = _EXAMPLE.sub(example, markdown)
    if _STAGES in markdown:
        markdown = markdown.replace(_STAGES, stages_table())
    if _SUITES in markdown:
        markdown = markdown.replace(_SUITES, suites_table(docs_dir.parent))
    return markdown


def page_words(docs_dir: Path) -> dict[str, int]:
    """Every page of the site and its words, as ``wc -w`` counts its Markdown with the
    placeholders filled: the pages under ``docs_dir`` and the generated references."""
    pages = {str(path.relative_to(docs_dir)): fill(path.read_text(), docs_dir)
             for path in sorted(docs_dir.rglob("*.md"))}  # fmt: skip
    pages |= {name: make() for name, make in PAGES.items()}
    return {name: len(text.split()) for name, text in pages.items()}


def too_long(docs_dir: Path, limit: int = WORD_LIMIT) -> dict[str, int]:
    """The pages over ``limit`` words, with their counts."""
    return {name: words for name, words in page_words(docs_dir).items() if words > limit}


# --- mkdocs hooks ----------------------------------------------------------------------


def on_files(files, config):
    from mkdocs.structure.files import File

    for name, make in PAGES.items():
        files.append(File.generated(config, name, content=make()))
    # the code map's pages as the code says now, in place of the committed copies (which
    # tests/test_codemap.py holds to the same text)
    for name, text in codemap.pages().items():
        committed = files.get_file_from_path(name)
        if committed is not None:
            files.remove(committed)
        files.append(File.generated(config, name, content=text))
    return files


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    try:
        return fill(markdown, Path(config["docs_dir"]))
    except DocsiteError as exc:
        raise PluginError(f"{page.file.src_path}: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankgate.docsite", description="write the generated reference pages"
    )
    parser.add_argument("folder", type=Path, help="where reference/*.md go (the docs folder)")
    args = parser.parse_args(argv)
    for path in write(args.folder):
        print(path, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
