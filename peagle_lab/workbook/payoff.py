"""The payoff of one end-to-end bench result, in sentences computed from it: each head's best speed-up with its
per-prompt spread, the noise band (how far transformers' own greedy ``generate``, the same work as the baseline,
lands from 1), the verdict between the heads against that band, each head's best K, and what the oracle (the
paper's acceptance, replayed on this machine's round costs) would pay."""

from __future__ import annotations

from statistics import median

from ..bench.files import result_suites
from ..bench.oracle import budget_acceptance_length, constant_rate_acceptance_length, oracle_rates

NAMES = {"p-eagle": "P-EAGLE", "eagle3": "EAGLE-3"}


def best(e2e: dict, family: str) -> dict | None:
    """The row of ``family`` with the highest end-to-end speed-up, or None."""
    rows = [m for m in e2e.get("methods", []) if m["family"] == family and m.get("speedup") is not None]
    return max(rows, key=lambda m: m["speedup"]) if rows else None


def noise_band(e2e: dict) -> float | None:
    """|1 - speed-up of hf-greedy|: the baseline's timing moving on its own (None where hf-greedy did not run)."""
    hf = best(e2e, "hf-greedy")
    return abs(1 - hf["speedup"]) if hf else None


def _band_word(gap: float, band: float | None) -> str:
    if band is None:
        return "no noise yardstick in this run"
    return f"{'outside' if abs(gap) > band else 'inside'} the noise band {band:.3f}"


def head_lines(e2e: dict) -> list[str]:
    """Per head: its best speed-up, K, acceptance length and per-prompt IQR, against the noise band."""
    band = noise_band(e2e)
    lines = []
    for family, name in NAMES.items():
        m = best(e2e, family)
        if m:
            lines.append(f"{name} best at K={m['k']}: {m['speedup']:.2f}x (IQR over prompts {m['speedup_iqr']:.2f}, "
                         f"acceptance length {m['acceptance_length']:.2f}); {m['speedup'] - 1:+.3f} from 1, "
                         + _band_word(m["speedup"] - 1, band))
    return lines


def order(e2e: dict) -> str:
    """The one rule for which head is faster, each at its best K: with per-prompt runs, a head is faster only when
    it is faster on every prompt (the paired gaps keep one sign); without them, only when the gap between the best
    speed-ups lies outside the noise band."""
    gaps = paired_gaps(e2e)
    if gaps:
        lo, hi = min(gaps), max(gaps)
    else:
        p, s, band = best(e2e, "p-eagle"), best(e2e, "eagle3"), noise_band(e2e)
        if not (p and s):
            return "one of the two heads did not run"
        gap = p["speedup"] - s["speedup"]
        lo = hi = gap if band is not None and abs(gap) > band else 0.0
    if lo > 0:
        return "P-EAGLE faster" + (" on every prompt" if gaps else "")
    if hi < 0:
        return "EAGLE-3 faster" + (" on every prompt" if gaps else "")
    return ("the order changes from prompt to prompt, so neither head is shown faster" if gaps else
            "neither head is shown faster")


def verdict(e2e: dict) -> str:
    """The gap between the heads' best speed-ups, against the noise band, and the order :func:`order` decides."""
    p, s = best(e2e, "p-eagle"), best(e2e, "eagle3")
    if not (p and s):
        return "one of the two heads did not run"
    gap = p["speedup"] - s["speedup"]
    return (f"best speed-ups, P-EAGLE (K={p['k']}) minus EAGLE-3 (K={s['k']}): {gap:+.3f}x, "
            + _band_word(gap, noise_band(e2e)) + f"; which head is faster: {order(e2e)}"
            + ("" if p["k"] != 1 else "; at K=1 parallel and sequential drafting are one and the same drafter pass, "
                                      "so that row does not test parallel drafting"))


def oracle_line(e2e: dict) -> str | None:
    """What a head with the paper's acceptance would pay on this machine's round costs, where the run has it."""
    o = best(e2e, "oracle")
    if not o:
        return None
    cfg = e2e.get("config") or {}
    rate = oracle_rates("paper", cfg.get("suite") or "code")[0][0]
    n, k = cfg.get("max_new_tokens"), o["k"]
    cut = (f"; its per-slot rate targets {constant_rate_acceptance_length(rate, k):.2f}, which answers of {n} new "
           f"tokens cut to {budget_acceptance_length(rate, k, n):.2f} (the last round drafts what the budget leaves); "
           f"the remaining difference is the spread of {o.get('rounds')} rounds and answers ending early" if n else "")
    return (f"oracle (the paper's acceptance replayed, K={o['k']}): acceptance length {o['acceptance_length']:.2f}, "
            f"speed-up {o['speedup']:.2f}x" + cut)


