"""How the ledger's wrapper of a torch.distributed function takes its arguments and
passes them on (:mod:`rankgate.harness.ledger`): each parameter as the function takes
it, so that a call packs no tuple or dict and the wrapper reads the group, the tensor
and the reduce op by name."""

from __future__ import annotations

import inspect


def passing(signature: inspect.Signature) -> tuple[list[str], list[str], dict[str, object]]:
    """A wrapper's parameter list, its call's argument list and its defaults (the name each
    takes in the wrapper's text -> the function's default), for a function of
    ``signature``: each parameter as the function takes it."""
    parameters: list[str] = []
    arguments: list[str] = []
    defaults: dict[str, object] = {}
    kinds = inspect.Parameter
    for p in signature.parameters.values():
        if p.name.startswith("_"):
            raise ValueError(f"the ledger cannot wrap a parameter named {p.name!r}")
        text = p.name
        if p.default is not p.empty:
            defaults[f"_default_{p.name}"] = p.default
            text += f"=_default_{p.name}"
        if p.kind is kinds.VAR_POSITIONAL:
            parameters.append(f"*{p.name}")
            arguments.append(f"*{p.name}")
            continue
        if p.kind is kinds.VAR_KEYWORD:
            parameters.append(f"**{p.name}")
            arguments.append(f"**{p.name}")
            continue
        if p.kind is kinds.KEYWORD_ONLY:
            if not any(a.startswith("*") for a in parameters):
                parameters.append("*")
            arguments.append(f"{p.name}={p.name}")
        else:
            arguments.append(p.name)
        parameters.append(text)
        if p.kind is kinds.POSITIONAL_ONLY and _last_positional_only(signature, p):
            parameters.append("/")
    return parameters, arguments, defaults


def _last_positional_only(signature: inspect.Signature, parameter: inspect.Parameter) -> bool:
    kinds = [p.kind for p in signature.parameters.values()]
    at = list(signature.parameters.values()).index(parameter)
    return inspect.Parameter.POSITIONAL_ONLY not in kinds[at + 1 :]
