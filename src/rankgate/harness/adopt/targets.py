"""An adoption line's callables checked when the line is read: a ``setup=`` or
``teardown=`` that does not import, or a spawn helper's word naming a parameter the
helper lacks, is a usage error, not a traceback or a warning at every test.

The error names the word, the callable and the installed version of the package it
comes from: a callable that one version of a project has and another lacks (DeepSpeed's
``_release_process_group_references`` exists from 0.19.8) says which one is here.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import sys
from pathlib import Path

from rankgate.harness.adopt.config import AdoptConfigError, SpawnHelper, WorldClass
from rankgate.harness.adopt.prelude import call_target

CALLABLE_WORDS = ("setup", "teardown")
"""The words of a world-class line that name a ``module:function`` rankgate calls."""


def check_callables(line: str, world_class: WorldClass) -> None:
    """Raise AdoptConfigError for the first ``setup=``/``teardown=`` that does not
    import (or is not callable)."""
    for word in CALLABLE_WORDS:
        target = getattr(world_class, word)
        if target:
            check_callable(line, word, target)


def check_callable(line: str, word: str, target: str) -> None:
    try:
        obj = call_target(target)
    except Exception as exc:  # ImportError, AttributeError, or the module's own failure
        problem = f"does not import ({type(exc).__name__}: {exc})"
    else:
        if callable(obj):
            return
        problem = f"is not callable (a {type(obj).__name__})"
    raise AdoptConfigError(
        f"{line!r}: {word}={target} {problem}; {installed(target)}; docs/adopting.md "
        "lists the versions each adoption line was tried with"
    )


HELPER_WORDS = ("func", "world", "backend", "args", "kwargs")
"""The words of a spawn-helper line that name one of the helper's parameters."""

_OTHERWISE = {"world": ", or world=N for a fixed number", "backend": ", or backend=none (gloo)"}


def check_parameters(line: str, helper: SpawnHelper, function) -> None:
    """Raise AdoptConfigError for the first word naming a parameter ``function`` (the
    helper) does not have: every test calling it would run its own way instead."""
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # no signature to read: each call says what it can
        return
    for word in HELPER_WORDS:
        param = getattr(helper, word)
        if param is None or (word == "world" and param.isdigit()) or param in names:
            continue
        given = "" if any(w.startswith(f"{word}=") for w in line.split()) else " (the default)"
        raise AdoptConfigError(
            f"{line!r}: {word}={param}{given}: {helper.target} has no parameter {param!r} "
            f"(its parameters: {', '.join(names) or 'none'}); name the one that holds it "
            f"with {word}=P{_OTHERWISE.get(word, '')}"
        )


def installed(target: str) -> str:
    """'imported: deepspeed 0.19.6 from /x/deepspeed' for the target's top package as this
    process imports it (its ``__version__`` and folder: a copy on PYTHONPATH wins over the
    installed distribution), with the installed distribution's version where it differs;
    the distribution's alone where the package does not import."""
    top = target.partition(":")[0].split(".")[0]
    distributions = _distributions(top)
    try:
        module = sys.modules.get(top) or importlib.import_module(top)
    except Exception:  # its own import fails: the distribution is all there is to say
        module = None
    if module is None:
        if distributions:
            return "installed: " + ", ".join(f"{n} {v}" for n, v in distributions)
        return f"no installed distribution provides {top!r}"
    version = getattr(module, "__version__", None)
    file = getattr(module, "__file__", None)
    where = f" from {Path(file).parent}" if file else ""
    said = f"imported: {top} {version or '(no __version__)'}{where}"
    others = [f"{n} {v}" for n, v in distributions if v != str(version)]
    return said + (f" (installed: {', '.join(others)})" if others else "")


def _distributions(top: str) -> list[tuple[str, str]]:
    """(name, version) of each installed distribution providing package ``top``."""
    found = []
    for name in dict.fromkeys(importlib.metadata.packages_distributions().get(top, [])):
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found
