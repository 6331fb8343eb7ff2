"""A small live race, `peagle-lab bench` in miniature: plain greedy decoding and each contender on every request,
methods interleaved, every output checked against plain greedy, and the paired rule (a two-sided sign test per
request, :func:`~peagle_lab.workbook.payoff.paired_order`) read against plain and between the first two contenders.

:func:`race` is the one notebook 06 writes in view, kept here word for word for the tests
(``tests/notebooks/test_scratch_copy.py`` checks that the two are the same code); :class:`Race` keeps its rows and
reads them.

A contender is ``(make, k)``: ``make(ids, plain)`` returns the drafter for one request (``plain`` is the request's
plain greedy result, for drafters that replay the target's own continuation, such as the oracle), and ``k`` its
drafts per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

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

    def describe(self, ks: dict[str, int], n_requests: int, new_tokens: int, dtype) -> None:
        """Set :attr:`header`: the race's settings and how many outputs left plain greedy, at which margins."""
        left = [d for d in self.divergences if d is not None]
        self.header = (f"live ({str(dtype).removeprefix('torch.')}), " + ", ".join(f"{n} K={k}" for n, k in ks.items())
                       + f": {n_requests} requests x {new_tokens} new tokens; {len(left)} of {len(self.divergences)} "
                       "outputs leave plain greedy"
                       + (f", at plain top-2 margins {sorted({d.margin for d in left})}" if left else "")
                       + f": {lossless_verdict(self.divergences, self.regime)}")

    def gaps(self, a: str, b: str) -> list[float]:
        """Per request: ``a``'s speed-up over plain minus ``b``'s."""
        return [row[f"{a} vs plain"] - row[f"{b} vs plain"] for row in self.rows]


def race(runner, contenders, requests, new_tokens, eos_ids=None, plain_first=False, progress=None):
    """Run plain decoding and every contender on each ``(label, prompt ids)`` request, and check every output
    against plain greedy (exact in float32 on a CPU, near-ties allowed otherwise). A contender is ``(make, k)``:
    ``make(ids, plain)`` returns its drafter for one request, ``plain`` being that request's plain result."""
    model = runner.model
    dtype, device = model.dtype, next(model.parameters()).device
    names = list(contenders)
    res = Race(names=names, tally={n: [0, 0] for n in names}, regime=lossless_regime(dtype, device.type))
    for i, (label, ids) in enumerate(progress(requests) if progress else requests):
        if plain_first:  # plain first (a contender replaying its output needs it), the contenders rotated
            turn = ["plain"] + names[i % len(names):] + names[:i % len(names)]
        else:  # all rotated: a drift in the machine's speed falls on every method alike
            everyone = ["plain", *names]
            turn = everyone[i % len(everyone):] + everyone[:i % len(everyone)]
        runs = {}
        for m in turn:
            if m == "plain":
                runs[m] = plain_generate(runner, ids, new_tokens, eos_ids=eos_ids)
            else:
                make, k = contenders[m]
                runs[m] = speculative_generate(runner, make(ids, runs.get("plain")), ids, k=k,
                                               max_new_tokens=new_tokens, eos_ids=eos_ids)
        row = {"held-out request": label[:44], "answer tokens": len(runs["plain"].tokens[:new_tokens])}
        for m in names:
            st = runs[m].stats  # the loop's counts, and its timer's seconds per part of a round
            res.tally[m] = [res.tally[m][0] + sum(st.accepted), res.tally[m][1] + st.rounds]
            res.divergences.append(first_divergence(runs[m].tokens[:new_tokens], runs["plain"], dtype, device.type))
            row |= {f"{m} AL": st.acceptance_length, f"{m} vs plain": runs["plain"].seconds / runs[m].seconds,
                    f"{m} draft ms": 1000 * st.times.get("draft", 0.0) / max(st.rounds, 1)}
        res.rows.append(row)
    assert is_lossless(res.divergences, res.regime), [d.message() for d in res.divergences if d is not None]
    res.describe({n: k for n, (_, k) in contenders.items()}, len(requests), new_tokens, dtype)
    return res
