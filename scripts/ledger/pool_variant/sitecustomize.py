"""Loaded by every Python process started with this folder on PYTHONPATH (the pool's
ranks included), to tell apart what the ledger's cost on NCCL comes from (see
scripts/gpu/two-gpus.sh, step ledger-pool):

- LEDGER_VARIANT=passthrough: the ledger wraps torch.distributed's collectives as usual,
  but its wrappers only forward the call, recording nothing;
- LEDGER_VARIANT=dist-only: the ledger records as usual, but only the names in
  torch.distributed are replaced; torch.distributed.distributed_c10d keeps its own.
"""

import os

_VARIANT = os.environ.get("LEDGER_VARIANT")

if _VARIANT == "passthrough":
    from rankgate.harness import ledger

    def _forwarding_wrap(name, original, parameters):
        def collective(*args, **kwargs):
            return original(*args, **kwargs)

        collective.__name__ = collective.__qualname__ = name
        collective.__wrapped__ = original
        collective.__rankgate_ledger__ = True
        return collective

    ledger._wrap = _forwarding_wrap

elif _VARIANT == "dist-only":
    from rankgate.harness import ledger

    _install = ledger.install

    def _install_on_dist_only(backend: str = "") -> bool:
        done = _install(backend)
        if done:
            import torch.distributed.distributed_c10d as c10d

            for name in ledger.COLLECTIVES + ledger.POINT_TO_POINT:
                wrapped = getattr(c10d, name, None)
                if getattr(wrapped, "__rankgate_ledger__", False):
                    setattr(c10d, name, wrapped.__wrapped__)
        return done

    ledger.install = _install_on_dist_only
