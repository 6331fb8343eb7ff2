"""The shipped heads' committed benchmark runs across hosts and dtypes (chapter 12): one table per suite, a row per
host and dtype, and the verdicts the paired rule (:mod:`~peagle_lab.workbook.payoff`) reads from them."""

from __future__ import annotations

from ..bench.files import result_suites
from . import payoff
from .ledger import earlier_vocab


def wins(e2e: dict, method: dict | None) -> tuple[int, int]:
    """(prompts on which ``method`` beat plain decoding end to end, prompts timed): what the paired rule counts."""
    if method is None:
        return 0, 0
    per = [r["speedup_vs_plain"] for r in e2e["runs"]
           if r["method"] == method["method"] and r["speedup_vs_plain"] is not None]
    return sum(v > 1 for v in per), len(per)


def best_cell(method: dict | None) -> str:
    """A best row as the tables show it: speed-up, K and AL."""
    return "-" if method is None else f"{method['speedup']:.2f}x (K={method['k']}, AL {method['acceptance_length']:.2f})"


def diverged_cell(methods: list[dict | None]) -> str:
    """The outputs that left plain greedy, per row (``n/runs``), with the largest plain top-2 margin among them."""
    rows = [m for m in methods if m is not None]
    margins = [m["max_divergence_margin"] for m in rows if m.get("divergences") and m.get("max_divergence_margin")
               is not None]
    counts = " / ".join(f"{m.get('divergences') or 0}/{m['runs']}" for m in rows)
    return counts + (f" (margin <= {max(margins):g})" if margins else "")


def verify_k7(results: dict) -> float | None:
    """One target pass over 8 tokens in decode steps, from a run's drafting-cost table (medians, timed alone)."""
    dc = results.get("drafting_cost") or {}
    row = next((r for r in dc.get("rows", []) if r["k"] == 7), None)
    return round(row["verify_ms"] / dc["target_step_ms"], 2) if row and dc.get("target_step_ms") else None


def _suite_runs(committed: list[dict]):
    """Per committed run and suite, what both the tables and the verdicts read: ``(run, suite, result, best P-EAGLE
    row, best EAGLE-3 row, per-prompt gaps P-EAGLE minus EAGLE-3, the oracle's one-pass and K-pass rows)``."""
    for c in committed:
        for suite, e in result_suites(c["results"]).items():
            p_row, s_row = payoff.best(e, "p-eagle"), payoff.best(e, "eagle3")
            yield (c, suite, e, p_row, s_row, payoff.paired_gaps(e, p_row, s_row), *payoff.oracle_pair(e))


def suite_tables(committed: list[dict], host: str, vocab_now: dict[str, int] | None = None) -> dict[str, list[dict]]:
    """Per suite, a row per committed run (host and dtype): each head's best speed-up, the outputs that diverged,
    prompts won against plain, the per-prompt gap P-EAGLE minus EAGLE-3, and the oracle's one pass / K passes. A run
    of an earlier version of the heads (a draft vocabulary other than ``vocab_now``'s, see
    :func:`~peagle_lab.workbook.ledger.earlier_vocab`) says so in its host cell."""
    tables: dict[str, list[dict]] = {}
    for c, suite, e, p_row, s_row, gaps, o, o_seq in _suite_runs(committed):
        look = payoff.best(e, "prompt-lookup")
        then = earlier_vocab(e["config"].get("parallel_head") or {}, vocab_now)
        tables.setdefault(suite, []).append({
            "host": c["host"] + (" (this machine)" if c["host"] == host else "")
            + (f" (earlier heads, {then:,} draft ids)" if then else ""), "dtype": c["dtype"],
            "prompts": f"{e['config']['n_prompts']} x {e['config']['max_new_tokens']}",
            "verify_k7": verify_k7(c["results"]),
            "P-EAGLE": best_cell(p_row), "EAGLE-3": best_cell(s_row), "lookup": best_cell(look),
            "diverged (P / E / lookup)": diverged_cell([p_row, s_row, look]),
            "faster than plain (P / E)": "{}/{} / {}/{}".format(*wins(e, p_row), *wins(e, s_row)),
            "P minus E": f"{min(gaps):+.2f} to {max(gaps):+.2f}" if gaps else "-",
            "oracle (1 / K passes)": "-" if o is None else f"{o['speedup']:.2f}x / "
                                                           + (f"{o_seq['speedup']:.2f}x" if o_seq else "-")})
    return tables


def verdict_lines(committed: list[dict]) -> list[str]:
    """The verdicts over every committed run: each head against plain decoding per dtype, one head against the
    other, and one parallel pass against K sequential passes at the blog's acceptance (same draws)."""
    vs_plain, vs_head, vs_oracle = [], [], []
    for c, suite, e, p_row, s_row, gaps, o, o_seq in _suite_runs(committed):
        vs_plain += [(c["dtype"], m["speedup"], *wins(e, m)) for m in (p_row, s_row) if m]
        vs_head.append((sum(g > 0 for g in gaps), sum(g != 0 for g in gaps)))
        if o_seq:
            g = payoff.paired_gaps(e, o, o_seq)
            vs_oracle.append((f"{suite} on {c['dir']}", o, o_seq, sum(x > 0 for x in g), sum(x != 0 for x in g)))
    out = []
    for dtype in dict.fromkeys(d for d, *_ in vs_plain):
        speedups = [sp for d, sp, w, n in vs_plain if d == dtype]
        words = [payoff.verdict_word(w, n) for d, sp, w, n in vs_plain if d == dtype]
        out.append(f"against plain decoding, {dtype}: of {len(words)} best speed-ups, {words.count('shown faster')} "
                   f"shown faster, {words.count('shown slower')} shown slower, {words.count('not shown')} not shown "
                   f"either way ({min(speedups):.2f}x to {max(speedups):.2f}x)")
    orders = [payoff.verdict_word(w, n) != "not shown" for w, n in vs_head]
    out.append(f"one head against the other: shown faster in {sum(orders)} of {len(orders)} runs"
               + ("" if all(orders) else "; in the rest the prompts split too evenly for the sign test"))
    for where, o, o_seq, w, n in vs_oracle:
        out.append(f"one pass against K, at the blog's acceptance, {where}: {o['speedup']:.2f}x against "
                   f"{o_seq['speedup']:.2f}x, one pass faster on {w} of {n} prompts (p = {payoff.sign_test(w, n):.2g}):"
                   f" {payoff.verdict_word(w, n)}")
    return out