def same_acceptance_pair(e2e: dict) -> tuple[dict, dict] | None:
    """``(parallel-charged, sequential-charged)`` oracle rows at the parallel one's best K, where the run has both:
    the same draws, so the same acceptance, charged one parallel pass or K sequential passes per round."""
    o = best(e2e, "oracle")
    s = next((m for m in e2e.get("methods", []) if m["family"] == "oracle-sequential" and o and m["k"] == o["k"]),
             None)
    return (o, s) if o and s and s.get("speedup") is not None else None


def claim_line(e2e: dict) -> str | None:
    """P-EAGLE's claim on this machine: at the paper's acceptance, what one parallel drafter pass per round pays
    against K sequential passes (same draws, same rounds), where the run has both charges."""
    pair = same_acceptance_pair(e2e)
    if not pair:
        return None
    o, s = pair
    gain = o["speedup"] / s["speedup"] - 1
    gaps = paired_gaps(e2e, o, s)
    wins = sum(g > 0 for g in gaps)
    s_best = best(e2e, "oracle-sequential")
    own = (f"; sequential drafting at its own best K={s_best['k']}: {s_best['speedup']:.2f}x" if s_best["k"] != o["k"]
           else "")
    return (f"same acceptance ({o['acceptance_length']:.2f} over {o.get('rounds')} rounds, K={o['k']}), two drafting "
            f"costs: one parallel pass per round {o['speedup']:.2f}x, {o['k']} sequential passes {s['speedup']:.2f}x: "
            f"parallel drafting is {abs(gain):.0%} {'faster' if gain > 0 else 'slower'} end to end"
            + (f", faster on {wins} of {len(gaps)} prompt runs" if gaps else "") + own)


def lookup_line(e2e: dict) -> str | None:
    """Prompt lookup (no trained drafter) against the better head, where the run has it."""
    pl = best(e2e, "prompt-lookup")
    heads = [m for m in (best(e2e, f) for f in NAMES) if m]
    if not (pl and heads):
        return None
    top = max(heads, key=lambda m: m["speedup"])
    word = "beats" if pl["speedup"] > top["speedup"] else "does not beat"
    return (f"prompt lookup (no training, K={pl['k']}): {pl['speedup']:.2f}x, acceptance length "
            f"{pl['acceptance_length']:.2f}; it {word} the better head ({top['speedup']:.2f}x)")


def slot_counts(e2e: dict, method: str) -> list[tuple[int, int]]:
    """Per slot j (from 1): ``(accepted, reached)`` rounds summed over the method's runs, the sample behind each
    conditional rate (empty where the runs do not record them)."""
    counts: list[list[int]] = []
    for run in e2e.get("runs", []):
        if run["method"] != method:
            continue
        stats = run.get("stats") or {}
        for j, (a, n) in enumerate(zip(stats.get("accepted_at", []), stats.get("attempted_at", []))):
            counts += [[0, 0]] * (j + 1 - len(counts))
            counts[j] = [counts[j][0] + a, counts[j][1] + n]
    return [(a, n) for a, n in counts]


def slots_text(e2e: dict, method: str) -> str:
    """``accepted/reached`` per slot, e.g. ``60/120 12/60 0/12``."""
    return " ".join(f"{a}/{n}" for a, n in slot_counts(e2e, method)) or "not recorded"


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


def paired_line(e2e: dict) -> str | None:
    """The heads' order prompt by prompt: the range of the paired gaps, and whether it keeps one sign."""
    gaps = paired_gaps(e2e)
    if not gaps:
        return None
    lo, hi, mid = min(gaps), max(gaps), median(gaps)
    return (f"paired per prompt (P-EAGLE minus EAGLE-3, each at its best K, {len(gaps)} prompt(s)): "
            f"{lo:+.3f}x to {hi:+.3f}x (median {mid:+.3f}x): {order(e2e)}")


def paper_round_pay(dc: dict, k: int = 7, suite: str = "code") -> dict | None:
    """What the paper's acceptance would pay on a drafting-cost run's round costs at K=k: its acceptance length
    (the blog's figure as a constant per-slot rate, :mod:`peagle_lab.bench.oracle`), a P-EAGLE round (one drafter
    pass + verifying K+1 tokens) in decode steps, and the ideal speed-up, their ratio (no loop overhead)."""
    row = next((r for r in dc.get("rows", []) if r["k"] == k), None)
    if row is None or not dc.get("target_step_ms"):
        return None
    rates, source = oracle_rates("paper", suite)
    al = constant_rate_acceptance_length(rates[0], k)
    steps = (row["parallel_ms"] + row["verify_ms"]) / dc["target_step_ms"]
    return {"k": k, "acceptance_length": al, "round_steps": steps, "ideal_speedup": al / steps, "source": source}


