"""Explanatory drawings (matplotlib, imported lazily): one decoding round, plain vs sequential vs parallel."""

from __future__ import annotations


def _box(ax, x, y, w, h, text, color, fontsize=9):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.005,rounding_size=0.04", fc=color,
                                ec="black", lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize)


def draw_drafting_schemes(k: int = 4, target_cost: float = 1.0, drafter_cost: float = 0.18,
                          verify_cost: float = 1.3):
    """One decoding round on a time axis: plain decoding, a sequential drafter (K passes), a parallel drafter
    (1 pass over K slots). Costs are in units of one target forward and only illustrative."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 4.6))
    lanes = [("Plain decoding\n(target only)", 2.6), ("EAGLE-3\nsequential drafter", 1.45),
             ("P-EAGLE\nparallel drafter", 0.3)]
    h = 0.75
    tgt, drf, msk = "#f4a259", "#8cb369", "#bfd7ea"
    end = {}

    y = lanes[0][1]  # plain decoding: K + 1 target passes, one token each
    for j in range(k + 1):
        _box(ax, j * target_cost, y, target_cost * 0.96, h, f"target\n→ t{j + 1}", tgt)
    end[0] = (k + 1) * target_cost

    y, x = lanes[1][1], 0.0  # sequential: K drafter passes, each fed the token drafted before
    for j in range(k):
        _box(ax, x, y, drafter_cost * 0.92, h, f"D\nd{j + 1}", drf, fontsize=8)
        x += drafter_cost
    ax.text(x / 2, y - 0.08, f"{k} drafter passes\n(each reads the draft before)", ha="center", va="top", fontsize=7)
    _box(ax, x + 0.05, y, verify_cost, h, f"target verifies\nd1..d{k} in 1 pass", tgt)
    end[1] = x + 0.05 + verify_cost

    y = lanes[2][1]  # parallel: one drafter pass over K slots (1 real token + K-1 mask slots)
    x = drafter_cost * 1.3  # one pass over K positions costs a little more than one pass over 1
    _box(ax, 0, y, x * 0.95, h, "", drf)
    sh = (h - 0.08) / k
    for j in range(k):  # the K slots, drawn stacked: they are computed together
        _box(ax, 0.025, y + 0.04 + (k - 1 - j) * sh, x * 0.95 - 0.05, sh * 0.85, "tok" if j == 0 else "M",
             "white" if j == 0 else msk, fontsize=6)
    ax.text(0, y - 0.08, f"1 drafter pass over {k} slots:\ntoken+taps, then {k - 1} x (MASK + mask_hidden)",
            ha="left", va="top", fontsize=7)
    _box(ax, x + 0.05, y, verify_cost, h, f"target verifies\nd1..d{k} in 1 pass", tgt)
    end[2] = x + 0.05 + verify_cost

    for i, (name, y) in enumerate(lanes):
        ax.text(-0.15, y + h / 2, name, ha="right", va="center", fontsize=10)
        ax.plot([end[i], end[i]], [y - 0.1, y + h + 0.1], color="crimson", lw=1.5)
    ax.text(end[0], lanes[0][1] + h + 0.15, f"{k + 1} tokens", ha="right", fontsize=8, color="crimson")
    for i in (1, 2):
        ax.text(end[i] + 0.08, lanes[i][1] + h / 2, f"1 to {k + 1} tokens\n(accepted drafts + 1)", va="center",
                fontsize=8, color="crimson")
    ax.set_xlim(-2.2, (k + 1) * target_cost + 0.2)  # the room left of 0 holds the lane names
    ax.set_xticks([j * target_cost for j in range(k + 2)], [str(j) for j in range(k + 2)])  # time starts at 0
    ax.spines["bottom"].set_bounds(0, (k + 1) * target_cost)
    ax.set_ylim(-0.35, 3.6)
    ax.set_yticks([])
    ax.set_xlabel("time (units of one target forward; illustrative)")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"One decoding round with K = {k} draft tokens", fontsize=11)
    fig.tight_layout()
    return fig
