"""The ledger's wrapper takes and passes on each argument as torch's function takes it,
whatever kinds of parameter a torch version gives its collectives."""

from __future__ import annotations

import inspect

import pytest

from rankgate.harness import ledger
from rankgate.harness.ledger_call import passing

pytestmark = pytest.mark.unit


def _every_kind(tensor, /, group=None, *more, async_op=False, **options):
    return tensor, group, more, async_op, options


def test_every_kind_of_parameter_is_taken_and_passed_on_as_it_came():
    parameters, arguments, defaults = passing(inspect.signature(_every_kind))
    assert parameters == [
        "tensor", "/", "group=_default_group", "*more", "async_op=_default_async_op", "**options",
    ]  # fmt: skip
    assert arguments == ["tensor", "group", "*more", "async_op=async_op", "**options"]
    assert defaults == {"_default_group": None, "_default_async_op": False}


def test_a_wrapped_function_gets_what_its_caller_gave(monkeypatch):
    monkeypatch.setattr(ledger, "_file_kinds", {__file__: ledger._PASS})  # records nothing
    wrapped = ledger._wrap("all_reduce", _every_kind)
    assert wrapped(1) == (1, None, (), False, {})
    assert wrapped(1, "g", 2, 3, async_op=True, timeout=5) == (1, "g", (2, 3), True, {"timeout": 5})
    assert inspect.signature(wrapped, follow_wrapped=False) == inspect.signature(
        _every_kind
    ).replace(return_annotation=inspect.Signature.empty)
    with pytest.raises(TypeError):
        wrapped(tensor=1)  # positional only, as torch's function takes it


def test_keyword_only_parameters_after_plain_ones_get_their_star():
    def barrier(group=None, *, timeout=None):
        return group, timeout

    parameters, arguments, _ = passing(inspect.signature(barrier))
    assert parameters == ["group=_default_group", "*", "timeout=_default_timeout"]
    assert arguments == ["group", "timeout=timeout"]


def test_a_parameter_named_like_the_wrappers_own_locals_is_refused_by_name():
    def odd(_caller):
        return _caller

    with pytest.raises(ValueError, match="cannot wrap a parameter named '_caller'"):
        passing(inspect.signature(odd))
