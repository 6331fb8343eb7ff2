"""Figures and small HTML renderers shared by the notebooks and the explorer.

* ``token_sources`` / ``token_pieces`` / ``tokens_html``: colour every generated token by where it came from:
  a draft accepted at slot j (one colour per j) or the target itself (the bonus token of a round, or the first
  token after the prefill);
* ``acceptance_bars_html``: per-position acceptance as light HTML bars (cheap enough to redraw every round);
* ``plot_per_position_acceptance`` / ``plot_acceptance_vs_k``: the matplotlib versions for the notebooks;
* ``plot_payoff_vs_k``: speed-up, acceptance length and round cost against K, one line per drafting method;
* ``save_figure``: write a figure beside the run's results (``$PEAGLE_RESULTS/figures``).

The pure functions here need neither matplotlib nor a tokenizer; matplotlib is imported only by the plots.
"""

from __future__ import annotations

import html
import math
import re
import textwrap
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..atomic import write_figure
from ..errors import PeagleError, require
from ..settings import results_dir
from .payoff import rate_interval

TARGET = 0  # source id of a token that came from the target (bonus token, or the first token after prefill)

# Slot j (1-based) -> background colour: light (black text stays readable), neighbours clearly different.
SLOT_COLOURS = (
    "#a6e3a1",  # 1 green
    "#8fd3f4",  # 2 light blue
    "#b9acf6",  # 3 violet
    "#f5a8d4",  # 4 pink
    "#f9b97f",  # 5 orange
    "#f3e27a",  # 6 yellow
    "#9ee6d6",  # 7 mint
    "#d2c8a8",  # 8 khaki
    "#f29b93",  # 9 salmon
    "#94b8d8",  # 10 steel blue
)
TARGET_COLOUR = "#e4e4e7"  # grey: the target's own token


def slot_colour(source: int) -> str:
    """Background colour for a token source: ``TARGET`` (0) or draft slot ``j >= 1`` (cycles after 10)."""
    if source == TARGET:
        return TARGET_COLOUR
    if source < 0:
        raise PeagleError(f"token source must be 0 (target) or a draft slot >= 1, got {source}")
    return SLOT_COLOURS[(source - 1) % len(SLOT_COLOURS)]


# ------------------------------------------------------------------------------------------ provenance
def round_sources(num_accepted: int) -> list[int]:
    """Sources of the tokens one verification round commits: drafts at slots 1..a, then the target's bonus."""
    if not isinstance(num_accepted, int) or num_accepted < 0:
        raise PeagleError(f"accepted drafts per round must be an int >= 0, got {num_accepted!r}")
    return list(range(1, num_accepted + 1)) + [TARGET]


def token_sources(accepted_per_round: Sequence[int], n_tokens: int | None = None) -> list[int]:
    """Where each generated token came from, in output order.

    The first token comes from the prefill (the target); then each round commits its ``a`` accepted drafts
    (slots 1..a) and the target's bonus token. ``n_tokens``: the length of the returned output, which may be
    shorter than all rounds committed (cut at EOS or ``max_new_tokens``).

    >>> token_sources([2, 0, 1])
    [0, 1, 2, 0, 0, 1, 0]
    """
    sources = [TARGET]
    for a in accepted_per_round:
        sources += round_sources(int(a))
    if n_tokens is not None:
        if n_tokens > len(sources):
            raise PeagleError(f"{n_tokens} tokens but the rounds only account for {len(sources)}: "
                              "pass every round's accepted count (Round.accepted of speculative.iter_rounds).")
        sources = sources[:n_tokens]
    return sources


def token_pieces(decode: Callable[[list[int]], str], ids: Sequence[int], window: int = 8) -> list[str]:
    """The text each token adds, so that ``"".join(pieces) == decode(ids)``.

    Decoding ids one by one breaks characters split over several byte-level tokens (they show as U+FFFD); here
    such a character is given to the token that completes it (earlier tokens get ""). ``window`` tokens of
    left context are decoded with each step, which keeps it linear in the length.
    """
    ids = [int(t) for t in ids]
    pieces: list[str] = []
    done = 0  # ids[:done] are already accounted for in pieces
    for i in range(len(ids)):
        start = max(0, done - window)
        head = decode(ids[start:done])
        text = decode(ids[start:i + 1])
        if text.endswith("\ufffd") and i + 1 < len(ids):
            pieces.append("")  # incomplete character: wait for the next token
            continue
        pieces.append(text[len(head):] if text.startswith(head) else decode(ids[done:i + 1]))
        done = i + 1
    return pieces


