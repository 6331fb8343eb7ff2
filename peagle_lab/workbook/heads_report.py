"""The shipped heads' committed figures (chapter 04): the held-out comparison's rows, the live check read against
it, the learning curves and the deeper heads. Formatting only."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from .. import settings
from .notebook import committed_label

NAMES = {"parallel": "P-EAGLE (parallel)", "sequential": "EAGLE-3 (sequential)"}


def heldout_row(compare: dict, head_dir: Path, root: Path = settings.REPO_ROOT) -> dict | None:
    """The comparison's last row for the head in `head_dir`, or None."""
    rel = head_dir.relative_to(root).as_posix()
    return next((r for r in reversed(compare["rows"]) if r["path"] == rel), None)


def heldout_heading(compare: dict) -> str:
    """The comparison's heading line: prompts x tokens, prompts per kind, dtype and host."""
    kinds = Counter(i.rsplit("-", 1)[0] for i in compare["prompts"])  # a prompt's id is its kind and a number
    return (f"\nheld-out comparison ({len(compare['prompts'])} prompts x {compare.get('max_new_tokens')} tokens: "
            + ", ".join(f"{n} {kind}" for kind, n in kinds.most_common())
            + f"; {compare['dtype']}, host {compare['host']}):")


def plot_heldout_and_live(rows: dict, live: dict, ks: list, titles: tuple[str, str]) -> None:
    """Plots AL against K: the committed held-out rows (kind -> row or None) left, this run's `live` right."""
    import matplotlib.pyplot as plt  # on first plot: importing the package creates no matplotlib cache

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for kind, row in rows.items():
        if row:
            axes[0].plot([int(k) for k in row["acceptance_length"]], list(row["acceptance_length"].values()),
                         marker="o", label=NAMES[kind])
        axes[1].plot(ks, [live[kind]["acceptance_length"][k] for k in ks], marker="o", label=NAMES[kind])
    for ax, title in zip(axes, titles):
        ax.set_title(title)
    for ax in axes:
        ax.set(xlabel="K (draft tokens per round)", ylabel="acceptance length (incl. bonus token)")
        ax.grid(alpha=0.3)
        ax.legend()
    plt.tight_layout()
    plt.show()


def leader(gap: float, tie: float) -> str:
    """Who accepts more, from the gap EAGLE-3 minus P-EAGLE: a gap under `tie` is a tie."""
    return "a tie" if abs(gap) < tie else f"{'EAGLE-3' if gap > 0 else 'P-EAGLE'} ahead"


def held_out_gap(p_row: dict | None, s_row: dict | None, k: int, on_smollm2: bool) -> tuple[float, str] | None:
    """(EAGLE-3 minus P-EAGLE on the held-out prompts at K=k, where it comes from), or None. The recorded gap where
    the file has that K; at K=1, where a round drafts slot 1 only, the gap AL = 1 + p1 predicts from each head's
    slot-1 rate at the file's smallest K; none at another K, nor on another target (the file holds SmolLM2's heads)."""
    if not (p_row and s_row and on_smollm2):
        return None
    if str(k) in p_row["acceptance_length"]:
        return s_row["acceptance_length"][str(k)] - p_row["acceptance_length"][str(k)], f"held-out K={k}"
    if k == 1:
        k0 = min(p_row["per_position"], key=int)
        return s_row["per_position"][k0][0] - p_row["per_position"][k0][0], f"held-out slot-1 rates (at K={k0}) predict"
    return None


def against_heldout(live_gap: float, k: int, p_row: dict | None, s_row: dict | None, tie: float,
                    on_smollm2: bool) -> str:
    """The tail of a live line: the held-out leader at K=k and whether the live gap is in the same order."""
    held = held_out_gap(p_row, s_row, k, on_smollm2)
    if held:
        gap, source = held
        order = "" if min(abs(gap), abs(live_gap)) < tie else (
            ", the same order" if (gap > 0) == (live_gap > 0) else ", the reverse order")
        return f"; {source}: {leader(gap, tie)} (gap {gap:+.2f}){order}"
    return "; no held-out figure at this K" if p_row and s_row and on_smollm2 else ""


