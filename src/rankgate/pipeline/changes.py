"""Which stages a change touches (``--changed-since REF``), and why each runs or not.

:func:`plan` compares the checkout with ``REF`` and returns a :class:`Plan`: the
changed files and one :class:`Decision` per stage. The rules, first match wins:

1. a tag or a release runs every stage (``GITHUB_REF_TYPE=tag``, ``GITHUB_REF=refs/tags/*``,
   ``GITHUB_EVENT_NAME=release``, or a tag on the checked-out commit);
2. a change to :data:`~rankgate.pipeline.stages.RUN_EVERYTHING_PATHS` (the stage list,
   pyproject.toml, .ci) runs every stage;
3. a changed file that no stage claims runs every stage, and the reason names it (add
   it to a stage's ``paths``): an unknown file never lets a change through untested;
4. otherwise a stage runs when a changed file matches one of its ``paths``.

"Changed" means: committed since the merge base of ``REF`` and ``HEAD``, plus
uncommitted and untracked (not ignored) files, so a local run sees work in progress.

For CI: ``python -m rankgate.pipeline.changes [--since REF] [--github]`` prints the
plan; ``--github`` also writes ``stages=["lint", ...]`` to ``$GITHUB_OUTPUT`` and the
plan to ``$GITHUB_STEP_SUMMARY``. Without ``--since`` every stage runs.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rankgate.errors import RankgateError
from rankgate.pipeline import stages
from rankgate.pipeline.stages import Stage
from rankgate.proc import command


class ChangesError(RankgateError):
    """The change cannot be computed (no git, an unknown REF, not a repository)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether one stage runs for a change, and why."""

    stage: str
    run: bool
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The changed files and each stage's decision."""

    since: str
    files: tuple[str, ...]
    decisions: tuple[Decision, ...]

    @property
    def to_run(self) -> tuple[str, ...]:
        return tuple(d.stage for d in self.decisions if d.run)

    def decision(self, stage: str) -> Decision:
        for d in self.decisions:
            if d.stage == stage:
                return d
        raise KeyError(f"stage {stage!r} is not in this plan ({', '.join(self.to_run)})")

    def render(self) -> str:
        """Plain text: a header line, then one line per stage."""
        head = f"rankgate: {len(self.files)} files changed since {self.since}" if self.since else (
            "rankgate: no --changed-since: every stage runs"
        )
        width = max([len(d.stage) for d in self.decisions] + [5])
        lines = [head]
        for d in self.decisions:
            lines.append(f"  {d.stage:<{width}}  {'run ' if d.run else 'skip'}  {d.reason}")
        return "\n".join(lines)

    def markdown(self) -> str:
        """The plan as a Markdown table (for the job summary)."""
        lines = [
            f"### Stages for this change ({len(self.files)} files since `{self.since}`)"
            if self.since
            else "### Stages: every stage runs",
            "",
            "| stage | runs | why |",
            "|---|---|---|",
        ]
        for d in self.decisions:
            lines.append(f"| {d.stage} | {'yes' if d.run else 'no'} | {_md(d.reason)} |")
        return "\n".join(lines) + "\n"


def plan(
    since: str,
    repo: Path | str = ".",
    stage_list: Sequence[Stage] | None = None,
    env: Mapping[str, str] | None = None,
) -> Plan:
    """Decide which of ``stage_list`` (default: every stage but the gate and the scheduled
    one, latest, which no change starts) a change runs.

    ``since`` empty: every stage runs. Raises :class:`ChangesError` when git cannot
    compare the checkout with ``since``.
    """
    chosen = tuple(stage_list if stage_list is not None else _all_but_gate())
    env = os.environ if env is None else env
    if not since:
        return _everything("", (), chosen, "no --changed-since given: every stage runs")
    repo = Path(repo)
    release = _release_reason(env, repo)
    files = changed_files(since, repo)
    if release:
        return _everything(since, files, chosen, release)
    return decide(since, files, chosen)


