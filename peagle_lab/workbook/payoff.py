"""The payoff of one end-to-end bench result, in sentences computed from it: each head's best speed-up with its
per-prompt spread, the noise band (how far transformers' own greedy ``generate``, the same work as the baseline,
lands from 1), the verdict between the heads against that band, each head's best K, and what the oracle (the
paper's acceptance, replayed on this machine's round costs) would pay."""

from __future__ import annotations

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


def verdict(e2e: dict) -> str:
    """Which head is faster at its best K, by how much, against the noise band."""
    p, s = best(e2e, "p-eagle"), best(e2e, "eagle3")
    if not (p and s):
        return "one of the two heads did not run"
    gap = p["speedup"] - s["speedup"]
    word = "faster" if gap > 0 else "slower" if gap < 0 else "as fast as"
    return (f"P-EAGLE (best K={p['k']}) is {word} than EAGLE-3 (best K={s['k']}) by {abs(gap):.3f}x, "
            + _band_word(gap, noise_band(e2e)) + ("" if p["k"] != 1 else
                                                  "; at K=1 parallel and sequential drafting are one and the same "
                                                  "drafter pass, so that row does not test parallel drafting"))


def oracle_line(e2e: dict) -> str | None:
    """What a head with the paper's acceptance would pay on this machine's round costs, where the run has it."""
    o = best(e2e, "oracle")
    if not o:
        return None
    return (f"oracle (the paper's acceptance replayed, K={o['k']}): acceptance length {o['acceptance_length']:.2f}, "
            f"speed-up {o['speedup']:.2f}x")


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


def lines(e2e: dict) -> list[str]:
    """Everything above, one sentence a line."""
    out = head_lines(e2e) + [verdict(e2e)]
    return out + [x for x in [lookup_line(e2e), oracle_line(e2e)] if x]
