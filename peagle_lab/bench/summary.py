"""The numbers a run boils down to: per-method rows and per-round time profiles (:func:`aggregate`), the
headline, one row per committed host and suite, and the inputs of the break-even picture (round cost in decode steps,
measured heads as points)."""

from __future__ import annotations

from ..decoding.divergence import is_lossless
from ..timer import summarize
from .lossless import run_divergence
from .methods import Method
from .record import rounded
from .suites import suite_of


def aggregate(methods: list[Method], runs: list[dict], regime: str):
    """Per-method summary rows and per-round time profiles, from the per-run rows of ONE run; ``lossless``: the
    verdict on each method's runs in ``regime`` (:func:`peagle_lab.decoding.divergence.is_lossless`)."""
    by = {m.name: [x for x in runs if x["method"] == m.name] for m in methods}
    plain = by["plain"]
    plain_tps = sum(x["new_tokens"] for x in plain) / sum(x["seconds"] for x in plain)
    t_step = summarize(_per_round(plain, "decode"))["median"]  # one plain decode step, same run
    plain_decode_tps = _decode_tps(plain)
    summary, profile = [], []
    for m in methods:
        rows = by[m.name]
        row = _method_row(m, rows, plain_tps, regime)
        stats = [x["stats"] for x in rows if x["stats"] and x["stats"].get("k")]
        if stats:  # our speculative loop: exact accounting from SpecStats' counts
            timing = {phase: summarize(_per_round(rows, phase))["median"] for phase in ("draft", "verify", "accept")}
            row |= _loop_columns(rows, stats, timing, t_step, plain_decode_tps)
            profile.append(_round_profile(m, rows, timing))
        else:
            row |= _other_columns(m, rows, t_step, plain_decode_tps)
        summary.append(row)
    hf = next((r for r in summary if r["family"] == "hf-greedy"), None)
    for row in summary:
        row["speedup_vs_hf_greedy"] = rounded(row["tokens_per_s"] / hf["tokens_per_s"], 4) if hf else None
    return summary, profile


def _per_round(rows: list[dict], phase: str) -> list[float]:
    """Seconds per round of ``phase`` (``draft``, ``verify``, ``accept``; ``decode``: per target forward after the
    prefill), one value per run that timed it."""
    out = []
    for x in rows:
        st = x["stats"] or {}
        t = (st.get("time_s") or {}).get(phase)
        n = x["rounds"] if phase != "decode" else max(x["target_forwards"] - 1, 0)
        if t is not None and n:
            out.append(t / n)
    return out


def _decode_tps(rows: list[dict]) -> float | None:
    """Tokens/s after the prefill (the first token comes from the prefill): the phase the ideal models."""
    pre = [(x["stats"] or {}).get("time_s", {}).get("prefill") for x in rows]
    if any(p is None for p in pre):
        return None
    secs = sum(x["seconds"] for x in rows) - sum(pre)
    return (sum(x["new_tokens"] for x in rows) - len(rows)) / secs if secs > 0 else None


def _method_row(m: Method, rows: list[dict], plain_tps: float, regime: str) -> dict:
    """A method's tokens, time, speed-ups against plain and lossless verdict (every method alike)."""
    toks = sum(x["new_tokens"] for x in rows)
    secs = sum(x["seconds"] for x in rows)
    tps = toks / secs
    sp = summarize([x["speedup_vs_plain"] for x in rows])
    return {"method": m.name, "family": m.family, "k": m.k, "runs": len(rows), "new_tokens": toks,
            "seconds": rounded(secs, 4), "tokens_per_s": rounded(tps, 3), "speedup": rounded(tps / plain_tps, 4),
            "speedup_median_per_prompt": rounded(sp["median"], 4), "speedup_iqr": rounded(sp["iqr"], 4),
            "decode_speedup": None,
            "lossless": is_lossless([run_divergence(x) for x in rows], regime),
            "identical_to_plain": all(x["identical_to_plain"] for x in rows)}


