"""Explanatory drawings (matplotlib, imported lazily): one decoding round, plain vs sequential vs parallel; the EAGLE
shift; the drafter's path from inputs to draft."""

from __future__ import annotations

from functools import partial


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


def _block(ax, x, y, text, color, w=2.2, h=0.62, **look):
    """A rounded box of ``w`` x ``h`` centred on (x, y), with its text; ``look``: ``pad`` (0.03), line style ``ls``
    ("-"), ``fontsize`` (9)."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle=f"round,pad={look.get('pad', 0.03)}", fc=color,
                                ec="black", lw=0.8, ls=look.get("ls", "-"), zorder=2))
    ax.text(x, y, text, ha="center", va="center", fontsize=look.get("fontsize", 9), zorder=3)


def _flow(ax, x0, y0, x1, y1, color="black", shrink=0):
    """An arrow from (x0, y0) to (x1, y1); ``shrink=None`` keeps matplotlib's default gap at both ends."""
    ends = {} if shrink is None else dict(shrinkA=shrink, shrinkB=shrink)
    ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->", color=color, lw=1, **ends), zorder=1)


def draw_eagle_shift(n: int = 4, k_fig: int = 4):
    """The EAGLE shift drawn for a context x_0..x_n and one round of K=``k_fig`` drafts: the target's tokens and
    taps, the drafter positions (token x_{t+1} with taps h_t), the mask slots 2..K and the drafts."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(14, 5.2))
    box = partial(_block, ax, w=0.88, h=0.64, pad=0.02)
    arrow = partial(_flow, ax, color="grey", shrink=None)

    for t in range(n + 1):  # the target over the context: token x_t in, taps h_t out
        box(t, 3, f"$x_{{{t}}}$", "white")
        box(t, 2, f"$h_{{{t}}}$", "#f4a259")
        arrow(t, 2.68, t, 2.32)
    box(n + 1, 3, f"$x_{{{n + 1}}}$: chosen\nfrom $h_{{{n}}}$", "white", ls="--", fontsize=8)
    arrow(n + 0.44, 2.15, n + 0.75, 2.68)
    for t in range(n + 1):  # drafter position t: token x_{t+1} (blue arrow) with the taps h_t (grey arrow)
        box(t, 0.9, f"emb($x_{{{t + 1}}}$)\n$h_{{{t}}}$", "#8cb369" if t == n else "#dde8cf")
        arrow(t + 0.7, 2.68, t + 0.2, 1.22, color="tab:blue")
        arrow(t, 1.68, t, 1.22)
    for j in range(2, k_fig + 1):  # round slots 2..K: the mask token and the shared learned vector
        box(n + j - 1, 0.9, "emb(MASK)\nmask_hidden", "#bfd7ea", fontsize=8)
    for j in range(1, k_fig + 1):  # round slot j drafts x_{n+j+1} at depth j-1
        box(n + j - 1, -0.2, f"draft {j}: $x_{{{n + j + 1}}}$?\nslot {j}, depth {j - 1}", "#fff3b0", fontsize=8)
        arrow(n + j - 1, 0.58, n + j - 1, 0.12)
    ax.text(-0.44, -0.2, f"blue: token $x_{{t+1}}$ into position t\ngrey: taps $h_t$ into position t\n"
            f"positions 0..{n - 1}: in the drafter's KV cache", va="center", fontsize=9, color="dimgrey")
    for y, label in [(3, "tokens"), (2, "target's taps\n(3 layers)"), (0.9, "drafter positions"), (-0.2, "drafts")]:
        ax.text(-0.7, y, label, ha="right", va="center", fontsize=10)
    ax.annotate("", (n + k_fig - 0.56, -0.78), (n - 0.44, -0.78), arrowprops=dict(arrowstyle="|-|", lw=1))
    ax.text(n + (k_fig - 1) / 2, -0.95, f"one parallel round: slots 1..{k_fig}, one drafter pass", ha="center",
            va="top", fontsize=9)
    ax.set_xticks(range(n + k_fig), [f"t={t}" for t in range(n + k_fig)])
    ax.set(xlim=(-2.2, n + k_fig - 0.45), ylim=(-1.3, 3.5), yticks=[],
           title="The EAGLE shift: drafter position t = [emb($x_{t+1}$), $h_t$]; "
                 f"round slot j drafts $x_{{n+j+1}}$ at depth j-1 (here n = {n})")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    plt.show()


_TARGET_C, _HEAD_C, _MASK_C, _LAYER_C = "#f4a259", "#dde8cf", "#bfd7ea", "#e8e0f0"


def _drafter_inputs(ax, H: int, tap_layers) -> None:
    """The lower half of :func:`draw_drafter_path`: slot 1's taps and token, and the stand-ins of slots 2..K."""
    for x, name, layer in zip((0.9, 2.5, 4.1), ("low", "mid", "high"), tap_layers):
        _block(ax, x, 0, f"$h_{{{name}}}$\nlayer {layer}, H", _TARGET_C, w=1.4, h=0.75)
        _flow(ax, x, 0.38, 2.5, 1.05)
    _block(ax, 2.5, 1.35, f"concat  (3H = {3 * H})", _TARGET_C, w=2.6)
    ax.text(3.3, -0.75, "round slot 1 and every context position\n(the EAGLE shift: token $x_{t+1}$ with taps $h_t$)",
            ha="center", va="top", fontsize=9.5)
    # (x, y, text, colour, width, height) of each box; (x0, y0, x1, y1) of each arrow: slot 1, then slots 2..K
    boxes = [(2.5, 2.5, f"fc: 3H → H ({H})", _HEAD_C, 2.6, 0.62), (6.0, 0, "token $x_{t+1}$", "white", 1.8, 0.62),
             (6.0, 1.35, "embedding row (H)\nthe target's table", _TARGET_C, 2.3, 0.75),
             (4.0, 3.8, "[emb, fc(taps)]  (2H)", _HEAD_C, 3.0, 0.62),
             (9.0, 0, "mask_hidden\n(3H, learned)", _MASK_C, 1.9, 0.75),
             (9.0, 2.5, "fc: 3H → H\n(the same fc)", _HEAD_C, 1.9, 0.75), (11.2, 0, "mask token", _MASK_C, 1.8, 0.62),
             (11.2, 1.35, "mask embedding row\n(H, learned)", _MASK_C, 2.2, 0.75),
             (10.1, 3.8, "[mask emb, fc(mask_hidden)]  (2H)", _MASK_C, 3.6, 0.62)]
    arrows = [(2.5, 1.66, 2.5, 2.19), (6.0, 0.31, 6.0, 0.97), (2.5, 2.81, 3.6, 3.49), (6.0, 1.73, 4.4, 3.49),
              (9.0, 0.38, 9.0, 2.12), (11.2, 0.31, 11.2, 0.97), (9.0, 2.88, 9.6, 3.49), (11.2, 1.73, 10.7, 3.49)]
    for x, y, text, color, w, h in boxes:
        _block(ax, x, y, text, color, w=w, h=h)
    for arrow in arrows:
        _flow(ax, *arrow)
    ax.text(10.1, -0.75, "round slots 2..K (P-EAGLE): in place of\n[emb, fc(taps)], the same in every mask slot",
            ha="center", va="top", fontsize=9.5)


