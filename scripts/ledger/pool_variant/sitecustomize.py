"""Loaded by every Python process started with this folder on PYTHONPATH (the pool's
ranks included, through the fork server), to tell apart what the ledger's cost on NCCL
comes from (scripts/gpu/ledger-ab.sh, LEDGER_AB_VARIANTS; scripts/gpu/two-gpus.sh, step
ledger-pool). Each variant needs RANKGATE_LEDGER=1 (unset works too); with 0 nothing is
installed whatever the variant. benchmarks/results/cpu/ledger-shift-analysis-2026-11-28.md
says which candidate each one isolates; scripts/ledger/check_variant.py shows what one
installed (tests/bench/test_ledger_pool_variants.py checks each on gloo).

- passthrough: torch.distributed's functions are replaced by wrappers that only forward
  the call; ProcessGroup's methods get the ledger's own (they record a test's direct
  ``pg.allreduce``; torch's calls from inside ``dist.*`` pass on after a frame lookup);
  the digest is sent (empty).
- dist-only: the ledger records as usual, but only the names in torch.distributed are
  replaced; torch.distributed.distributed_c10d keeps its own.
- functions-only: the ledger records as usual through torch.distributed's functions;
  ProcessGroup's methods stay torch's own (a test's ``pg.allreduce`` goes unrecorded).
- forward-only: every function and ProcessGroup method the ledger replaces is replaced by
  a wrapper that only forwards; nothing recorded, no digest sent (None): the replacement
  alone.
- no-work: the ledger records as usual but keeps no Work: an async call's entry reads
  "completed" once the call returns (the ledger's own wrappers with that one line
  changed, compiled as the ledger's file).
- no-digest: the ledger records as usual; no digest is computed, sent or compared.
- nothing: nothing is installed (the ledger module imported, as it always is): with
  RANKGATE_LEDGER=1 this is "off" under the on setting's environment, an A/A control
  for the spread between runs.
"""

import os
import sys

_VARIANT = os.environ.get("LEDGER_VARIANT")
VARIANTS = (
    "passthrough",
    "dist-only",
    "functions-only",
    "forward-only",
    "no-work",
    "no-digest",
    "nothing",
)


def _forwarding_wrap(name, original, signature=None):
    def collective(*args, **kwargs):
        return original(*args, **kwargs)

    collective.__name__ = collective.__qualname__ = name
    collective.__wrapped__ = original
    collective.__rankgate_ledger__ = True
    return collective


def _forwarding_method(op, original):
    def method(self, *args, **kwargs):
        return original(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = op
    method.__wrapped__ = original
    method.__rankgate_ledger__ = True
    return method


def _without_work(ledger, function_name: str):
    """The ledger's wrapper factory ``function_name`` with its line that keeps the call's
    result (a Work) as the entry's state changed to keep the word "completed" instead
    (``_wrap`` makes its wrappers from the text ``ledger._COLLECTIVE``: changed there)."""
    import inspect
    import textwrap

    if function_name == "_wrap":
        kept = "_entry[STATE] = COMPLETED if _result is None else _result"
        if kept not in ledger._COLLECTIVE:
            raise RuntimeError(f"LEDGER_VARIANT=no-work: ledger._COLLECTIVE no longer has {kept!r}")
        ledger._COLLECTIVE = ledger._COLLECTIVE.replace(kept, "_entry[STATE] = COMPLETED")
        return ledger._wrap
    source = textwrap.dedent(inspect.getsource(getattr(ledger, function_name)))
    kept = "entry[STATE] = COMPLETED if result is None else result"
    if kept not in source:
        raise RuntimeError(
            f"LEDGER_VARIANT=no-work: {ledger.__name__}.{function_name} no longer has {kept!r}"
        )
    source = source.replace(kept, "entry[STATE] = COMPLETED")
    scope = {}
    exec(compile(source, ledger.__file__, "exec"), ledger.__dict__, scope)
    return scope[function_name]


def _install_then(after):
    from rankgate.harness import ledger

    install = ledger.install

    def install_then(backend: str = "") -> bool:
        done = install(backend)
        if done:
            after(ledger)
        return done

    ledger.install = install_then


def _put_torch_methods_back(ledger) -> None:
    import torch.distributed as dist

    for name, (original, wrapper) in ledger._method_swaps.items():
        if dist.ProcessGroup.__dict__.get(name) is wrapper:
            setattr(dist.ProcessGroup, name, original)


def _put_torch_functions_back_in_c10d(ledger) -> None:
    import torch.distributed.distributed_c10d as c10d

    for name in ledger.COLLECTIVES + ledger.POINT_TO_POINT:
        wrapped = getattr(c10d, name, None)
        if getattr(wrapped, "__rankgate_ledger__", False):
            setattr(c10d, name, wrapped.__wrapped__)


def _apply(variant) -> None:
    if variant in (None, "", "none"):
        return
    if variant not in VARIANTS:
        # One line and a usage exit: an exception here stops the interpreter with a
        # "Fatal Python error" page.
        sys.stderr.write(
            f"LEDGER_VARIANT={variant!r}: use one of {', '.join(VARIANTS)} (or none)\n"
        )
        os._exit(2)
    from rankgate.harness import ledger

    if variant == "passthrough":
        ledger._wrap = _forwarding_wrap
    elif variant == "dist-only":
        _install_then(_put_torch_functions_back_in_c10d)
    elif variant == "functions-only":
        _install_then(_put_torch_methods_back)
    elif variant == "forward-only":
        ledger._wrap = _forwarding_wrap
        ledger._wrap_method = _forwarding_method
        ledger.digest = lambda: None
    elif variant == "no-work":
        ledger._wrap = _without_work(ledger, "_wrap")
        from rankgate.harness import ledger_methods  # _wrap_method's wrapper is made there

        ledger_methods.wrap_method = _without_work(ledger_methods, "wrap_method")
    elif variant == "no-digest":
        ledger.digest = lambda: None
    elif variant == "nothing":
        ledger.install = lambda backend="": False


_apply(_VARIANT)