def lines(e2e: dict) -> list[str]:
    """Everything above, one sentence a line."""
    out = head_lines(e2e) + [verdict(e2e)]
    return out + [x for x in [paired_line(e2e), lookup_line(e2e), oracle_line(e2e), claim_line(e2e)] if x]


def host_run(committed: list[dict], host: str, dtype: str) -> dict:
    """The committed results folder to read for ``host``: its own (the nearest host's where it has none), in
    ``dtype`` where it has one, newest first."""
    with_suites = [c for c in committed if result_suites(c["results"])]
    mine = [c for c in with_suites if c["host"] == host] or with_suites
    newest = lambda c: max(e["env"].get("timestamp_utc", "") for e in result_suites(c["results"]).values())
    return max(mine, key=lambda c: (c["dtype"] == dtype, newest(c)))


def _cost_line(dc: dict) -> str:
    rows = dc["rows"]
    lo, hi = rows[0], rows[-1]
    seq_growth = hi["sequential_ms"] / lo["sequential_ms"]
    par_growth = hi["parallel_ms"] / lo["parallel_ms"]
    return (f"**Drafting cost** (K={lo['k']} to {hi['k']}): a parallel round {lo['parallel_ms']:.1f} ms at K={lo['k']}, "
            f"{hi['parallel_ms']:.1f} ms at K={hi['k']} ({par_growth:.2f}x: one drafter pass with more rows); a "
            f"sequential round {lo['sequential_ms']:.1f} to {hi['sequential_ms']:.1f} ms ({seq_growth:.1f}x: one pass "
            f"per draft), {hi['ratio_seq_over_par']:.1f}x the parallel round at K={hi['k']}.")


def _head_line(e2e: dict, family: str) -> str | None:
    m = best(e2e, family)
    if not m:
        return None
    same = " (at K=1 parallel and sequential drafting are the same single pass)" if m["k"] == 1 else ""
    return (f"**{NAMES[family]}** best at K={m['k']}{same}: {m['speedup']:.2f}x (per-prompt IQR "
            f"{m['speedup_iqr']:.2f}), acceptance length {m['acceptance_length']:.2f}; rounds accepted/reached per "
            f"slot 1..K: {slots_text(e2e, m['method'])}.")


def box(e2e: dict, dc: dict | None, where: str, oracle: tuple[str, dict] | None = None) -> str:
    """The payoff in one boxed paragraph (a markdown blockquote), every figure read from the results given: the
    drafting cost against K, each head's best row with its per-slot round counts, the speed verdict, the heads'
    order prompt by prompt, what the paper's acceptance would pay (on these round costs, and replayed through
    the loop where ``oracle = (where, e2e)`` holds an oracle row), and, where ``e2e`` replayed it with both drafting
    costs, :func:`claim_line`."""
    heads = [m for m in (best(e2e, f) for f in NAMES) if m]
    band = noise_band(e2e)
    speed = ("every head's best speed-up is below 1x: with these heads speculation loses to plain decoding here"
             if heads and max(m["speedup"] for m in heads) < 1 else
             f"the better head reaches {max((m['speedup'] for m in heads), default=0):.2f}x")
    dc = dc or {"rows": []}  # a run without its drafting-cost part: no cost line, no paper line
    out = [f"**What this machine shows, and what it cannot** ({where})"] + ([_cost_line(dc)] if dc["rows"] else [])
    out += [x for x in (_head_line(e2e, f) for f in NAMES) if x]
    out.append(f"**Speed**: {speed}" + (f" (noise band, hf-greedy's distance from 1: {band:.3f})." if band is not None
                                        else "."))
    out.append(f"**Which head is faster**: {paired_line(e2e) or verdict(e2e)}.")
    pay = dc["rows"] and paper_round_pay(dc, 7 if any(r["k"] == 7 for r in dc["rows"]) else dc["rows"][-1]["k"],
                                         (e2e.get("config") or {}).get("suite") or "code")
    if pay:
        out.append(f"**The paper's acceptance** (acceptance length {pay['acceptance_length']:.2f} at K={pay['k']}: "
                   f"{pay['source']}) on this run's round costs ({pay['round_steps']:.2f} decode steps per P-EAGLE "
                   f"round) would pay {pay['ideal_speedup']:.2f}x at best (no loop overhead)"
                   + (f"; replayed through the loop on {oracle[0]}, at that run's own round costs: "
                      f"{oracle_line(oracle[1])}." if oracle and
                      oracle_line(oracle[1]) else "."))
    claim = claim_line(e2e)
    if claim:
        out.append(f"**P-EAGLE's claim at equal acceptance** (the paper's acceptance replayed on the same draws): "
                   f"{claim}.")
    return "\n>\n".join("> " + x for x in out)
