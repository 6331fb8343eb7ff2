"""A small live race, `peagle-lab bench` in miniature: plain greedy decoding and each contender on every request,
methods interleaved, every output checked against plain greedy, and the paired rule (a two-sided sign test per
request, :func:`~peagle_lab.workbook.payoff.paired_order`) read against plain and between the first two contenders.

A contender is ``(make, k)``: ``make(ids, plain)`` returns the drafter for one request (``plain`` is the request's
plain greedy result, for drafters that replay the target's own continuation, such as the oracle), and ``k`` its
drafts per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import Callable

from ..bench.readme import format_table
from ..decoding.divergence import first_divergence, is_lossless, lossless_regime, lossless_verdict
from ..decoding.speculative import plain_generate, speculative_generate
from . import payoff


@dataclass
class Race:
    """The race's rows (one per request) and each contender's (accepted drafts, rounds) over every request."""

    names: list[str]
    rows: list[dict] = field(default_factory=list)
    tally: dict = field(default_factory=dict)
    divergences: list = field(default_factory=list)
    regime: str = "exact"
    header: str = ""

    def acceptance_length(self, name: str) -> float:
        accepted, rounds = self.tally[name]
        return 1 + accepted / max(rounds, 1)

    def table(self) -> str:
        """The per-request table as markdown: each contender's AL, speed-up over plain and drafting ms a round."""
        return format_table(self.rows, list(self.rows[0]), floatfmt=".2f")

    def lines(self) -> list[str]:
        """The verdicts: AL from the counts, each contender against plain, the first two against each other, and
        their drafting cost per round (each by the paired rule)."""
        out = [self.header, "over every request: " + ", ".join(
            f"{n} AL = 1 + {a} / {r} = {self.acceptance_length(n):.2f}" for n, (a, r) in self.tally.items())]
        for n in self.names:
            r = [row[f"{n} vs plain"] for row in self.rows]
            out.append(f"{n} against plain: {min(r):.2f}x to {max(r):.2f}x, "
                       + payoff.paired_order([x - 1 for x in r], n, "plain"))
        if len(self.names) >= 2:
            a, b = self.names[:2]
            gaps = self.gaps(a, b)
            out.append(f"{a} minus {b}: {min(gaps):+.2f}x to {max(gaps):+.2f}x, " + payoff.paired_order(gaps, a, b))
            da, db = ([row[f"{n} draft ms"] for row in self.rows] for n in (a, b))
            out.append(f"drafting per round (median): {a} {median(da):.1f} ms, {b} {median(db):.1f} ms; "
                       + payoff.paired_order([y - x for x, y in zip(da, db)], f"{a}'s drafting", f"{b}'s"))
        return out

    def gaps(self, a: str, b: str) -> list[float]:
        """Per request: ``a``'s speed-up over plain minus ``b``'s."""
        return [row[f"{a} vs plain"] - row[f"{b} vs plain"] for row in self.rows]


def race(runner, contenders: dict[str, tuple[Callable, int]], requests: list[tuple[str, list[int]]],
         new_tokens: int, eos_ids=None, plain_first: bool = False, progress=None) -> Race:
    """Run plain decoding and every contender on each ``(label, prompt ids)`` request. The order rotates per
    request, so a drift in the machine's speed falls on every method alike; with ``plain_first`` plain runs first
    (a contender replaying its output needs it) and the contenders rotate. Asserts every output lossless in the
    target's regime (exact in float32 on a CPU, near-ties allowed otherwise)."""
    model = runner.model
    dtype, device = model.dtype, next(model.parameters()).device
    names = list(contenders)
    res = Race(names=names, tally={n: [0, 0] for n in names}, regime=lossless_regime(dtype, device.type))
    steps = progress(requests) if progress else requests
    for i, (label, ids) in enumerate(steps):
        order = ["plain", *names]
        if plain_first:
            order = ["plain"] + names[i % len(names):] + names[:i % len(names)]
        else:
            order = order[i % len(order):] + order[:i % len(order)]
        runs: dict = {}
        for m in order:
            if m == "plain":
                runs[m] = plain_generate(runner, ids, new_tokens, eos_ids=eos_ids)
            else:
                make, k = contenders[m]
                runs[m] = speculative_generate(runner, make(ids, runs.get("plain")), ids, k=k,
                                               max_new_tokens=new_tokens, eos_ids=eos_ids)
        row = {"held-out request": label[:44], "answer tokens": len(runs["plain"].tokens[:new_tokens])}
        for m in names:
            st = runs[m].stats
            res.tally[m] = [res.tally[m][0] + sum(st.accepted), res.tally[m][1] + st.rounds]
            res.divergences.append(first_divergence(runs[m].tokens[:new_tokens], runs["plain"], dtype, device.type))
            row |= {f"{m} AL": st.acceptance_length, f"{m} vs plain": runs["plain"].seconds / runs[m].seconds,
                    f"{m} draft ms": 1000 * st.times.get("draft", 0.0) / max(st.rounds, 1)}
        res.rows.append(row)
    assert is_lossless(res.divergences, res.regime), [d.message() for d in res.divergences if d is not None]
    left = [d for d in res.divergences if d is not None]
    ks = ", ".join(f"{n} K={contenders[n][1]}" for n in names)
    res.header = (f"live ({str(dtype).removeprefix('torch.')}), {ks}: {len(requests)} requests x {new_tokens} new "
                  f"tokens; {len(left)} of {len(res.divergences)} outputs leave plain greedy"
                  + (f", at plain top-2 margins {sorted({d.margin for d in left})}" if left else "")
                  + f": {lossless_verdict(res.divergences, res.regime)}")
    return res