def decide(since: str, files: Sequence[str], stage_list: Sequence[Stage]) -> Plan:
    """Rules 2-4 of the module docstring on a list of changed files."""
    files = tuple(files)
    for f in files:
        pattern = first_match(f, stages.RUN_EVERYTHING_PATHS)
        if pattern:
            return _everything(since, files, stage_list, f"{f} changed: it runs every stage")
    claimed_by = [s for s in stages.all_stages() if s.paths]
    unclaimed = [f for f in files if not any(first_match(f, s.paths) for s in claimed_by)]
    if unclaimed:
        more = f" (+{len(unclaimed) - 1} more)" if len(unclaimed) > 1 else ""
        why = (
            f"{unclaimed[0]}{more} is under no stage's paths, so every stage runs "
            "(add it to a stage's paths in src/rankgate/pipeline/stages.py)"
        )
        return _everything(since, files, stage_list, why)
    decisions = []
    for stage in stage_list:
        hits = [(f, p) for f in files if (p := first_match(f, stage.paths))]
        if hits:
            f, p = hits[0]
            more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
            why = f"{f} matches {p}{more}" if p != f else f"{f} changed{more}"
            decisions.append(Decision(stage.name, True, why))
        elif files:
            n = len(files)
            why = f"not affected: none of the {n} changed file{'s' * (n != 1)} is under its paths"
            decisions.append(Decision(stage.name, False, why))
        else:
            decisions.append(Decision(stage.name, False, f"nothing changed since {since}"))
    return Plan(since=since, files=files, decisions=tuple(decisions))


def changed_files(since: str, repo: Path) -> tuple[str, ...]:
    """Files changed since the merge base with ``since``: committed, uncommitted, untracked."""
    def git(*args: str) -> str:
        try:
            return command.output(["git", "-C", str(repo), *args])
        except command.CommandFailed as exc:
            raise ChangesError(
                f"cannot compare with {since!r}: git {' '.join(args)}: {exc.reason}. "
                f"Fetch it first (git fetch origin {since.removeprefix('origin/')}); in GitHub "
                "Actions check out with fetch-depth: 0"
            ) from None

    base = git("merge-base", since, "HEAD").strip()
    diffed = git("diff", "--name-only", "--no-renames", base).splitlines()
    untracked = git("ls-files", "--others", "--exclude-standard").splitlines()
    return tuple(sorted({f for f in (*diffed, *untracked) if f}))


def first_match(path: str, patterns: Sequence[str]) -> str:
    """The first pattern ``path`` matches ("" if none)."""
    for pattern in patterns:
        if _regex(pattern).match(path):
            return pattern
    return ""


@functools.cache
def _regex(pattern: str) -> re.Pattern[str]:
    """A glob as a regex: ``**/`` any folders (or none), ``**`` anything, ``*`` within a folder."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _release_reason(env: Mapping[str, str], repo: Path) -> str:
    ref = env.get("GITHUB_REF", "")
    if env.get("GITHUB_REF_TYPE") == "tag" or ref.startswith("refs/tags/"):
        tag = ref.removeprefix("refs/tags/") or env.get("GITHUB_REF_NAME", "")
        return f"tag {tag}: a tag runs every stage"
    if env.get("GITHUB_EVENT_NAME") == "release":
        return "a release runs every stage"
    try:
        tags = command.output(["git", "-C", str(repo), "tag", "--points-at", "HEAD"]).split()
    except command.CommandFailed:
        return ""  # changed_files() names the git problem
    if tags:
        return f"HEAD is tagged {', '.join(tags)}: a tag runs every stage"
    return ""


def _everything(since: str, files: Sequence[str], chosen: Sequence[Stage], why: str) -> Plan:
    decisions = tuple(Decision(s.name, True, why) for s in chosen)
    return Plan(since=since, files=tuple(files), decisions=decisions)


def _all_but_gate() -> list[Stage]:
    return [s for s in stages.all_stages() if not s.includes and not s.scheduled]


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rankgate.pipeline.changes", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--since", default="", metavar="REF", help="compare with REF")
    parser.add_argument("--repo", default=".", help="the repository (default: .)")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    parser.add_argument(
        "--github", action="store_true",
        help="write stages=[...] to $GITHUB_OUTPUT and the plan to $GITHUB_STEP_SUMMARY",
    )
    args = parser.parse_args(argv)
    try:
        result = plan(args.since, args.repo)
    except ChangesError as exc:
        print(f"rankgate changes: error: {exc}", file=sys.stderr)
        return 2
    print(result.render())
    if args.json:
        print(json.dumps({"since": result.since, "files": list(result.files),
                          "run": list(result.to_run),
                          "decisions": {d.stage: {"run": d.run, "reason": d.reason}
                                        for d in result.decisions}}))
    if args.github:
        for name, text in (
            ("GITHUB_OUTPUT", f"stages={json.dumps(list(result.to_run))}\n"),
            ("GITHUB_STEP_SUMMARY", result.markdown()),
        ):
            if not os.environ.get(name):
                print(f"rankgate changes: error: --github needs ${name} (set in GitHub Actions)",
                      file=sys.stderr)
                return 2
            with open(os.environ[name], "a", encoding="utf-8") as f:
                f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