# ------------------------------------------------------------------------------------------ HTML
_BOX = ("font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; "
        "line-height: 1.7; white-space: pre-wrap; word-break: break-word; color: #111;")


def _span(text: str, source: int) -> str:
    label = "target" if source == TARGET else f"slot {source}"
    shown = html.escape(text).replace("\n", "\u21b5\n")  # show line breaks
    return f'<span class="peagle-tok" title="{label}" style="background:{slot_colour(source)}">{shown}</span>'


def legend_html(k: int) -> str:
    """Legend: the target's colour, then one swatch per draft slot 1..k."""
    items = [(TARGET, "target (bonus)")] + [(j, f"draft slot {j}" if j == 1 else f"slot {j}")
                                            for j in range(1, k + 1)]
    swatches = "".join(
        f'<span style="display:inline-block; margin:0 8px 2px 0;"><span style="display:inline-block; width:12px; '
        f'height:12px; border-radius:2px; vertical-align:-1px; background:{slot_colour(s)}; '
        f'border:1px solid #bbb;"></span> {html.escape(name)}</span>'
        for s, name in items)
    return (f'<div class="peagle-legend" style="font-size:12px; color:#333; margin:2px 0 6px 0;">'
            f'<span style="margin-right:8px;">token came from:</span>{swatches}</div>')


def tokens_html(pieces: Sequence[str], sources: Sequence[int], k: int | None = None, legend: bool = True) -> str:
    """Coloured text: one span per token, background by source; ``k`` sets the legend's slots."""
    if len(pieces) != len(sources):
        raise PeagleError(f"{len(pieces)} token pieces but {len(sources)} sources: they must align one to one.")
    k = k if k is not None else max([s for s in sources] + [1])
    body = "".join(_span(p, s) for p, s in zip(pieces, sources))
    return (f'<div class="peagle-text">{legend_html(k) if legend else ""}'
            f'<div style="{_BOX} border:1px solid #ddd; border-radius:4px; padding:8px; background:#fff;">{body}'
            f'</div></div>')


def render_tokens(tokenizer, ids: Sequence[int], sources: Sequence[int], k: int | None = None) -> str:
    """``tokens_html`` for token ids, decoded with ``tokenizer`` (special tokens kept visible)."""
    pieces = token_pieces(lambda t: tokenizer.decode(t, skip_special_tokens=False), ids)
    return tokens_html(pieces, sources, k)


def acceptance_bars_html(per_position: Sequence[float], attempted: Sequence[int] | None = None) -> str:
    """Horizontal bars of P(slot j accepted | slots < j accepted), j = 1..K, coloured like the tokens."""
    rows = []
    for j, p in enumerate(per_position, start=1):
        reached = attempted[j - 1] if attempted is not None else None
        if p is None or (isinstance(p, float) and math.isnan(p)):
            width, text = 0.0, "not reached yet"
        else:
            width, text = 100.0 * float(p), f"{100 * float(p):.0f}%"
            if reached:
                text += f" ({round(float(p) * reached)}/{reached} rounds)"
        rows.append(
            f'<div style="display:flex; align-items:center; gap:6px; height:18px;">'
            f'<span style="width:48px; text-align:right;">slot {j}</span>'
            f'<span style="flex:0 0 220px; height:12px; background:#f3f3f3; border:1px solid #ddd;">'
            f'<span style="display:block; height:100%; width:{width:.1f}%; background:{slot_colour(j)};"></span></span>'
            f'<span>{text}</span></div>')
    return (f'<div class="peagle-bars" style="font-size:12px; color:#333;"><div style="margin-bottom:3px;">'
            f'<b>per-position acceptance</b> (given the slots before it were accepted)</div>{"".join(rows)}</div>')


# ------------------------------------------------------------------------------------------ matplotlib
def _axes(ax, figsize):
    if ax is not None:
        return ax.figure, ax
    plt = require("matplotlib.pyplot", "pip install matplotlib")
    fig, ax = plt.subplots(figsize=figsize)
    return fig, ax


