"""The ``rankgate`` command's one rule for bad input: one line naming the option and
what it accepts, exit 2, before any work starts.

Option values are checked by argparse types from here (``int_at_least(1)``, ``seconds``,
``existing_file``), so a bad value never reaches a benchmark or a
submission. Checks that need several options or the machine ("nccl needs GPUs") raise
:class:`UsageError` from a subcommand's ``validate(args)``, which runs before ``run``;
so does a results folder that cannot be made (``make_output_folder``).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from pathlib import Path

from rankgate.errors import RankgateError

USAGE_EXIT = 2


class UsageError(RankgateError):
    """Input that this command cannot use, or a run that cannot happen here (one line)."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (no usage block) and exit 2."""

    def error(self, message: str):
        self.exit(USAGE_EXIT, f"{self.prog}: error: {message}\n")


_EVERY_SUBCOMMAND = False


@contextlib.contextmanager
def every_subcommand():
    """Within it, ``rankgate``'s parsers add every subcommand's options, not only the
    chosen one's (which is all a command line needs): the reference pages list them all."""
    global _EVERY_SUBCOMMAND
    _EVERY_SUBCOMMAND = True
    try:
        yield
    finally:
        _EVERY_SUBCOMMAND = False


def loading_every_subcommand() -> bool:
    return _EVERY_SUBCOMMAND


def run_module_main(prog: str, doc: str, module, argv: list[str] | None = None) -> int:
    """``python -m`` of a benchmark module (``add_arguments``, ``validate``, ``run``), its
    bad input one line and exit 2, as ``rankgate bench NAME`` reads it."""
    parser = OneLineParser(prog=prog, description=doc.splitlines()[0])
    module.add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        module.validate(args)
    except UsageError as exc:
        parser.error(str(exc))
    return module.run(args)


def int_at_least(low: int):
    """An integer option of at least ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def seconds(text: str) -> float:
    """A duration in seconds: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def existing_file(text: str) -> str:
    """A file that exists and can be read."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    return text


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_file(text: str) -> str:
    """An existing file that is a PNG image (what a report embeds as one)."""
    existing_file(text)
    try:
        with open(text, "rb") as f:
            start = f.read(len(PNG_SIGNATURE))
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot read ({exc.strerror})") from None
    if start != PNG_SIGNATURE:
        raise argparse.ArgumentTypeError(f"{text}: not a PNG image")
    return text


def make_output_folder(option: str, text: str | None) -> None:
    """Make the folder a command's results go to, before any work starts: a run that could
    not save them stops now instead of losing them at its end. Call it last among a
    command's checks, so that bad input elsewhere leaves no folder behind."""
    if text is None:
        return
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {text}: not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{option} {text}: cannot make the folder ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {text}: cannot write in the folder")
