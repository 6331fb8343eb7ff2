"""07's results across hosts: a best row as its table shows it."""

from __future__ import annotations


def best_text(m: dict | None) -> str:
    """A best row as the table shows it: speed-up, K, acceptance length and divergences with the largest logit
    margin among them (``-`` where none)."""
    if m is None:
        return "-"
    margin = m.get("max_divergence_margin")
    diverged = (f", {m['divergences']}/{m['runs']} diverge" + ("" if margin is None else f", margin <= {margin:g}")
                if m.get("divergences") else "")
    return f"{m['speedup']:.2f}x (K={m['k']}, AL {m['acceptance_length']:.2f}{diverged})"