def plot_per_position_acceptance(rates, ax=None, title: str | None = None, counts=None):
    """Bars of per-position acceptance, j = 1..K.

    ``rates``: one list (bars coloured like the token slots) or ``{label: list}`` (grouped bars, e.g. parallel vs
    sequential). NaN (slot never reached) draws no bar and the words "not reached". ``counts``, shaped like
    ``rates`` with ``(accepted, reached)`` pairs, draws each bar's 95% interval and writes its sample over it, so a
    rate from 2 rounds is not read like one from 200. Returns the figure.
    """
    series = dict(rates) if isinstance(rates, Mapping) else {None: list(rates)}
    tallies = (dict(counts) if isinstance(counts, Mapping) else {None: list(counts)}) if counts is not None else {}
    k = max((len(v) for v in series.values()), default=0)
    fig, ax = _axes(ax, (max(6, 1.1 * k + 2), 3.4) if len(series) > 1 else (6, 3.2))  # room for grouped counts
    width = 0.8 / max(len(series), 1)
    interval_labelled = False
    for i, (label, values) in enumerate(series.items()):
        xs = [j + 1 + (i - (len(series) - 1) / 2) * width for j in range(len(values))]
        ys = [0.0 if v is None or math.isnan(v) else float(v) for v in values]
        colour = [slot_colour(j + 1) for j in range(len(values))] if label is None else None
        ax.bar(xs, ys, width=width * 0.95, color=colour, edgecolor="#555", linewidth=0.5, label=label)
        for x, v in zip(xs, values):  # a slot no round reached has no rate: say so, so it is not read as 0
            if v is None or math.isnan(v):
                ax.text(x, 0.02, "not reached", rotation=90, ha="center", va="bottom", fontsize=7, color="#555")
        for x, y, (a, n) in zip(xs, ys, tallies.get(label, [])):
            if n:  # the rate's 95% interval, so 1 of 2 is not read like 15 of 45; its count above the whisker
                lo, hi = rate_interval(a, n)
                ax.errorbar([x], [y], yerr=[[max(y - lo, 0.0)], [max(hi - y, 0.0)]], fmt="none", ecolor="#333",
                            elinewidth=0.8, capsize=2, label=None if interval_labelled else "95% interval (Wilson)")
                interval_labelled = True
                ax.text(x, hi + 0.01, f"{a}/{n}", rotation=90 if len(series) > 1 else 0, ha="center", va="bottom",
                        fontsize=7.5, color="#333")
    ax.set_xticks(range(1, k + 1))
    ax.set_xlabel("draft slot j")
    ax.set_ylabel("P(accept j | 1..j-1 accepted)")
    ax.set_ylim(0, 1.25 if tallies and len(series) > 1 else 1.12 if tallies else 1.05)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1 or None not in series or tallies:  # outside the axes: the count labels stay readable
        ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def plot_payoff_vs_k(runs: Mapping[str, Sequence[Mapping]], names: Mapping[str, str], title: str | None = None):
    """The payoff against K, three panels: end-to-end speed-up, acceptance length, and the round's cost in decode
    steps; speed-up = AL / round, less the prefill. ``runs``: ``{run label: bench method rows}`` (each row with
    ``family``, ``k``, ``speedup``, ``acceptance_length`` and the round's medians); ``names``: ``{family: label}``,
    the families drawn. One line per family within a run and a marker per run: points of two runs are not joined, as
    their timings are not one measurement. Returns the figure."""
    from .payoff import round_steps

    plt = require("matplotlib.pyplot", "pip install matplotlib")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.4))
    colours = dict(zip(names, ("#2a7", "#c60", "#57a", "#a5a")))
    markers = ("o", "s", "^", "D")
    panels = (("end-to-end speed-up over plain", lambda m: m["speedup"]),
              ("acceptance length (AL)", lambda m: m["acceptance_length"]),
              ("round (decode steps)", round_steps))
    for ax, (ylabel, value) in zip(axes, panels):
        for r, (run, rows) in enumerate(runs.items()):
            for family, name in names.items():
                pts = sorted((m["k"], value(m)) for m in rows if m["family"] == family)
                if pts:
                    ax.plot(*zip(*pts), marker=markers[r % len(markers)], color=colours[family],
                            ls="-" if r == 0 else "--", label=f"{name}, {run}")
        ax.set(xlabel="K (drafts per round)", ylabel=ylabel)
        ax.grid(alpha=0.3)
    axes[0].axhline(1, color="#999", lw=0.8, ls=":")
    axes[-1].legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def ledger_prompt_set(row: Mapping) -> str:
    """The prompts a ledger row ran on, without a bench suite's name ("code: HumanEval" -> "HumanEval")."""
    return str(row["prompt_set"]).split(": ", 1)[-1]


def ledger_label(row: Mapping) -> str:
    """A ledger row's settings in a few characters: chapter, K, prompts x new tokens, dtype."""
    dtype = {"float32": "fp32", "bfloat16": "bf16"}.get(str(row["dtype"]).split()[0], str(row["dtype"]))
    return f"{row['chapter']}  K={row['k']}  {row['prompts']}x{row['new_tokens']}  {dtype}"