def draw_drafter_path(H: int, tap_layers):
    """The P-EAGLE drafter, one position's path from inputs to draft: the taps through `fc`, the token's
    embedding, the two learned stand-ins of slots 2..K, the decoder layer, the final norm, `lm_head` and `d2t`."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(12, 8.2))
    _drafter_inputs(ax, H, tap_layers)
    _flow(ax, 4.0, 4.11, 5.6, 4.74)  # the shared layers, the same for every position
    _flow(ax, 10.1, 4.11, 8.6, 4.74)
    _block(ax, 7.1, 5.35, "one decoder layer:  attention input 2H (RMS norms: input_layernorm on the embedding,\n"
           "hidden_norm on the hidden), RoPE at each position, causal over all earlier positions;\n"
           "residual stream = the hidden (H); post-attention norm, SwiGLU MLP  →  prenorm state (H)", _LAYER_C,
           w=9.4, h=1.2)
    for y, text, color, w in ((6.7, "final norm (H)", _LAYER_C, 2.6),
                              (7.7, "lm_head: H → draft vocabulary ($V_d$ ids)", _HEAD_C, 4.4),
                              (8.7, "argmax, then d2t: target id = draft id + d2t[draft id]", _HEAD_C, 5.4),
                              (9.7, "draft j: a token id of the target", "#fff3b0", 4.0)):
        _flow(ax, 7.1, 5.95 if y == 6.7 else y - 0.69, 7.1, y - 0.31)  # from the block below
        _block(ax, 7.1, y, text, color, w=w)
    ax.text(9.3, 6.6, "EAGLE-3 instead drafts slots 2..K in K passes:\neach new slot holds the previous draft's\n"
            "embedding and the prenorm state above", ha="left", va="center", fontsize=8.5, color="dimgrey")
    for i, (color, label) in enumerate(((_TARGET_C, "from the target (frozen)"), (_HEAD_C, "the head's weights"),
                                        (_LAYER_C, "the head's layer and norm"),
                                        (_MASK_C, "P-EAGLE's learned stand-ins"))):
        ax.add_patch(FancyBboxPatch((0.2, 9.45 - 0.45 * i), 0.3, 0.25, boxstyle="round,pad=0.02", fc=color,
                                    ec="black", lw=0.6))
        ax.text(0.65, 9.57 - 0.45 * i, label, va="center", fontsize=9)
    ax.set(xlim=(-0.2, 12.6), ylim=(-1.5, 10.2), title="The drafter: one position's path, from inputs to draft")
    ax.axis("off")
    plt.tight_layout()
    plt.show()


def draw_verify_round(inputs: list[str], choices: list[str], accepted: int, start: int):
    """One verify step drawn from a real round: the target's pass over the last committed token and the K drafts
    (``inputs``, as text), its greedy choice after each row (``choices``, K + 1 of them), which drafts it accepts
    (the first ``accepted``), the bonus token, and the cache positions the roll-back drops. ``start``: the cache
    position of the last committed token."""
    import matplotlib.pyplot as plt

    k, dx = len(inputs) - 1, 1.5  # dx: the spacing of one position
    fig, ax = plt.subplots(figsize=(max(8.0, 1.45 * (k + 3)), 4.4))
    box = partial(_block, ax, w=1.3, h=0.56, pad=0.02, fontsize=8)
    for i, text in enumerate(inputs):  # row 1: what the verify pass reads, one cache position each
        kept = i <= accepted
        box(i * dx, 3, f"{'last' if i == 0 else f'draft {i}'}\n{text!r}", "white" if i == 0 else
            "#8cb369" if kept else "#dddddd", ls="-" if kept else "--")
        ax.text(i * dx, 3.42, f"pos {start + i}", ha="center", fontsize=7, color="dimgrey")
    for j, text in enumerate(choices):  # row 2: the target's argmax after row j, the check of draft j + 1
        box(j * dx, 1.7, f"choice[{j}]\n{text!r}", _TARGET_C if j <= accepted else "#f3f3f3")
        _flow(ax, j * dx, 2.7, j * dx, 2.0, color="grey", shrink=None)
        if j < k and j <= accepted:  # choice[j] against draft j + 1: equal (kept) or the first mismatch
            ok = j < accepted
            _flow(ax, j * dx + 0.4, 1.98, (j + 1) * dx - 0.4, 2.72, color="green" if ok else "crimson", shrink=None)
            ax.text((j + 0.5) * dx + 0.15, 2.3, "=" if ok else "≠", color="green" if ok else "crimson", fontsize=13,
                    ha="center", va="center")
    for i in range(accepted + 1):  # row 3: what the round commits: the accepted drafts, then the bonus
        bonus = i == accepted
        box(i * dx, 0.5, f"{'bonus' if bonus else f'draft {i + 1}'}\n{(choices[i] if bonus else inputs[i + 1])!r}",
            "#fff3b0" if bonus else "#8cb369")
    for y, label in ((3, "verify input"), (1.7, "target's\ngreedy choice"), (0.5, "committed")):
        ax.text(-0.9, y, label, ha="right", va="center", fontsize=10)
    if accepted < k:  # the roll-back: the rejected drafts' cache entries go
        ax.annotate("", ((k + 0.45) * dx, 0.5), ((accepted + 1) * dx - 0.65, 0.5),
                    arrowprops=dict(arrowstyle="|-|", lw=1, color="crimson"))
        ax.text((accepted + 1 + k) * dx / 2, 0.2, f"roll back: cache.crop({accepted - k}) drops position"
                f"{'s' if k - accepted > 1 else ''} {start + accepted + 1}" +
                (f"..{start + k}" if k - accepted > 1 else ""), ha="center", va="top", fontsize=9, color="crimson")
    ax.set(xlim=(-2.6, (k + 0.6) * dx), ylim=(-0.1, 3.6), xticks=[], yticks=[],
           title=f"One verify pass: {accepted} of {k} drafts accepted, {accepted + 1} tokens committed")
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    plt.show()
    return fig


def draw_training_depths(depths: int = 4):
    """What each training depth of one anchor ``a`` reads, EAGLE-3 (training-time test) beside P-EAGLE: the token
    input, the hidden input and the label of depth d = 0..``depths``-1 at position a + d."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 0.95 * depths + 1.3), sharey=True)
    box = _block
    for ax, (name, mode) in zip(axes, (("EAGLE-3: training-time test (a pass per depth)", "ttt"),
                                       ("P-EAGLE: mask slots (every depth in one pass)", "mask"))):
        for d in range(depths):
            y = depths - 1 - d
            tok = f"emb($x_{{a+{d + 1}}}$)" if d == 0 or mode == "ttt" else "emb(MASK)"
            hid = "$h_a$ (target taps)" if d == 0 else ("own state of\ndepth " + str(d - 1) if mode == "ttt"
                                                        else "mask_hidden")
            colour = _HEAD_C if d == 0 else (_LAYER_C if mode == "ttt" else _MASK_C)
            ax.text(-0.2, y, f"depth {d}\npos a+{d}", ha="right", va="center", fontsize=9)
            box(ax, 0.9, y, tok, "white" if d == 0 or mode == "ttt" else _MASK_C, w=1.5, h=0.6, fontsize=8)
            box(ax, 2.7, y, hid, colour, w=1.7, h=0.6, fontsize=8)
            box(ax, 4.6, y, f"predicts $y_{{a+{d + 1}}}$\n(slot {d + 1})", "#fff3b0", w=1.6, h=0.6, fontsize=8)
            _flow(ax, 3.6, y, 3.78, y, shrink=0)
            if mode == "ttt" and d > 0:  # the state fed down from the depth before
                _flow(ax, 4.0, y + 0.7, 3.2, y + 0.3, color="tab:purple", shrink=0)
        ax.set(xlim=(-1.2, 5.6), ylim=(-0.6, depths - 0.4), xticks=[], yticks=[])
        ax.set_title(name, fontsize=10)
        for side in ("left", "right", "top", "bottom"):
            ax.spines[side].set_visible(False)
    fig.suptitle("One anchor a, depth by depth: token input, hidden input, label", fontsize=11)
    fig.tight_layout()
    plt.show()
    return fig
