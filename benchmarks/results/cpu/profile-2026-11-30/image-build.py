"""Build the cpu-local image with no layer cache (the base kept), timed, in the cwd's checkout.

    python image-build.py LABEL
"""

import dataclasses
import json
import sys
import time
from pathlib import Path

from rankgate.pipeline import container as c


def busy() -> float:
    fields = Path("/proc/stat").read_text().split()[1:9]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields)
    return (user + nice + system + irq + softirq + steal) / 100  # clock ticks: 100 a second


variant = dataclasses.replace(c.load_matrix()["cpu-local"], local_base="")
busy0, start = busy(), time.monotonic()
c.build(variant, engine="podman", fresh=True)
result = {"label": sys.argv[1], "wall_s": round(time.monotonic() - start, 1)}
result["machine_busy_cpu_s"] = round(busy() - busy0, 1)
print(json.dumps(result))
