"""The shipped heads' committed figures read and drawn (chapter 05): the held-out comparison slot by slot and prompt
by prompt, the learning curves and the deeper heads."""

from __future__ import annotations

NAMES = {"parallel": "P-EAGLE (parallel)", "sequential": "EAGLE-3 (sequential)"}


def plot_heldout(rows: dict, title: str) -> None:
    """Plots AL against K for the committed held-out rows (kind -> row or None): each row's pooled AL, and beside it
    its prompts' own ALs where the row keeps them."""
    import matplotlib.pyplot as plt  # on first plot: importing the package creates no matplotlib cache

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (kind, row) in enumerate(rows.items()):
        if row:
            dots = ax.plot([int(k) for k in row["acceptance_length"]], list(row["acceptance_length"].values()),
                           marker="o", markersize=9, ls="none", label=f"{NAMES[kind]}, pooled")  # no line between
            for k, counts in row.get("per_prompt", {}).items():  # each prompt's own AL, beside the pooled dot
                als = [pooled_al([c]) for c in counts]
                ax.scatter([int(k) + (0.15 if i else -0.15)] * len(als), als, s=14, alpha=0.5,
                           color=dots[0].get_color(), label=f"{NAMES[kind]}, each prompt" if k == "3" else None)
    ax.set(title=title, xlabel="K (draft tokens per round)", ylabel="acceptance length (incl. bonus token)")
    ax.grid(alpha=0.3)
    ax.legend()
    plt.tight_layout()
    plt.show()


