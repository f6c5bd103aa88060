"""The setup hook of every worker of a local Ray
(:func:`rankgate.workloads.trainer.strategies.ray.local_ray`).

It lives apart from the Ray strategy so that running it imports Ray alone: every Ray
worker runs it, Ray Train's controller and helper actors among them, and none of those
needs torch (importing the strategy costs a worker about 2.5 CPU-s more).
"""

from __future__ import annotations

import os


def pin_ray_address() -> None:
    """In each worker: RAY_ADDRESS is this instance, so Ray's own lookups (Train's state
    API calls) never find another instance on the machine and fail on "multiple active
    Ray instances" (two test runs side by side, or someone else's Ray)."""
    import ray

    os.environ["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