def ledger_tag(row: Mapping) -> str:
    """What tells a ledger row from another with the same settings, in a few words: its concurrency (a serving
    sweep), its prompt layout (a template row), its bench suite, else the first words of what it records."""
    what = str(row["what"]).replace(" (committed)", "").replace(" (live)", "")
    concurrent = re.search(r"(\d+) concurrent", what)
    if concurrent:
        return f"{concurrent.group(1)} concurrent"
    for words, tag in (("as trained", "as trained"), ("bare text", "bare text"), ("system message", "other system")):
        if words in what:
            return tag
    suite = re.search(r"`(\w+)` suite", what)
    if suite:
        return f"{suite.group(1)} suite"
    return textwrap.shorten(what, width=26, placeholder="")


def ledger_colour_key(row: Mapping) -> str:
    """What colours a ledger row: its prompt set (:func:`ledger_prompt_set`), or "a single prompt" for any one-prompt
    row, whichever prompt it was."""
    return "a single prompt" if row.get("prompts") == 1 else ledger_prompt_set(row)


def plot_ledger(rows: Sequence[Mapping]):
    """The acceptance ledger drawn in order: a panel per head with more than one row (stacked, each as tall as its
    rows), one line per row from AL 1 to the row's AL, lowest at the bottom, labelled with its settings
    (:func:`ledger_label`, with :func:`ledger_tag` where two rows would read alike), coloured by
    :func:`ledger_colour_key`; the dot is filled for a committed row, hollow for a live one. Returns the figure."""
    plt = require("matplotlib.pyplot", "pip install matplotlib")
    heads = [h for h in dict.fromkeys(r["head"] for r in rows) if sum(r["head"] == h for r in rows) > 1]
    counts = [sum(r["head"] == h for r in rows) for h in heads] or [1]
    keys = sorted({ledger_colour_key(r) for r in rows if r["head"] in heads})
    colours = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(keys)}
    fig, axes = plt.subplots(len(counts), 1, figsize=(8.5, 0.19 * sum(counts) + 1.1 * len(counts) + 0.9),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": counts})
    for ax, head in zip(axes[:, 0], heads):
        mine = sorted((r for r in rows if r["head"] == head), key=lambda r: r["acceptance_length"])
        for y, r in enumerate(mine):
            colour = colours[ledger_colour_key(r)]
            ax.plot([1, r["acceptance_length"]], [y, y], color=colour, lw=1.5, alpha=0.5)
            ax.scatter(r["acceptance_length"], y, s=30, edgecolors=colour, zorder=3,
                       facecolors=colour if "committed" in r["what"] else "none")
        labels = [ledger_label(r) for r in mine]
        labels = [f"{lab}  {ledger_tag(r)}" if labels.count(lab) > 1 else lab for lab, r in zip(labels, mine)]
        ax.set_yticks(range(len(mine)), labels, fontsize=8)
        ax.set_ylim(-0.7, len(mine) - 0.3)
        ax.set_title(head, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("acceptance length (tokens per round)")
    handles = [plt.Line2D([], [], marker="o", ls="-", color=c, label=name) for name, c in colours.items()]
    handles.append(plt.Line2D([], [], marker="o", ls="", markerfacecolor="none", color="black", label="live (hollow)"))
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 0.0), frameon=False)
    fig.tight_layout(rect=(0, 0.03 * (1 + len(handles) // 3), 1, 1))
    return fig


def plot_acceptance_vs_k(curves: Mapping[str, Mapping[int, float]], ax=None, title: str | None = None):
    """Acceptance length (accepted drafts + 1 bonus) against K, one line per label (``{label: {K: length}}``)."""
    fig, ax = _axes(ax, (6, 3.2))
    top = 1
    for label, points in curves.items():
        ks = sorted(points)
        ax.plot(ks, [points[k] for k in ks], marker="o", label=label)
        top = max([top] + ks)
    ax.plot([1, top], [2, top + 1], ls=":", color="#999", label="ceiling (all K accepted)")
    ax.set_xlabel("K (num_speculative_tokens)")
    ax.set_ylabel("acceptance length")
    ax.set_ylim(bottom=1)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig


def save_figure(fig, path, dpi: int = 120) -> Path:
    """Save ``fig`` beside the results: a relative ``path`` goes under ``$PEAGLE_RESULTS/figures`` (default
    ``results/figures``); no suffix means PNG. Creates the folders; returns the written path."""

    path = Path(path)
    if not path.is_absolute():
        path = results_dir() / "figures" / path
    if not path.suffix:
        path = path.with_suffix(".png")
    return write_figure(path, fig, dpi=dpi, bbox_inches="tight")
