"""Every ``rankgate`` command and option says, for a user, what it does and its default."""

from __future__ import annotations

import argparse
import io

import pytest

from rankgate import cli

pytestmark = pytest.mark.unit

# Flags are off unless given: their default needs no words.
FLAGS = (
    argparse._HelpAction, argparse._StoreTrueAction, argparse._StoreFalseAction,
    argparse._StoreConstAction, argparse._CountAction, argparse._VersionAction,
)  # fmt: skip
PARSERS = cli.every_parser()


def test_every_subcommand_is_reached():
    progs = {parser.prog for parser in PARSERS}
    assert {"rankgate run", "rankgate dispatch", "rankgate bench comm"} <= progs


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.prog)
def test_every_command_says_what_it_does(parser):
    assert parser.description, f"{parser.prog} has no description"
    assert "``" not in parser.format_help(), f"{parser.prog}: reST markup in a terminal"


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.prog)
def test_every_option_says_what_it_does_and_its_default(parser):
    problems = []
    for action in parser._actions:
        name = "/".join(action.option_strings) or action.dest
        if not action.help:
            problems.append(f"{name}: no help")
        elif (
            action.option_strings
            and not isinstance(action, FLAGS)
            and not action.required
            and "default" not in action.help
            and "required" not in action.help
        ):
            problems.append(f"{name}: its help does not say its default")
    assert not problems, f"{parser.prog}: " + "; ".join(problems)


def test_top_level_help_opens_with_what_rankgate_is():
    parser = PARSERS[0]
    out = io.StringIO()
    parser.print_help(out)
    assert "The ``rankgate`` command" not in out.getvalue()
    assert "multi-rank pytest tests" in out.getvalue()
