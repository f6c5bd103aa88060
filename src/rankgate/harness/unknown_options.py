"""A misspelt rankgate option is a usage error that names the nearest valid one.

pytest only warns of an unknown ini key ("Unknown config option: rankgate_timout") and
runs on with the default, so a typo silently changes the run. Its command line rejects
an unknown ``--rankgate-*`` option (abbreviations too: its parser has no prefix
matching) without saying what was meant. Both become one line here, before any test.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

import pytest

from rankgate.harness.options import INI_OPTIONS

CLI_PREFIX = "--rankgate-"
INI_PREFIX = "rankgate_"


def cli_options(parser: pytest.Parser) -> list[str]:
    """Every ``--rankgate-*`` option the parser knows."""
    names = (n for option in parser.getgroup("rankgate").options for n in option.names())
    return sorted(n for n in names if n.startswith(CLI_PREFIX))


def cli_problem(args: Sequence[str], known: Iterable[str]) -> str | None:
    """The first ``--rankgate-*`` argument that is no option, with the nearest one."""
    known = sorted(known)
    for arg in args:
        if arg == "--":
            break
        name = arg.split("=", 1)[0]
        if name.startswith(CLI_PREFIX) and name not in known:
            return f"unknown option {arg}: {_nearest(name, known)}"
    return None


def ini_problem(config: pytest.Config) -> str | None:
    """The first ``rankgate_*`` key of the ini file (or ``-o``) that is no option."""
    unknown = getattr(config, "_get_unknown_ini_keys", None)  # pytest's own list of them
    keys = sorted(k for k in (unknown() if unknown else ()) if k.startswith(INI_PREFIX))
    if not keys:
        return None
    said = getattr(config, "_inicfg", {}).get(keys[0])
    if getattr(said, "origin", "") == "override":
        where = " (-o)"
    else:
        where = f" in {config.inipath}" if config.inipath else ""
    nearest = _nearest(keys[0], sorted(INI_OPTIONS), INI_PREFIX)
    return f"unknown ini option {keys[0]}{where}: {nearest}"


def _nearest(name: str, known: list[str], prefix: str = CLI_PREFIX) -> str:
    """'did you mean X?', else the valid names. Compared without the prefix that all
    share, which would make any two names look alike."""
    tails = {k.removeprefix(prefix): k for k in known}
    close = difflib.get_close_matches(name.removeprefix(prefix), list(tails), n=1, cutoff=0.6)
    if close:
        return f"did you mean {tails[close[0]]}?"
    return "rankgate's are " + ", ".join(known)
