"""Per-test timestamps (time.perf_counter: CLOCK_MONOTONIC, one clock for every process)
in the controller and in each rank of a world(2) pool, for stamps_report.py.

Controller (a conftest calls ``controller_install``): when ``Pool._send`` starts and ends,
when ``Pool._await_outcomes`` starts and ends. Ranks (``rankgate_worker_setup =
stamps:rank_setup``): when a message is decoded, when the body starts and ends (the
test calls ``mark``), when its result is encoded. Written as JSON at the session's end.
"""

import json
import os
import time
from collections import defaultdict

S = defaultdict(list)
OUT = os.environ.get("STAMPS_DIR", ".")


def mark(event):
    S[event].append(time.perf_counter())


def rank_setup(rank):
    from rankgate.harness.pool import messages, worker

    decode, encode = messages.decode_for_rank, messages.encode

    def timed_decode(data):
        mark("recv")
        return decode(data)

    def timed_encode(name, **kwargs):
        if name == messages.RESULT:
            mark("result")
        return encode(name, **kwargs)

    messages.decode_for_rank, messages.encode = timed_decode, timed_encode
    serve = worker._serve

    def serve_then_dump(*args):
        try:
            return serve(*args)
        finally:
            with open(os.path.join(OUT, f"stamps_rank{rank}.json"), "w") as f:
                json.dump(S, f)

    worker._serve = serve_then_dump


def controller_install():
    from rankgate.harness.pool import pool

    send, wait = pool.Pool._send, pool.Pool._await_outcomes

    def timed_send(self, *args):
        mark("send_start")
        try:
            return send(self, *args)
        finally:
            mark("send_end")

    def timed_wait(self, *args):
        mark("await_start")
        try:
            return wait(self, *args)
        finally:
            mark("await_end")

    pool.Pool._send, pool.Pool._await_outcomes = timed_send, timed_wait


def dump():
    with open(os.path.join(OUT, "stamps_ctrl.json"), "w") as f:
        json.dump(S, f)
