"""An adoption line's callables checked when the line is read: a ``setup=`` or
``teardown=`` that does not import is a usage error, not a traceback after every test.

The error names the word, the callable and the installed version of the package it
comes from: a callable that one version of a project has and another lacks (DeepSpeed's
``_release_process_group_references`` exists from 0.19.8) says which one is here.
"""

from __future__ import annotations

import importlib.metadata

from rankgate.harness.adopt.config import AdoptConfigError, WorldClass
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


def installed(target: str) -> str:
    """'installed: deepspeed 0.19.6' for the distribution providing the target's top
    package, or a line saying none does."""
    top = target.partition(":")[0].split(".")[0]
    names = importlib.metadata.packages_distributions().get(top, [])
    found = []
    for name in dict.fromkeys(names):
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    if found:
        return "installed: " + ", ".join(found)
    return f"no installed distribution provides {top!r}"
