"""The benchmark's figures: drafting cost, speed-up and acceptance length vs K, one round split, the break-even
picture. Each carries the hardware and load of the run in its subtitle and is saved as PNG beside the results.
matplotlib is imported inside the functions: it is an optional package, needed only to draw."""

from __future__ import annotations

from pathlib import Path

from ..atomic import write_figure
from .suites import suite_of
from .summary import break_even_inputs, speedup_model


FAMILY_STYLE = {"p-eagle": ("tab:blue", "o"), "eagle3": ("tab:orange", "s"), "prompt-lookup": ("tab:green", "^"),
                "assisted": ("tab:purple", "D"), "hf-greedy": ("tab:gray", None), "plain": ("black", None),
                "oracle": ("tab:red", "*"), "oracle-sequential": ("tab:brown", "P")}
FAMILIES = ("p-eagle", "eagle3", "oracle", "oracle-sequential", "prompt-lookup", "assisted")


def _prompts_title(e2e: dict) -> str:
    c = e2e["config"]
    return f"{c['n_prompts']} {c.get('prompts') or 'HumanEval'} prompts ({suite_of(e2e)} suite)"


def _subtitle(env: dict) -> str:
    load = env.get("loadavg_start")
    return (f"{env.get('hardware')} · {env.get('dtype')} · torch {env.get('torch')} · "
            f"load {load[0] if load else '?'}→{(env.get('loadavg_end') or ['?'])[0]}")


def _finish_figure(fig, env: dict, path=None):
    """Every benchmark figure: hardware/load subtitle, tight layout, saved as PNG when ``path`` is given."""
    fig.suptitle(_subtitle(env), fontsize=8)
    fig.tight_layout()
    if path:
        write_figure(path, fig, dpi=110)
    return fig


def plot_drafting_cost(dc: dict, path=None):
    """Per-round drafting latency vs K (parallel, sequential; target verification for scale) and the ratio."""
    import matplotlib.pyplot as plt

    rows = dc["rows"]
    ks = [r["k"] for r in rows]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode, color, marker in (("parallel", "tab:blue", "o"), ("sequential", "tab:orange", "s")):
        med = [r[f"{mode}_ms"] for r in rows]
        iqr = [r[f"{mode}_iqr_ms"] / 2 for r in rows]
        label = "parallel drafting (P-EAGLE's way): 1 pass" if mode == "parallel" else \
            "sequential drafting (EAGLE-3's way): K passes"
        ax.errorbar(ks, med, yerr=iqr, color=color, marker=marker, capsize=3, label=label)
    if rows and rows[0].get("verify_ms") is not None:
        ax.plot(ks, [r["verify_ms"] for r in rows], color="gray", ls="--", label="target: verify K+1 tokens")
    if dc.get("target_step_ms"):
        ax.axhline(dc["target_step_ms"], color="black", ls=":", lw=1, label="target: one decode step")
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel("latency per round (ms, median; bars = IQR/2)")
    ax.set_title("Drafting cost per round")
    ax.legend(fontsize=8)
    ax.set_ylim(bottom=0)
    ratio = [r["ratio_seq_over_par"] for r in rows]
    ax2.plot(ks, ratio, marker="o", color="tab:red", label="sequential / parallel")
    ax2.plot(ks, ks, ls=":", color="gray", label="y = K (K passes against one, equal cost per pass)")
    ax2.set_xlabel("K")
    ax2.set_ylabel("latency ratio")
    ax2.set_title("How much cheaper parallel drafting is")
    ax2.legend(fontsize=8)
    ax2.set_ylim(bottom=0)
    return _finish_figure(fig, dc["env"], path)


def _family_rows(e2e, family):
    return sorted([r for r in e2e["methods"] if r["family"] == family and r["k"] is not None], key=lambda r: r["k"])


