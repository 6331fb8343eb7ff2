"""Speculation under load: the OpenAI-compatible vLLM server, with and without the P-EAGLE head, at several
numbers of concurrent requests.

Both servers run on 127.0.0.1 at once; the load alternates between them (plain, P-EAGLE, plain, ...) so the two
see the same machine. On a GPU they share it: each engine gets half of vLLM's usual memory share
(:func:`server_settings`), so the second one starts beside the first. A level sends ``requests`` chat completions through ``concurrency`` client threads, each
bounded in tokens and time; a request the server refuses (too long for the model, say) is recorded and the
level goes on. Per level: output tokens/s, per-request latency (median, p90), acceptance length from the
server's ``/metrics`` (the counters' difference over the level). Results are rewritten atomically after every
level, so an interrupted sweep leaves the levels it finished.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_figure, write_json, write_text
from ..errors import PeagleError
from .server import check_port_free  # noqa: F401 (serve-sweep checks both ports first)

CONFIGS = ("plain", "peagle")
RESULTS_JSON, RESULTS_CSV, PLOT = "serving_sweep.json", "serving_sweep.csv", "serving_sweep.png"


def server_settings(on_gpu: bool, servers: int = len(CONFIGS), dtype=None) -> dict:
    """Engine settings every server of the sweep gets: on a GPU, vLLM's memory share split between the servers
    (``gpu_memory_utilization`` 0.45 each for two: two engines asking 0.9 each cannot both start on one GPU); the
    dtype, when given, the same for both."""
    from .engine import VLLM_GPU_UTILIZATION

    kw = {} if dtype is None else {"dtype": dtype}
    if on_gpu:
        kw["gpu_memory_utilization"] = round(VLLM_GPU_UTILIZATION / servers, 3)
    return kw


def _percentile(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    i = min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))
    return xs[i]


def one_request(url: str, model: str, messages: list[dict], max_tokens: int, timeout_s: float) -> dict:
    """A chat completion; never raises: ``{ok, latency_s, tokens, error}``."""
    body = json.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0}).encode()
    req = urllib.request.Request(url + "/chat/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            out = json.loads(r.read().decode())
        return dict(ok=True, latency_s=time.perf_counter() - t0, tokens=int(out["usage"]["completion_tokens"]),
                    error=None)
    except urllib.error.HTTPError as e:  # refused by the server (e.g. longer than the model length)
        detail = e.read().decode(errors="replace")[:300]
        return dict(ok=False, latency_s=time.perf_counter() - t0, tokens=0, error=f"HTTP {e.code}: {detail}")
    except (urllib.error.URLError, TimeoutError, OSError, ValueError, KeyError) as e:
        return dict(ok=False, latency_s=time.perf_counter() - t0, tokens=0, error=f"{type(e).__name__}: {e}")


def run_level(url: str, model: str, prompts: list[list[dict]], concurrency: int, requests: int,
              max_tokens: int, timeout_s: float = 120.0) -> dict:
    """``requests`` completions through ``concurrency`` threads (prompts taken in turn); the level's figures."""
    if concurrency < 1 or requests < 1:
        raise PeagleError(f"concurrency and requests must be >= 1, got {concurrency} and {requests}.")
    lock, results = threading.Lock(), []

    def work(i):
        r = one_request(url, model, prompts[i % len(prompts)], max_tokens, timeout_s)
        with lock:
            results.append(r)

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(work, range(requests)))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["ok"]]
    lat = [r["latency_s"] for r in ok]
    tokens = sum(r["tokens"] for r in ok)
    return dict(concurrency=concurrency, requests=requests, ok=len(ok), refused=len(results) - len(ok),
                errors=sorted({r["error"][:120] for r in results if not r["ok"]}), output_tokens=tokens,
                wall_s=round(wall, 3), tokens_per_s=round(tokens / wall, 2) if wall else None,
                latency_median_s=round(statistics.median(lat), 3) if lat else None,
                latency_p90_s=round(_percentile(lat, 0.9), 3) if lat else None)