def _plot_runs(ax, points: list[dict], key: str, title: str) -> None:
    """One line per ``key``; where a line's points come from a later run than its first (a ``-cont`` continuation),
    those points are drawn hollow, with the run named in the legend."""
    for name in dict.fromkeys(p[key] for p in points):
        ps = sorted((p for p in points if p[key] == name), key=lambda p: p["tokens_seen"])
        (line,) = ax.plot([p["tokens_seen"] for p in ps], [p["acceptance_length"] for p in ps], "o-", label=name)
        later = [p for p in ps if p["run"] != ps[0]["run"]]
        if later:
            runs = ", ".join(dict.fromkeys(p["run"] for p in later))
            ax.scatter([p["tokens_seen"] for p in later], [p["acceptance_length"] for p in later], s=60, zorder=3,
                       facecolor="white", edgecolor=line.get_color(), linewidth=1.5,
                       label=f"{name}: continued ({runs})")
    ax.set(xscale="log", xlabel="training tokens seen", ylabel="held-out acceptance length, K=7", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_curves(curve: list[dict], deeper: list[dict]) -> None:
    """Plots AL against tokens seen: the long runs' snapshots left, the 1, 2 and 4-layer heads right."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    _plot_runs(axes[0], curve, "mode", "long runs' snapshots (P-EAGLE = parallel, EAGLE-3 = sequential)")
    _plot_runs(axes[1], deeper, "run", "1, 2 and 4 layers, each trained ~2400 s (exp-L<layers>)")
    plt.tight_layout()
    plt.show()


def pooled_al(counts: list) -> float:
    """AL pooled over prompts from their ``[rounds, accepted drafts]`` pairs: 1 + accepted / rounds (one pair: that
    prompt's own AL)."""
    return 1 + sum(a for _, a in counts) / max(1, sum(r for r, _ in counts))


def prompt_spread(P: dict, S: dict, k: str, resamples: int = 2000, seed: int = 0) -> dict | None:
    """How far the held-out AL gap (EAGLE-3 minus P-EAGLE at K=``k``) rests on which prompts were drawn, from the
    rows' ``per_prompt`` counts (``[rounds, accepted]`` per prompt, the same prompts in both rows); ``None`` for a
    row without them. ``gaps``: each prompt's own AL gap; ``interval``: the 2.5th and 97.5th percentiles of the
    pooled gap over ``resamples`` draws of the prompts with replacement (a paired bootstrap: both heads on the same
    draw); ``order``: the paired rule (a sign test over the prompts' gaps)."""
    import random

    from .payoff import sign_test, verdict_word

    pp, ps = (row.get("per_prompt", {}).get(k) for row in (P, S))
    if not pp or not ps or len(pp) != len(ps):
        return None

    n, rng = len(pp), random.Random(seed)
    draws = sorted(pooled_al([ps[i] for i in idx]) - pooled_al([pp[i] for i in idx])
                   for idx in ([rng.randrange(n) for _ in range(n)] for _ in range(resamples)))
    gaps = [pooled_al([s]) - pooled_al([p]) for p, s in zip(pp, ps)]
    wins, m = sum(g > 0 for g in gaps), sum(g != 0 for g in gaps)  # a tie tells neither way
    word = {"shown faster": "EAGLE-3 shown to accept more", "shown slower": "P-EAGLE shown to accept more"}.get(
        verdict_word(wins, m), "neither shown to accept more")
    return dict(gaps=gaps, interval=(draws[int(0.025 * resamples)], draws[int(0.975 * resamples) - 1]), verdict=word,
                order=f"EAGLE-3 ahead on {wins} of {m} prompts, sign test p = {sign_test(wins, m):.2g}: {word}")


def heldout_lines(P: dict, S: dict, n_prompts: int, n_new: int, tie: float) -> list[str]:
    """The committed held-out comparison of the P-EAGLE row ``P`` and the EAGLE-3 row ``S``: AL at each K with who
    accepts more, then per K each slot's rate with the rounds that reached it and AL rebuilt from the rates:
    AL = 1 + p1 + p1 p2 + ... (a row without counts estimates them from tokens / AL, ``~``). Rows with per-prompt
    counts are judged by the paired rule over prompts, with a bootstrap interval (:func:`prompt_spread`); rows
    without them by the gap against ``tie``."""
    out = []
    for k, p in P["acceptance_length"].items():
        s = S["acceptance_length"][k]
        spread = prompt_spread(P, S, k)
        if spread:
            lo, hi = spread["interval"]
            out.append(f"  K={k}: P-EAGLE {p:.3f}, EAGLE-3 {s:.3f}, gap {s - p:+.3f} (95% interval over the prompts "
                       f"{lo:+.3f} to {hi:+.3f}); per prompt: {spread['order']}")
            continue
        verdict = "a tie" if abs(s - p) < tie else f"{'EAGLE-3' if s > p else 'P-EAGLE'} accepts more per round"
        out.append(f"  K={k}: P-EAGLE {p:.3f}, EAGLE-3 {s:.3f}, gap {s - p:+.3f}: {verdict}")
    for k in P["per_position"]:
        out.append(f"\nK={k}, per slot: rate (rounds that reached the slot)")
        for name, r in (("P-EAGLE", P), ("EAGLE-3", S)):
            rates, reach = r["per_position"][k], [1.0]  # reach[j]: the share of rounds that accepted slots 1..j
            for x in rates:
                reach.append(reach[-1] * (x or 0.0))
            rounds = n_prompts * n_new / r["acceptance_length"][k]
            counted = r.get("attempted", {}).get(k) or [f"~{rounds * f:.0f}" for f in reach]
            cells = ("-" if x is None else f"{x:.2f} ({n})" for x, n in zip(rates, counted))
            out.append(f"  {name:8s} " + "  ".join(cells))
            out.append(f"  {'':8s} AL = 1 + " + " + ".join(f"{t:.4f}" for t in reach[1:] if t)
                       + f" = {1 + sum(reach[1:]):.3f}   (recorded {r['acceptance_length'][k]:.3f})")
    return out


def live_lines(P: dict | None, S: dict | None, live: dict, ks: list, tie: float) -> list[str]:
    """The live check beside the committed held-out rows: at each K, this run's two ALs and their gap (a check on a
    few prompts, so no verdict), then who accepts more on the held-out prompts where the file holds that K (by the
    paired rule over prompts where the rows keep them, else a gap under ``tie`` is a tie)."""
    out = []
    for k in ks:
        p, s = (live[kind]["acceptance_length"][k] for kind in ("parallel", "sequential"))
        line = f"this run, K={k}: P-EAGLE {p:.2f}, EAGLE-3 {s:.2f} (gap {s - p:+.2f})"
        if P and S and str(k) in P["acceptance_length"]:
            gap = S["acceptance_length"][str(k)] - P["acceptance_length"][str(k)]
            spread = prompt_spread(P, S, str(k))  # the paired rule over prompts where the rows keep them
            who = spread["verdict"] if spread else (
                "a tie" if abs(gap) < tie else f"{'EAGLE-3' if gap > 0 else 'P-EAGLE'} accepts more")
            line += f"; held-out: {who} (gap {gap:+.2f})"
        out.append(line)
    return out


def training_runs(head_dir) -> list[str]:
    """A shipped head's training runs, oldest first, each continuing the one before: its data file, split and
    records, the distinct tokens it read and the tokens it trained on (their ratio is the epochs), then the total."""
    import json
    import re
    from pathlib import Path

    rec = json.loads((Path(head_dir) / "training.json").read_text())
    runs = rec.get("history", []) + [dict(head=Path(head_dir).name, data=rec["data"]["file"], command=rec["command"],
                                          sequences=rec["data"]["sequences"], tokens_seen=rec["tokens_seen"],
                                          distinct_tokens=rec["data"].get("tokens"))]
    out = [f"{Path(head_dir).name}, {len(runs)} training run(s), each continuing the one before:"]
    for r in runs:
        flags = {name: re.search(rf"--{name} (\S+)", r.get("command", "")) for name in ("split", "records")}
        where = "".join(f", {name} {m.group(1)}" for name, m in flags.items() if m)
        out.append(f"  {r['head']}: {r['sequences']:,} sequences of {Path(r['data']).name}{where}; "
                   f"{r['distinct_tokens'] or 0:,} distinct tokens, {r['tokens_seen']:,} tokens seen in this run"
                   + (f" ({r['tokens_seen'] / r['distinct_tokens']:.2f} epochs)" if r.get("distinct_tokens") else ""))
    cum = rec.get("cumulative") or {}
    out.append(f"  cumulative: {sum(r['tokens_seen'] or 0 for r in runs):,} tokens seen over the {len(runs)} run(s)"
               + (f", {cum['distinct_tokens']:,} distinct tokens ({cum['epochs']} epochs: runs on the same records "
                  "count once)" if cum.get("distinct_tokens") else ""))
    return out