def plot_speedup(e2e: dict, path=None):
    """Measured speed-up vs K per method (solid) and the ideal speed-up from AL and measured costs (dashed)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for fam in FAMILIES:
        rows = _family_rows(e2e, fam)
        if not rows:
            continue
        color, marker = FAMILY_STYLE[fam]
        ks = [r["k"] for r in rows]
        yerr = [(r["speedup_iqr"] or 0) / 2 for r in rows]
        ax.errorbar(ks, [r["speedup"] for r in rows], yerr=yerr, color=color, marker=marker, capsize=3,
                    label=f"{fam} (measured)")
        if rows[0].get("ideal_speedup") is not None and len(rows) > 1:  # a single K draws no line: no entry
            ax.plot(ks, [r["ideal_speedup"] for r in rows], color=color, ls="--", lw=1, label=f"{fam} (ideal)")
    ax.axhline(1.0, color="black", lw=1, label="plain greedy (ours) = 1")
    hf = next((r for r in e2e["methods"] if r["family"] == "hf-greedy"), None)
    if hf:
        ax.axhline(hf["speedup"], color="gray", ls=":", label=f"transformers generate greedy ({hf['speedup']:.2f})")
    ax.set_xlabel("K (draft tokens per round)")
    ax.set_ylabel("speed-up vs plain greedy (tokens/s ratio, same run)")
    ax.set_title(f"End to end: {_prompts_title(e2e)}, {e2e['config']['max_new_tokens']} new tokens, batch 1",
                 fontsize=9)
    ax.legend(fontsize=7)
    ax.set_ylim(bottom=0)
    return _finish_figure(fig, e2e["env"], path)


def plot_acceptance(e2e: dict, path=None):
    """Acceptance length (accepted drafts per round + 1) vs K."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for fam in FAMILIES:
        rows = _family_rows(e2e, fam)
        if rows:
            color, marker = FAMILY_STYLE[fam]
            twin = fam == "oracle-sequential"  # the oracle's draws again: hollow and dashed, so both stay visible
            ax.plot([r["k"] for r in rows], [r["acceptance_length"] for r in rows], color=color, marker=marker,
                    ls="--" if twin else "-", markersize=11 if twin else 6, markerfacecolor="none" if twin else color,
                    label=fam + (" (tokens per target forward)" if fam in ("prompt-lookup", "assisted") else "")
                    + (" (the oracle's draws, K passes)" if twin else ""))
    ks = sorted({r["k"] for r in e2e["methods"] if r["k"]})
    measured = [r["acceptance_length"] for r in e2e["methods"] if r["k"]]
    top = max(measured) * 1.25 + 0.2 if measured else None  # the measured ALs fill the plot
    if ks:
        above = [k for k in ks if k + 1 > top] if top is not None else []  # where the bound leaves the frame
        ax.plot(ks, [k + 1 for k in ks], ls=":", color="gray",
                label="upper bound K+1" + (f" (above the frame from K={above[0]}: {above[0] + 1} ... {ks[-1] + 1})"
                                           if above else ""))
    if top is not None:
        ax.set_ylim(0.9, top)
    ax.axhline(1.0, color="black", lw=1)
    ax.set_xlabel("K")
    ax.set_ylabel("acceptance length")
    ax.set_title(f"Acceptance length vs K: {_prompts_title(e2e)}", fontsize=9)
    ax.legend(fontsize=8)
    return _finish_figure(fig, e2e["env"], path)


def plot_round_profile(e2e: dict, path=None):
    """Where a round's time goes: drafting, verification, acceptance + cache rollback, Python overhead."""
    import matplotlib.pyplot as plt

    prof = e2e["round_profile"]
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(prof), 2) + 2.0))
    parts = [("draft_ms", "drafting", "tab:blue"), ("verify_ms", "verification (target)", "tab:gray"),
             ("accept_rollback_ms", "acceptance + cache rollback", "tab:green"),
             ("python_overhead_ms", "Python overhead", "tab:red")]
    names = [p["method"] for p in prof]
    left = [0.0] * len(prof)
    for key, label, color in parts:
        vals = [max(p.get(key) or 0.0, 0.0) for p in prof]
        ax.barh(names, vals, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per round (medians over prompts)")
    ax.set_title("One speculative round, split")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, frameon=False)
    return _finish_figure(fig, e2e["env"], path)


MERGE_STEPS = 0.05  # rounds closer than this (in decode steps) draw as one line: apart they would overlap