def read_curve(path: Path) -> dict:
    """A committed learning-curve file, or one with no points where there is none."""
    return json.loads(path.read_text()) if path.is_file() else {"points": []}


def print_curve_sources(docs: list[dict], host: str | None) -> None:
    """Prints the curves' label line and, per panel, the prompts every snapshot was scored on."""
    curve_dtype = "/".join(sorted({str(d.get("dtype") or "not recorded") for d in docs if d["points"]}))
    print(committed_label("The learning curves", host and f"{host}, target dtype {curve_dtype} in the curve files"))
    for d, panel in zip(docs, ("left", "right")):
        if d["points"]:
            print(f"{panel} panel: every snapshot scored at K={d['k']} on {d['val_prompts']} held-out prompts x "
                  f"{d['max_new_tokens']} new tokens (not section 1's prompts)")


def _plot_runs(ax, points: list[dict], key: str, title: str) -> None:
    for name in dict.fromkeys(p[key] for p in points):
        ps = sorted((p for p in points if p[key] == name), key=lambda p: p["tokens_seen"])
        ax.plot([p["tokens_seen"] for p in ps], [p["acceptance_length"] for p in ps], "o-", label=name)
    ax.set(xscale="log", xlabel="training tokens seen", ylabel="held-out acceptance length, K=7", title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot_curves(curve: list[dict], deeper: list[dict]) -> None:
    """Plots AL against tokens seen: the long runs' snapshots left, the 1, 2 and 4-layer heads right."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.2), sharey=True)
    _plot_runs(axes[0], curve, "mode", "long runs' snapshots (P-EAGLE = parallel, EAGLE-3 = sequential)")
    _plot_runs(axes[1], deeper, "run", "1, 2 and 4 layers, same wall time (exp-L<layers>)")
    plt.tight_layout()
    plt.show()


def print_snapshots(curve: list[dict], deeper: list[dict]) -> None:
    """Prints each long run's AL at every snapshot, then each deeper head's last snapshot."""
    for mode, name in (("parallel", "P-EAGLE"), ("sequential", "EAGLE-3")):  # each long run, every snapshot
        ps = sorted((p for p in curve if p["mode"] == mode), key=lambda p: p["tokens_seen"])
        if ps:
            a, b = ps[0], ps[-1]
            print(f"{name} ({a['run']} to {b['run']}, {b['tokens_seen'] / a['tokens_seen']:.0f}x the tokens), AL at "
                  f"each snapshot (thousand tokens seen): " + ", ".join(f"{p['acceptance_length']:.3f} "
                                                                       f"({p['tokens_seen'] / 1e3:,.0f}k)" for p in ps))
    for name in dict.fromkeys(p["run"] for p in deeper):  # each deeper head at its last snapshot
        last = max((p for p in deeper if p["run"] == name), key=lambda p: p["tokens_seen"])
        print(f"{name}: last snapshot at {last['tokens_seen']:>9,} tokens, AL {last['acceptance_length']:.3f}")


def print_run_ends(record: dict, compare: dict, p_row: dict | None) -> None:
    """Prints exp-L1's run end and the deeper heads' ends on the comparison prompts, beside the shipped head's."""
    fresh = next((h for h in record.get("history", []) if h["head"].endswith("-fresh")), None)
    ends = {r["path"].rsplit("/", 1)[-1]: r["acceptance_length"]["7"] for r in compare["rows"]}
    if fresh and "peagle-L1" in ends and p_row:
        print(f"\nexp-L1's run ({fresh['head']}) ended at {fresh['tokens_seen']:,} tokens, after its last snapshot; "
              f"on section 1's comparison prompts at K=7 it scores {ends['peagle-L1']:.3f} ("
              + ", ".join(f"exp-L{n} {ends[f'peagle-L{n}']:.3f}" for n in (2, 4) if f"peagle-L{n}" in ends)
              + f" at their runs' end), and {p_row['acceptance_length']['7']:.3f} once continued on fresh records (the "
              f"shipped P-EAGLE head)")
