"""Build the cpu-local image with no layer cache (the base kept), timed, in the cwd's checkout."""
import dataclasses, json, sys, time
from pathlib import Path
from rankgate.pipeline import container as c

def busy():
    f = Path("/proc/stat").read_text().split()[1:9]
    u, n, s, _i, _w, irq, sirq, st = map(int, f)
    return (u + n + s + irq + sirq + st) / 100

v = dataclasses.replace(c.load_matrix()["cpu-local"], local_base="")
b0, t0 = busy(), time.monotonic()
c.build(v, engine="podman", fresh=True)
print(json.dumps({"label": sys.argv[1], "wall_s": round(time.monotonic() - t0, 1), "machine_busy_cpu_s": round(busy() - b0, 1)}))
