"""The package's one timer: what the speculative loop and the benchmark measure time with.

* :class:`Timer` accumulates wall time per named phase (``prefill``, ``decode``, ``draft``, ``verify``,
  ``accept``): on a GPU it synchronises before and after each phase, so GPU work is counted where it happens;
* :func:`time_once` / :func:`time_repeated` time one call: CUDA events (after a synchronize) on a GPU,
  ``time.perf_counter`` on a CPU;
* :func:`summarize`: medians and the interquartile range over repeats.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

import torch


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Accumulates wall time per phase; synchronises CUDA so GPU work is counted where it happens."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.totals: dict[str, float] = {}

    def __call__(self, name):
        return _Phase(self, name)


class _Phase:
    def __init__(self, timer, name):
        self.timer, self.name = timer, name

    def __enter__(self):
        if self.timer.cuda:
            torch.cuda.synchronize(self.timer.device)
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        if self.timer.cuda:
            torch.cuda.synchronize(self.timer.device)
        self.timer.totals[self.name] = self.timer.totals.get(self.name, 0.0) + time.perf_counter() - self.t0


def time_once(fn: Callable[[], object], device="cpu") -> float:
    """Seconds one call of ``fn`` takes: CUDA events on a GPU (after a synchronize), perf_counter on a CPU.

    On CUDA the events are recorded on ``device``'s current stream (inside ``torch.cuda.device(device)``): an event
    recorded on another GPU's stream than the one ``fn`` runs on would time nothing (``--device cuda:1`` read ~0 ms)."""
    dev = torch.device(device)
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            torch.cuda.synchronize(dev)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1000.0
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def time_repeated(fn: Callable[[], object], device="cpu", repeats: int = 10, warmup: int = 2) -> list[float]:
    """``warmup`` untimed calls, then ``repeats`` timed ones (seconds)."""
    for _ in range(warmup):
        fn()
    return [time_once(fn, device) for _ in range(repeats)]


def summarize(samples: Sequence[float]) -> dict:
    """Median, quartiles, IQR, mean, min, max and n of a list of timings (seconds or any unit)."""
    xs = sorted(float(x) for x in samples if x is not None and not math.isnan(float(x)))
    if not xs:
        return {"median": None, "q1": None, "q3": None, "iqr": None, "mean": None, "min": None, "max": None, "n": 0}
    if len(xs) == 1:
        q1 = q3 = xs[0]
    else:
        q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return {"median": statistics.median(xs), "q1": q1, "q3": q3, "iqr": q3 - q1, "mean": statistics.fmean(xs),
            "min": xs[0], "max": xs[-1], "n": len(xs)}
