"""Developer entry points: one nox session per pipeline stage (rankgate.pipeline.stages).

Sessions run in the current environment (no virtualenv): rankgate tests the
torch/CUDA stack that is installed, and must never swap it for another build.

Arguments after ``--``: ``[--profile SITE.toml] [--out DIR] [--strict] [--quick | --full]
[--changed-since REF] [--only STAGE,STAGE] [pytest args]``, e.g. ``nox -s unit -- -x -k world``,
``nox -s gpu -- --profile site.toml``, ``nox -s gate`` (quick: tests marked slow and the
slow stages, package, hpc and container, are left out and named; ``-- --full`` runs everything),
``nox -s gate -- --full --strict`` (a skipped stage fails
the gate too; with ``--strict`` a skipped single stage fails its session as well),
``nox -s gate -- --changed-since origin/main`` (only the stages the change touches; the
others are skipped, saying why, and never fail the gate), ``nox -s gate -- --full --only
lint,unit,dist,package,hpc,container`` (those stages only, in full, package, hpc and
container in the background meanwhile: what CI runs).

One session is not a stage: ``nox -s docs`` builds the documentation site (mkdocs.yml)
into out/site with --strict; the unit stage builds it too (tests/test_docsite.py).
"""

from __future__ import annotations

import shutil

import nox

from rankgate.pipeline import executor, stages

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "unit", "dist"]


def _session_for(stage: stages.Stage):
    def session_body(session: nox.Session) -> None:
        # The gate answers in minutes unless --full; a stage's session runs all of it.
        options = executor.Options.from_args(session.posargs, quick=bool(stage.includes))
        if options.only and not stage.includes:
            session.error(f"--only chooses the gate's stages; nox -s {stage.name} runs one")
        if stage.includes:
            outcomes = executor.run_gate(options)
            blockers = executor.verdict(outcomes, allow_skipped=not options.strict)
            if blockers:
                session.error("gate did not pass: " + "; ".join(blockers))
            return
        outcome = executor.run_stage(stage, options)
        if outcome.status in ("failed", "incomplete"):
            session.error(f"{stage.name} {outcome.status}: {outcome.reason}")
        on_purpose = outcome.not_affected or outcome.empty_on_purpose
        if outcome.status == "skipped" and options.strict and not on_purpose:
            session.error(f"{stage.name} skipped under --strict: {outcome.reason}")
        if outcome.status == "skipped":
            session.skip(outcome.reason)

    session_body.__doc__ = stage.description
    session_body.__name__ = stage.name
    return session_body


for _stage in stages.all_stages():
    nox.session(name=_stage.name)(_session_for(_stage))


@nox.session(name="docs")
def docs(session: nox.Session) -> None:
    """The documentation site, built with --strict into out/site (arguments go to mkdocs)."""
    if shutil.which("mkdocs") is None:
        session.error("mkdocs is not installed: pip install -e '.[docs]' (or the dev extra)")
    # the committed code map rewritten from the docstrings (the site serves it fresh anyway;
    # tests/test_codemap.py fails while the committed copy is stale)
    session.run("python", "-m", "rankgate.codemap", "docs")
    # Material's notice about MkDocs 2.0 is a banner on every build, not about this site.
    session.run("mkdocs", "build", "--strict", *session.posargs, env={"NO_MKDOCS_2_WARNING": "1"})
