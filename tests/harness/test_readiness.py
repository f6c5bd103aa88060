"""readiness: the ranks' pipes and sentinels waited on through one poll object, each
ready object given back as itself, as multiprocessing.connection.wait does."""

from __future__ import annotations

import multiprocessing

import pytest

from rankgate.harness.pool.readiness import Readiness

pytestmark = pytest.mark.unit


def test_a_pipe_with_data_and_a_closed_pipe_are_ready_an_idle_one_is_not():
    idle_reader, idle_writer = multiprocessing.Pipe(duplex=False)
    data_reader, data_writer = multiprocessing.Pipe(duplex=False)
    closed_reader, closed_writer = multiprocessing.Pipe(duplex=False)
    waiting = Readiness([idle_reader, data_reader, closed_reader])
    assert waiting.wait(0) == set()
    data_writer.send_bytes(b"result")
    closed_writer.close()
    assert waiting.wait(0) == {data_reader, closed_reader}
    assert waiting.wait(None) == {data_reader, closed_reader}  # None: no time limit
    waiting.remove(data_reader)
    waiting.remove(closed_reader)
    assert waiting.wait(0.01) == set()
    for conn in (idle_reader, idle_writer, data_reader, data_writer, closed_reader):
        conn.close()


def test_a_sentinel_is_ready_once_its_process_ends():
    process = multiprocessing.get_context("fork").Process(target=int)
    process.start()
    waiting = Readiness([process.sentinel])
    assert waiting.wait(10) == {process.sentinel}
    process.join()