def speedups(rows: list[dict]) -> list[dict]:
    """P-EAGLE over plain at each concurrency: throughput ratio and median-latency ratio (repeats pooled)."""
    out = []
    for c in sorted({r["concurrency"] for r in rows}):
        def pooled(cfg, key):
            vals = [r[key] for r in rows if r["concurrency"] == c and r["config"] == cfg and r[key] is not None]
            return round(statistics.median(vals), 3) if vals else None  # median of 2 repeats: a mean, rounded

        tp, tq = pooled("plain", "tokens_per_s"), pooled("peagle", "tokens_per_s")
        lp, lq = pooled("plain", "latency_median_s"), pooled("peagle", "latency_median_s")
        al = [r["acceptance_length"] for r in rows if r["concurrency"] == c and r["config"] == "peagle"
              and r.get("acceptance_length")]
        out.append(dict(concurrency=c, plain_tokens_per_s=tp, peagle_tokens_per_s=tq,
                        throughput_speedup=round(tq / tp, 3) if tp and tq else None,
                        latency_speedup=round(lp / lq, 3) if lp and lq else None,
                        acceptance_length=round(statistics.median(al), 3) if al else None))
    return out


def write_results(out_dir, meta: dict, rows: list[dict]) -> dict:
    """JSON (meta, rows, speed-ups) and CSV, atomically."""
    out_dir = Path(out_dir)
    doc = dict(meta=meta, rows=rows, speedups=speedups(rows))
    write_json(out_dir / RESULTS_JSON, doc, indent=1)
    cols = ["config", "repeat", "concurrency", "requests", "ok", "refused", "output_tokens", "wall_s",
            "tokens_per_s", "latency_median_s", "latency_p90_s", "acceptance_length"]
    lines = [",".join(cols)] + [",".join("" if r.get(c) is None else str(r.get(c)) for c in cols) for r in rows]
    write_text(out_dir / RESULTS_CSV, "\n".join(lines) + "\n")
    return doc


@dataclass(frozen=True)
class Load:
    """The load a sweep puts on each server: the concurrencies, ``requests_per_level`` (default ``max(2 * c, 8)``),
    each request's ``max_tokens`` and ``timeout_s``, and how many times the whole plan runs (``repeats``)."""

    concurrencies: tuple[int, ...] = (1, 4, 16)
    requests_per_level: int | None = None
    max_tokens: int = 64
    repeats: int = 2
    timeout_s: float = 120.0


def sweep(servers: dict, prompts: list[list[dict]], out_dir, load: Load = Load(), meta: dict | None = None,
          progress: bool = True) -> dict:
    """Load every server in ``servers`` (``{"plain": Server, "peagle": Server}``) at each concurrency of ``load``,
    the configurations alternating, ``load.repeats`` times."""
    from tqdm.auto import tqdm

    rows: list[dict] = []
    meta = dict(meta or {}, concurrencies=list(load.concurrencies), max_tokens=load.max_tokens, repeats=load.repeats,
                prompts=len(prompts), complete=False)
    plan = [(rep, c, name) for rep in range(load.repeats) for c in load.concurrencies for name in servers]
    for rep, c, name in tqdm(plan, desc="serving sweep", disable=not progress):
        server = servers[name]
        n = load.requests_per_level or max(2 * c, 8)
        before = server.metrics() if name != "plain" else None
        row = run_level(server.url, server.model, prompts, c, n, load.max_tokens, load.timeout_s)
        if before is not None:
            after = server.metrics()
            drafts = after["drafts"] - before["drafts"]
            row["acceptance_length"] = round(1 + (after["accepted"] - before["accepted"]) / drafts, 4) if drafts \
                else None
        rows.append(dict(config=name, repeat=rep, **row))
        write_results(out_dir, meta, rows)  # after every level: an interruption keeps what was measured
    meta["complete"] = True
    return write_results(out_dir, meta, rows)


def plot_sweep(doc: dict, path=None):
    import matplotlib.pyplot as plt

    sp = doc["speedups"]
    cs = [s["concurrency"] for s in sp]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9.6, 3.4))
    a.plot(cs, [s["plain_tokens_per_s"] for s in sp], "o-", label="plain")
    a.plot(cs, [s["peagle_tokens_per_s"] for s in sp], "o-", label="P-EAGLE")
    b.axhline(1.0, color="grey", lw=1)
    b.plot(cs, [s["throughput_speedup"] for s in sp], "o-", label="throughput: P-EAGLE's / plain's")
    b.plot(cs, [s["latency_speedup"] for s in sp], "s--", label="median latency: plain's / P-EAGLE's")
    for ax, ylabel in ((a, "output tokens/s"), (b, "ratio (above 1: P-EAGLE pays)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent requests")
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
    host = (doc.get("meta") or {}).get("host", "")
    fig.suptitle(f"vLLM server, concurrent requests ({host})")
    fig.tight_layout()
    if path is not None:
        write_figure(path, fig)
    return fig
