"""What a rank does before an adopted test: the one entry the rank's loop (and in-place
mode) calls with the test's prelude; apart from ``prelude`` and ``spawnhelper`` so that
neither imports the other."""

from __future__ import annotations

import os
from collections.abc import Mapping

from rankgate.harness.adopt.prelude import LAUNCHER_VARIABLES, call_target, rank_values
from rankgate.harness.adopt.spawnhelper import install_lines


def enter(prelude: Mapping) -> None:
    """Before an adopted test on this rank: install spawn helpers, set variables, set up.

    ``prelude``: {"helpers": [adoption lines], "env": {NAME: template}, "setup": target}.
    The variables stay for the test; the rank restores its environment after it.
    """
    if prelude.get("helpers"):
        install_lines(prelude["helpers"])
    if prelude.get("env") is not None or prelude.get("setup"):
        values = rank_values()
        for name in LAUNCHER_VARIABLES:
            os.environ[name] = values[name.lower()]
        for name, template in (prelude.get("env") or {}).items():
            os.environ[name] = template.format(**values)
    if prelude.get("setup"):
        call_target(prelude["setup"])()