def plot_break_even(curves: list[dict], points: list[dict] = (), k: int = 7, path=None, env: dict | None = None,
                    mark_al: tuple[float, str] | None = None, merge_steps: float = MERGE_STEPS):
    """Speed-up against acceptance length, one line per round cost, with measured heads as points.

    ``curves``: ``{"label", "verify_ratio", "draft_ratio"}`` (round cost in decode steps), optionally ``"style"``
    (matplotlib line keywords); curves whose rounds agree to ``merge_steps`` share one line and one legend entry
    (``merge_steps=0``: every curve its own line).
    ``points``: ``{"label", "acceptance_length", "speedup"}``. ``mark_al``: ``(AL, label)`` drawn as a vertical line.
    Above 1 speculative decoding pays; each line crosses 1 at AL = round cost, its break-even. The x axis runs to
    K+1, the most a round can commit.
    """
    import matplotlib.pyplot as plt

    merged: list[dict] = []  # one line per distinct round cost, drawn at its first curve's cost
    for c in curves:
        cost = c["verify_ratio"] + c.get("draft_ratio", 0.0)
        same = next((m for m in merged if merge_steps and abs(m["costs"][0] - cost) <= merge_steps), None)
        if same is None:
            merged.append({"costs": [cost], "labels": [c["label"]], "style": c.get("style")})
        else:
            same["costs"].append(cost)
            same["labels"].append(c["label"])
            same["style"] = same["style"] or c.get("style")
    fig, ax = plt.subplots(figsize=(8, 4.8))
    xmax = float(k + 1)
    al = [1.0 + i * ((xmax - 1.0) / 100) for i in range(101)]
    colors = iter(["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"])
    for m in merged:
        style = m["style"] or {"color": next(colors)}
        lo, hi = f"{min(m['costs']):.2f}", f"{max(m['costs']):.2f}"
        cost = lo if lo == hi else f"{lo}-{hi}"
        runs = "\n".join(f"  {x}" for x in m["labels"])  # one legend line per run
        label = (f"round {cost} steps: " + m["labels"][0] if len(m["labels"]) == 1 else
                 f"round {cost} steps, {len(m['labels'])} runs on one line:\n" + runs)
        ys = [speedup_model(a, m["costs"][0]) for a in al]
        (line,) = ax.plot(al, ys, **style, label=label)
        ax.annotate(f"{cost} steps" + (f" ({len(m['labels'])} runs)" if len(m["labels"]) > 1 else ""),
                    (al[-1], ys[-1]), xytext=(-4, 4), textcoords="offset points", ha="right", va="bottom",
                    fontsize=8, color=line.get_color())  # each line named where it ends
    for p, marker in zip(points, "osD^v<>P*"):
        ax.scatter([p["acceptance_length"]], [p["speedup"]], marker=marker, s=55, zorder=3, color="black",
                   label=f"measured: {p['label']}, AL {p['acceptance_length']:.2f}, {p['speedup']:.2f}x")
    if mark_al is not None:
        ax.axvline(mark_al[0], color="grey", lw=1, ls="-.", label=mark_al[1])
    ax.axhline(1.0, color="black", lw=1, ls=":")
    ax.set_xlabel(f"acceptance length (tokens per round; at most K+1 = {k + 1})")
    ax.set_ylabel("decode speed-up over plain decoding")
    ax.set_title(f"What it takes: speed-up vs acceptance length at K={k}")
    ax.legend(fontsize=7, loc="upper left")
    ax.set_xlim(1, xmax)
    ax.set_ylim(0, None)
    ax.grid(alpha=0.3)
    if env is not None:
        return _finish_figure(fig, env, path)
    fig.tight_layout()
    if path:
        write_figure(path, fig, dpi=110)
    return fig


def draw_plots(results: dict, out_dir, suffix: str = "") -> dict[str, Path]:
    """Draw every plot the results allow into ``out_dir`` as PNG; returns ``{name: path}``. ``suffix`` goes before
    the ``.png`` of the end-to-end plots (one set per suite)."""
    import matplotlib

    if "inline" not in matplotlib.get_backend().lower() and "ipykernel" not in matplotlib.get_backend():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    files = {}
    jobs = []
    if results.get("drafting_cost"):
        jobs.append(("drafting_latency.png", plot_drafting_cost, results["drafting_cost"]))
    if results.get("end_to_end"):
        e2e = results["end_to_end"]
        jobs += [(f"speedup_vs_k{suffix}.png", plot_speedup, e2e),
                 (f"acceptance_length_vs_k{suffix}.png", plot_acceptance, e2e)]
        if e2e.get("round_profile"):
            jobs.append((f"round_profile{suffix}.png", plot_round_profile, e2e))
    if results.get("drafting_cost") and any(r.get("verify_ratio") for r in results["drafting_cost"]["rows"]):
        k = 7 if any(r["k"] == 7 for r in results["drafting_cost"]["rows"]) else results["drafting_cost"]["rows"][-1]["k"]
        curves, points = break_even_inputs(results, k)
        curves.append({"label": "GPU-like (verify ~1.05 steps)", "verify_ratio": 1.05, "draft_ratio": 0.05})
        env = results["drafting_cost"]["env"]
        jobs.append(("break_even.png", lambda data, path: plot_break_even(curves, points, k, path, env), None))
    for name, fn, data in jobs:
        fig = fn(data, out / name)
        plt.close(fig)
        files[name] = out / name
    return files
