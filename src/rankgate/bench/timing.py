"""Timing collectives the nccl-tests way: warm-up, a timed loop, repetitions, the median.

One repetition times ``iters`` back-to-back calls and divides: with device events
around the loop on GPUs (or around one replay of a CUDA graph holding ``iters``
captured calls), with ``perf_counter`` on the CPU. Every repetition starts after a
barrier so ranks start together; the reported time is the median of the
repetitions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True, kw_only=True)
class Timing:
    """Seconds per call: one figure per repetition, and their median."""

    per_call: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.per_call)


def time_eager(  # keyword-only knobs of one measurement, as nccl-tests' flags
    fn: Callable[[], object],
    *,
    device: torch.device,
    iters: int,
    warmup: int,
    reps: int,
    sync: Callable[[], None],
    reset: Callable[[], object] = lambda: None,
) -> Timing:
    """``fn`` called ``iters`` times per repetition; ``sync`` aligns ranks between them.

    ``reset`` runs before every repetition, untimed (say, refilling an in-place buffer).
    """
    for _ in range(warmup):
        fn()
    sync()
    out = []
    for _ in range(reps):
        reset()
        sync()
        if device.type == "cuda":
            stream = torch.cuda.current_stream(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            for _ in range(iters):
                fn()
            end.record(stream)
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3 / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                fn()
            out.append((time.perf_counter() - t0) / iters)
    return Timing(per_call=tuple(out))


def time_graph(  # the same knobs as time_eager
    fn: Callable[[], object],
    *,
    device: torch.device,
    iters: int,
    warmup: int,
    reps: int,
    sync: Callable[[], None],
    reset: Callable[[], object] = lambda: None,
) -> Timing:
    """``iters`` calls captured in one CUDA graph; each repetition times one replay."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    sync()
    graph.replay()  # first replay uploads the graph
    torch.cuda.synchronize(device)
    out = []
    stream = torch.cuda.current_stream(device)
    for _ in range(reps):
        reset()
        sync()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        graph.replay()
        end.record(stream)
        end.synchronize()
        out.append(start.elapsed_time(end) / 1e3 / iters)
    del graph
    return Timing(per_call=tuple(out))
