"""07's results across hosts: a best row as its table shows it, and the verdict lines read from the committed runs by
the paired rule."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from ..bench.files import result_suites
from ..bench.summary import verify_and_draft_ratio
from . import payoff


def best_text(m: dict | None) -> str:
    """A best row as the table shows it: speed-up, K, acceptance length and divergences with the largest logit
    margin among them (``-`` where none)."""
    if m is None:
        return "-"
    margin = m.get("max_divergence_margin")
    diverged = (f", {m['divergences']}/{m['runs']} diverge" + ("" if margin is None else f", margin <= {margin:g}")
                if m.get("divergences") else "")
    return f"{m['speedup']:.2f}x (K={m['k']}, AL {m['acceptance_length']:.2f}{diverged})"


def print_verdicts(committed: list[dict], word: Callable[[int, int], str]) -> None:
    """Prints the verdict lines: per dtype, how many best speed-ups ``word`` (the paired rule, from prompts faster
    and timed) calls shown faster or slower than plain; whether one head is shown faster than the other; the
    oracle's one parallel pass against K sequential passes."""
    heads, orders, claims = [], [], []
    for c in committed:
        for suite, e in result_suites(c["results"]).items():
            p_row, s_row, (o, o_seq) = payoff.best(e, "p-eagle"), payoff.best(e, "eagle3"), payoff.oracle_pair(e)
            for m in (p_row, s_row):
                heads.append({"dtype": c["dtype"], "speedup": m["speedup"], "word": word(*payoff.prompts_faster(e, m))})
            orders.append(payoff.verdict_word(*payoff.gap_wins(payoff.paired_gaps(e, p_row, s_row))) != "not shown")
            if o_seq:
                claims.append(f"{suite} on {c['dir']} {o['speedup']:.2f}x against {o_seq['speedup']:.2f}x, parallel "
                              + payoff.paired_verdict(*payoff.gap_wins(payoff.paired_gaps(e, o, o_seq))))
    for dtype in dict.fromkeys(h["dtype"] for h in heads):
        mine = [h for h in heads if h["dtype"] == dtype]
        n = Counter(h["word"] for h in mine)
        print(f"verdict, {dtype}: of {len(mine)} best speed-ups (2 heads x {len(mine) // 2} host/suite runs) "
              f"{n['shown faster']} shown faster than plain decoding, {n['shown slower']} shown slower, "
              f"{n['not shown']} not shown either way; best speed-ups {min(h['speedup'] for h in mine):.2f}x to "
              f"{max(h['speedup'] for h in mine):.2f}x")
    print(f"verdict, which head: one head shown faster than the other in {sum(orders)} of {len(orders)} runs"
          + ("" if all(orders) else "; in the rest the prompts split too evenly for the sign test"))
    print("verdict, at the paper's acceptance: one parallel pass per round against K sequential passes, same draws: "
          + ("; ".join(claims) or "not run"))
