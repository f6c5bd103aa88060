"""pytest plugin: each test's CPU seconds from the cgroup the run sits in (serial runs only)."""
import json
import os
import time

import pytest

CG = os.environ["CGCPU_GROUP"]
OUT = os.environ["CGCPU_OUT"]
rows = []

def _usage():
    with open(f"{CG}/cpuacct.usage") as f:
        return int(f.read()) / 1e9

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    c0, t0 = _usage(), time.monotonic()
    yield
    rows.append({"test": item.nodeid, "cpu": _usage() - c0, "wall": time.monotonic() - t0})

def pytest_sessionfinish(session):
    with open(OUT, "w") as f:
        json.dump({"total_cpu": _usage(), "rows": rows}, f)
