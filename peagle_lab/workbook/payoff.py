"""Reading an end-to-end bench result: each family's best row, the per-prompt gaps between two rows and the paired
rule that reads them (a two-sided sign test, written out by hand in 05), the interval a rate from few rounds
carries, and which committed results folder a host reads."""

from __future__ import annotations

import math

from ..bench.files import result_suites

ALPHA = 0.05  # the paired rule's level: an order is shown when a fair coin splits the prompts so unevenly less often
ABOUT_EVEN = 0.05  # one timed run each way: a few percent is timing noise, so within 5% of 1x reads as about even


def best(e2e: dict, family: str) -> dict | None:
    """The row of ``family`` with the highest end-to-end speed-up, or None."""
    rows = [m for m in e2e.get("methods", []) if m["family"] == family and m.get("speedup") is not None]
    return max(rows, key=lambda m: m["speedup"]) if rows else None


def round_steps(method: dict) -> float | None:
    """A bench row's round in decode steps: its median drafting plus verification per round over one plain decode
    step; ideal speed-up = AL / round. None where the row kept no round timings."""
    if not method.get("t_draft_round_ms") or not method.get("t_step_ms"):
        return None
    return (method["t_draft_round_ms"] + method["t_verify_round_ms"]) / method["t_step_ms"]


def paired_gaps(e2e: dict, a: dict | None = None, b: dict | None = None) -> list[float]:
    """Per prompt (and repeat): row ``a``'s speed-up minus row ``b``'s on that prompt; by default P-EAGLE minus
    EAGLE-3, each head at its best K (empty where a row or the per-prompt runs are missing)."""
    if a is None and b is None:
        a, b = best(e2e, "p-eagle"), best(e2e, "eagle3")
    if not (a and b):
        return []
    per: dict = {}
    for run in e2e.get("runs", []):
        if run["method"] in (a["method"], b["method"]) and run.get("speedup_vs_plain") is not None:
            per.setdefault((run.get("repeat", 0), run["prompt"]), {})[run["method"]] = run["speedup_vs_plain"]
    return [v[a["method"]] - v[b["method"]] for v in per.values() if len(v) == 2]


def sign_test(wins: int, n: int) -> float:
    """Two-sided exact sign test: the chance that ``n`` fair coin flips split at least as unevenly as ``wins`` to
    ``n - wins`` (prompts where two methods tie are left out of ``n`` before calling)."""
    if not 0 <= wins <= n:
        raise ValueError(f"sign test: {wins} wins out of {n} prompts. Fix: count wins among the n prompts compared")
    if n == 0:
        return 1.0
    k = max(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n)


def rate_interval(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% (Wilson score) interval of a rate ``hits / n``: 1 of 2 spans 0.09-0.91, 15 of 45 0.21-0.48, so a
    rate from few rounds is drawn as the guess it is. ``n = 0`` gives the whole range."""
    if not 0 <= hits <= n:
        raise ValueError(f"rate interval: {hits} hits out of {n}. Fix: count hits among the n tries")
    if n == 0:
        return 0.0, 1.0
    p, z2 = hits / n, z * z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return (0.0 if hits == 0 else max(0.0, centre - half)), (1.0 if hits == n else min(1.0, centre + half))


def oracle_pair(e2e: dict) -> tuple[dict | None, dict | None]:
    """The best one-pass oracle row and the K-pass oracle row at its K (None where the run has none)."""
    o = best(e2e, "oracle")
    return o, next((m for m in e2e.get("methods", []) if o and m["family"] == "oracle-sequential"
                    and m["k"] == o["k"]), None)


def verdict_word(wins: int, n: int) -> str:
    """The paired rule's verdict alone: ``shown faster``, ``shown slower`` or ``not shown``."""
    if sign_test(wins, n) >= ALPHA:
        return "not shown"
    return "shown faster" if wins > n - wins else "shown slower"


def paired_verdict(wins: int, n: int) -> str:
    """The paired rule in words: ``wins`` of ``n`` prompts, the sign test's p, and :func:`verdict_word`
    (``not shown`` read as ``not shown either way``)."""
    word = verdict_word(wins, n)
    return (f"faster on {wins} of {n} prompts, sign test p = {sign_test(wins, n):.2g}: "
            + ("not shown either way" if word == "not shown" else word))


def paired_order(gaps: list[float], a_name: str, b_name: str) -> str:
    """The paired rule over per-prompt gaps (``a`` minus ``b``; a tie tells neither way, so it leaves ``n``): how
    many prompts ``a`` won, the sign test's p, and which of the two is shown faster, if either."""
    wins, n = sum(g > 0 for g in gaps), sum(g != 0 for g in gaps)
    verdict = {"shown faster": f"{a_name} shown faster", "shown slower": f"{b_name} shown faster"}.get(
        verdict_word(wins, n), "neither shown faster")
    return f"{a_name} faster on {wins} of {n} prompts, sign test p = {sign_test(wins, n):.2g}: {verdict}"


def host_run(committed: list[dict], host: str, dtype: str) -> dict:
    """The committed results folder to read for ``host``: its own (the nearest host's where it has none), in
    ``dtype`` where it has one, newest first."""
    with_suites = [c for c in committed if result_suites(c["results"])]
    mine = [c for c in with_suites if c["host"] == host] or with_suites
    newest = lambda c: max(e["env"].get("timestamp_utc", "") for e in result_suites(c["results"]).values())
    return max(mine, key=lambda c: (c["dtype"] == dtype, newest(c)))


def one_run_verdict(speedup: float) -> str:
    """A speed-up from one timed run each way, in words: ``faster``, ``slower``, or ``about even`` within
    :data:`ABOUT_EVEN` of 1x (one run each cannot tell a few percent from timing noise)."""
    if abs(speedup - 1) <= ABOUT_EVEN:
        return f"about even (one run each: within {ABOUT_EVEN:.0%} of 1x is timing noise)"
    return "faster" if speedup > 1 else "slower"
