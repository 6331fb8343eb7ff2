"""A small live race, `peagle-lab bench` in miniature: plain greedy decoding and each contender on every request,
methods interleaved, every output checked against plain greedy, and the paired rule (a two-sided sign test per
request, :func:`~peagle_lab.workbook.payoff.paired_order`) read against plain and between the first two contenders.

The race itself, ``race``, is written in view in notebook 06 (and only there: ``tests/workbook/test_race.py`` runs
that cell); :class:`Race` keeps its rows and reads them.

A contender is ``(make, k)``: ``make(ids, plain)`` returns the drafter for one request (``plain`` is the request's
plain greedy result, for drafters that replay the target's own continuation, such as the oracle), and ``k`` its
drafts per round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median

from ..bench.readme import format_table
from ..decoding.divergence import lossless_verdict
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