def _loop_columns(rows: list[dict], stats: list[dict], timing: dict, t_step, plain_decode_tps) -> dict:
    """Our loop's columns: acceptance length and per position, round times (``timing``: median seconds per round
    of each phase), decode and ideal speed-ups, efficiency."""
    rounds = sum(s["rounds"] for s in stats)
    k = stats[0]["k"]
    accepted = sum(s["accepted_total"] for s in stats)
    acc_at = [sum(s["accepted_at"][j] for s in stats) for j in range(k)]
    att_at = [sum(s["attempted_at"][j] for s in stats) for j in range(k)]
    al = 1.0 + accepted / max(rounds, 1)
    t_draft, t_verify = timing["draft"], timing["verify"]
    ideal = al * t_step / (t_draft + t_verify) if t_step and t_draft is not None and t_verify else None
    dtps = _decode_tps(rows)
    dsp = dtps / plain_decode_tps if dtps and plain_decode_tps else None
    return {"acceptance_length": rounded(al, 4),
            "per_position_acceptance": [rounded(a / t, 4) if t else None for a, t in zip(acc_at, att_at)],
            "per_position_attempts": att_at, "rounds": rounds,
            "t_step_ms": rounded(t_step * 1e3, 3) if t_step else None,
            "t_draft_round_ms": rounded(t_draft * 1e3, 3), "t_verify_round_ms": rounded(t_verify * 1e3, 3),
            "decode_speedup": rounded(dsp, 4), "ideal_speedup": rounded(ideal, 4),
            "efficiency": rounded(dsp / ideal, 4) if ideal and dsp else None}


def _round_profile(m: Method, rows: list[dict], timing: dict) -> dict:
    """Where a round of our loop goes (medians over prompts of per-run means per round): drafting, verification,
    acceptance and rollback, and the Python around them; their shares; the prefill."""
    over = []
    for x in rows:
        st = x["stats"]["time_s"]
        timed = sum(v for kk, v in st.items() if kk not in ("total", "prefill"))
        if x["rounds"]:
            over.append((x["seconds"] - st.get("prefill", 0.0) - timed) / x["rounds"])
    prof = {"method": m.name, "family": m.family, "k": m.k,
            "draft_ms": rounded(timing["draft"] * 1e3, 3), "verify_ms": rounded(timing["verify"] * 1e3, 3),
            "accept_rollback_ms": rounded(timing["accept"] * 1e3, 3),
            "python_overhead_ms": rounded(summarize(over)["median"] * 1e3, 3)}
    total = sum(v for kk, v in prof.items() if kk.endswith("_ms") and v is not None)
    prof["round_ms"] = rounded(total, 3)
    prof |= {f"{kk[:-3]}_share": rounded(prof[kk] / total, 4) for kk in
             ("draft_ms", "verify_ms", "accept_rollback_ms", "python_overhead_ms") if total}
    prof["prefill_ms_median"] = rounded(summarize([x["stats"]["time_s"].get("prefill") for x in rows])["median"]
                                        * 1e3, 3)
    return prof


def _other_columns(m: Method, rows: list[dict], t_step, plain_decode_tps) -> dict:
    """Plain greedy's and transformers' methods' columns: tokens per target forward after the prefill as their
    acceptance length (1 for plain), plain's decode step."""
    toks = sum(x["new_tokens"] for x in rows)
    rounds = [x["rounds"] for x in rows if x["rounds"]]
    if rounds and m.family != "plain":  # tokens per target forward after the prefill
        cols = {"acceptance_length": rounded((toks - len(rows)) / sum(rounds), 4), "per_position_acceptance": None,
                "per_position_attempts": None, "rounds": sum(rounds)}
    else:
        cols = {"acceptance_length": 1.0, "per_position_acceptance": None, "per_position_attempts": None,
                "rounds": sum(rounds) if rounds else None}
    if m.family == "plain":
        cols["t_step_ms"] = rounded(t_step * 1e3, 3) if t_step else None
        cols["decode_speedup"] = 1.0 if plain_decode_tps else None
    return cols


def verify_and_draft_ratio(dc: dict, k: int):
    """``(verify(K+1), parallel draft round)`` in units of one target decode step, from a drafting-cost result
    (computed from the medians where a result lacks the ratio columns); ``(None, None)`` without the data."""
    row = next((r for r in dc.get("rows", []) if r["k"] == k), None)
    step = dc.get("target_step_ms")
    if not row or not step or row.get("verify_ms") is None:
        return None, None
    vr = row.get("verify_ratio") or round(row["verify_ms"] / step, 3)
    dr = row.get("draft_ratio") or round(row["parallel_ms"] / step, 3)
    return vr, dr


