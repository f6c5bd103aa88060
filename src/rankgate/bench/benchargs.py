"""Option types of the ``rankgate bench`` subcommands beyond :mod:`rankgate.cliargs`'s:
comma lists and bounded numbers.

Each raises :class:`argparse.ArgumentTypeError` with the value and what is allowed;
argparse names the option, so a bad value is one line and exit 2 before any rank starts.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Iterable


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",")]


def int_list(low: int):
    """A comma list of integers, each at least ``low`` (``1,2,4``)."""

    def parse(text: str) -> list[int]:
        expected = f"a comma list of integers >= {low} (e.g. 1,2,4), got {text!r}"
        try:
            values = [int(item) for item in _items(text)]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}") from None
        if any(v < low for v in values):
            raise argparse.ArgumentTypeError(f"expected {expected}")
        return values

    parse.__name__ = f"list of integers >= {low}"
    return parse


def length(text: str) -> int:
    """A sequence length: a whole number of tokens, or of K = 1024 tokens (``16K``)."""
    item = text.strip().upper()
    scale = 1024 if item.endswith("K") else 1
    value = int(item[:-1] if scale > 1 else item)
    return value * scale


def length_list(text: str) -> list[int]:
    """A comma list of sequence lengths >= 1, K = 1024 (``16K,32K`` or ``256,512``)."""
    expected = f"a comma list of lengths >= 1, K = 1024 (e.g. 16K,32K or 256,512), got {text!r}"
    try:
        values = [length(item) for item in _items(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"expected {expected}")
    return values


def name_list(choices: Iterable[str]):
    """A comma list of names, each one of ``choices`` (kept as the text: callers split it)."""
    valid = tuple(choices)

    def parse(text: str) -> str:
        names = _items(text)
        unknown = [n for n in names if n not in valid]
        if unknown or not text.strip():
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected a comma list of {', '.join(valid)}"
            )
        return ",".join(names)

    parse.__name__ = "comma list"
    return parse


def method_at_world_list(methods: Iterable[str]):
    """A comma list of METHOD@WORLD (``ring@1,torch-cp@2``); empty text: none."""
    valid = tuple(methods)

    def parse(text: str) -> list[str]:
        items = []
        for item in (item for item in _items(text) if item):
            method, _, world = item.partition("@")
            if method not in valid or not world.isdigit() or int(world) < 1:
                raise argparse.ArgumentTypeError(
                    f"{item!r}: expected METHOD@WORLD (e.g. ring@1), METHOD one of "
                    f"{', '.join(valid)}"
                )
            items.append(f"{method}@{int(world)}")  # ring@01 is ring@1
        return items

    parse.__name__ = "list of METHOD@WORLD"
    return parse


def number_at_least(low: float):
    """A finite number of at least ``low``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low:
            raise argparse.ArgumentTypeError(f"must be a number >= {low:g}, got {text}")
        return value

    parse.__name__ = f"number >= {low:g}"
    return parse


def metric_fraction(text: str) -> str:
    """METRIC=FRACTION, the fraction above 0 and below 10 (0.15 = 15%)."""
    name, sep, value = text.partition("=")
    try:
        fraction = float(value)
    except ValueError:
        fraction = math.nan
    if not sep or not name.strip() or not 0 < fraction < 10:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected METRIC=FRACTION, the fraction above 0 and below 10 "
            "(e.g. pool_median_ms=0.15)"
        )
    return text


def existing_path(text: str) -> str:
    """A file or folder that exists."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text}: no such file or folder")
    return text
