"""Developer entry points: one nox session per pipeline stage.

Sessions run in the current environment (no virtualenv): rankgate tests the
torch/CUDA stack that is installed, and must never swap it for another build.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "unit", "dist"]


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff over the package, suites, tests and pipeline code."""
    session.run("ruff", "check", ".")


@nox.session
def unit(session: nox.Session) -> None:
    """Single-process tests (marker: unit)."""
    session.run("pytest", "-m", "unit", *session.posargs)


@nox.session
def dist(session: nox.Session) -> None:
    """Multi-rank tests on CPU through gloo (marker: dist)."""
    session.run("pytest", "-m", "dist and not gpu", *session.posargs)