def _best(e2e: dict, family: str):
    rows = [m for m in e2e.get("methods", []) if m["family"] == family and m.get("speedup") is not None]
    if not rows:
        return None
    m = max(rows, key=lambda r: r["speedup"])
    k = f"K={m['k']}, " if m.get("k") else ""
    return f"{m['speedup']:.2f}x ({k}AL {m['acceptance_length']:.2f})"


def hosts_table(committed: list[dict]) -> list[dict]:
    """One row per committed host/dtype/suite: verify cost at K=7 and the best end-to-end speed-up of each family
    (the oracle at the paper's acceptance too, where it ran)."""
    rows = []
    for c in committed:
        res = c["results"]
        dc = res.get("drafting_cost") or {}
        suites = res.get("suites") or ({suite_of(res["end_to_end"]): res["end_to_end"]} if res.get("end_to_end")
                                       else {None: {}})
        for suite, e2e in suites.items():
            env = (e2e or dc).get("env", {})
            load = env.get("loadavg_start")
            regime = e2e.get("lossless_regime", "exact")
            rows.append({"host": c["host"], "dtype": c["dtype"], "suite": suite,
                         "cpu": env.get("gpu") or env.get("cpu"), "threads": env.get("torch_threads"),
                         "load": load[0] if load else None, "verify_ratio_k7": verify_and_draft_ratio(dc, 7)[0],
                         "best_p_eagle": _best(e2e, "p-eagle"), "best_eagle3": _best(e2e, "eagle3"),
                         "prompt_lookup": _best(e2e, "prompt-lookup"), "oracle": _best(e2e, "oracle"),
                         "lossless": f"{e2e.get('all_lossless')} ({regime})" if e2e else None})
    return rows


def headline(results: dict) -> dict:
    """The key numbers: drafting ratio per K, best speed-up per family, losslessness (of ``end_to_end``, and of
    every suite under ``suites`` when several ran)."""
    h = {}
    dc, e2e = results.get("drafting_cost"), results.get("end_to_end")
    if dc:
        h["drafting_ratio_seq_over_par"] = {str(r["k"]): r["ratio_seq_over_par"] for r in dc["rows"]}
    if len(results.get("suites") or {}) > 1:
        h["suites"] = {s: headline({"end_to_end": one}) for s, one in results["suites"].items()}
    if e2e:
        h["suite"] = suite_of(e2e)
        best = {}
        for row in e2e["methods"]:
            f = row["family"]
            if f != "plain" and (f not in best or (row["speedup"] or 0) > (best[f]["speedup"] or 0)):
                best[f] = row
        h["best"] = {f: {"method": r["method"], "speedup": r["speedup"], "acceptance_length": r["acceptance_length"],
                         "efficiency": r.get("efficiency")} for f, r in best.items()}
        h["plain_tokens_per_s"] = next(r["tokens_per_s"] for r in e2e["methods"] if r["family"] == "plain")
        h["all_lossless"] = e2e["all_lossless"]
    return h


def speedup_model(al, verify_ratio, draft_ratio=0.0):
    """Decode speed-up of speculative decoding over plain decoding for acceptance length ``al`` when one round
    costs ``verify_ratio + draft_ratio`` decode steps: AL tokens per round against one token per step."""
    return al / (verify_ratio + draft_ratio)


def break_even_inputs(results: dict, k: int = 7, label: str | None = None):
    """The curve and the head points of one benchmark result (drafting cost + end to end) at K=``k``."""
    dc, e2e = results.get("drafting_cost"), results.get("end_to_end")
    curves, points = [], []
    dtype = (dc or e2e or {}).get("env", {}).get("dtype")
    vr, dr = verify_and_draft_ratio(dc or {}, k)
    if vr is not None:
        curves.append({"label": label or f"{dtype}, measured", "verify_ratio": vr, "draft_ratio": dr or 0.0})
    for m in (e2e or {}).get("methods", []):
        if m["family"] in ("p-eagle", "eagle3") and m.get("decode_speedup") and m.get("k") == k:
            points.append({"label": f"{m['method']} ({dtype})", "acceptance_length": m["acceptance_length"],
                           "speedup": m["decode_speedup"]})
    return curves, points
