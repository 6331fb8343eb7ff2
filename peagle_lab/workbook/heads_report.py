"""The shipped heads' committed figures drawn (chapter 04): the held-out comparison beside the live check, the
learning curves and the deeper heads. The chapter computes every printed figure in view."""

from __future__ import annotations

NAMES = {"parallel": "P-EAGLE (parallel)", "sequential": "EAGLE-3 (sequential)"}


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
