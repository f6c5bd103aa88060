"""Loaded by every Python process started with this folder on PYTHONPATH (the pool's
ranks included): with LEDGER_VARIANT=passthrough, the ledger wraps torch.distributed's
collectives as usual but its wrappers only forward the call, recording nothing. It tells
the cost of replacing torch's functions from the cost of recording (see
scripts/gpu/two-gpus.sh, step ledger-variants)."""

import os

if os.environ.get("LEDGER_VARIANT") == "passthrough":
    from rankgate.harness import ledger

    def _forwarding_wrap(name, original, parameters):
        def collective(*args, **kwargs):
            return original(*args, **kwargs)

        collective.__name__ = collective.__qualname__ = name
        collective.__wrapped__ = original
        collective.__rankgate_ledger__ = True
        return collective

    ledger._wrap = _forwarding_wrap
