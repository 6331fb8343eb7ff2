# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.7
#   kernelspec:
#     display_name: Python (peagle-lab)
#     language: python
#     name: peagle-lab
# ---

# %% [markdown]
# # 04 · Scale and acceptance
#
# **Goal:** learn what a head's acceptance length is made of and what raises it: training tokens, head depth and
# prompt layout, and how far this CPU-trained head stays below the paper's.
#
# *Committed* figures are full-size results read from files under `data/`, the same on every rerun; *live* figures
# are measured in this run, on a few prompts. Compare two acceptance lengths only where the prompt set, the number of
# new tokens, K and the dtype agree.
#
# <details><summary>Where the figures come from</summary>
#
# All committed figures were measured on the reference CPU `cpu-epyc-avx512bf16-2c`. Each is labelled with the
# target's dtype as its own file records it: bfloat16 for the held-out comparison and the recipe runs, float32 for the
# studies of notebooks 02-03 that section 5 takes its noise from; the learning-curve files do not record it. The live
# figures (section 1's HumanEval check, section 3) are measured in this execution (float32 on a CPU). 07's appendix,
# the acceptance ledger, lists every acceptance length of the course with its prompt set, new tokens, K and dtype.
#
# </details>
#
# **Terms.** The *acceptance length* (AL) is the tokens committed per verification round, the bonus token included.
# A round's slots are j = 1..K, and *draft j* is the token drafted in slot j; training counts *depths* from 0, so
# slot j is depth j-1. A slot's *rate* is the share of the rounds reaching it in which it was accepted.
#
# The plan:
#
# 1. **The shipped heads**: their training records, their held-out acceptance, and a live check.
# 2. **What training at scale buys**: acceptance against tokens seen; accuracy per depth for 1, 2 and 4 layers.
# 3. **Your own model and its chat template** (question 1), and what a template mismatch costs.
# 4. **Past one machine**: the same trainer on several GPUs.
# 5. **Why is my acceptance length below the paper's?** (question 3): the recipe runs against their noise.

# %% tags=["nbval-ignore-output"]
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import json

import matplotlib.pyplot as plt
import torch
from IPython.display import Markdown, display

from peagle_lab import models, precision, settings
from peagle_lab.workbook import ledger
from peagle_lab.workbook.notebook import committed_label

model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))
RECIPE_DIR = settings.data_dir() / "recipe"
HOST = max((p.parent.name for p in RECIPE_DIR.glob("*/curve.json")), default=None)  # the last host with a curve
# the committed files' host and the dtype the target ran in there (the held-out comparison records it)
REF = f"{HOST} in {json.loads((RECIPE_DIR / HOST / 'heldout_compare.json').read_text())['dtype']}" if HOST else None


def target_dtypes(runs):
    """The target's dtype as committed runs record it (their ``machine`` field), or 'not recorded'."""
    return "/".join(sorted({str((r.get("machine") or {}).get("target_dtype") or "not recorded") for r in runs}))


book = ledger.Logbook("04", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(model.dtype))  # live rows

# %% [markdown]
# ## 1 · The shipped heads
#
# The course ships two 1-layer heads for SmolLM2-135M, both trained for K=8: a P-EAGLE head that drafts in parallel,
# and an EAGLE-3-style head that drafts sequentially, trained with the *training-time test* of notebook 03.
#
# The cell prints each head's training record, then the committed held-out comparison, with each acceptance length
# rebuilt from its slot rates: slot j counts only in a round that accepted every slot before it, so
# `AL = 1 + p1 + p1·p2 + ... + p1···pK`, each term the share of rounds that accepted that slot.
#
# <details><summary>How the heads were trained</summary>
#
# The heads are listed in `drafter/heads.py` (`SHIPPED`). The training-time test unrolls the EAGLE-3 head as at
# inference but teacher forced: each depth is fed the data's next token (not the head's guess) and the head's own
# hidden state from the depth before.
#
# Each head was trained in several runs, each continuing the one before (`--init-from`; commands in each head's
# `TRAINING.md`); the cell prints the last run and the **cumulative** total. The last runs had the same budget and
# records: about 4,000 s each (3,999 s printed), with 2.72M and 2.76M tokens seen, on records 6000:12000 of the
# 5.85M-token mix. The earlier runs differ: P-EAGLE's first run saw records 0:6000 of that mix, EAGLE-3's first two the
# 1M-token mix of notebook 03.
#
# </details>

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter import PEagleConfig
from peagle_lab.drafter.heads import SHIPPED
from peagle_lab.experiments import studies
from peagle_lab.workbook import heads_report

records_ = {kind: json.loads((path / "training.json").read_text()) for kind, path in SHIPPED.items()}
heads_report.print_training_records(records_, SHIPPED)  # config, last run and cumulative budget of each head

# the committed held-out comparison: both heads on the same held-out prompts, which no head trained on
compare = json.loads((RECIPE_DIR / HOST / "heldout_compare.json").read_text()) if HOST else {"rows": []}
P, S = (heads_report.heldout_row(compare, SHIPPED[kind]) for kind in ("parallel", "sequential"))
N_PROMPTS, N_NEW = len(compare.get("prompts", [])), compare.get("max_new_tokens")
TIE = studies.largest_seed_spread()  # a smaller gap is read as a tie: the largest seed spread of 02's and 03's studies
if P and S:
    print(heads_report.heldout_heading(compare))
    for k in P["acceptance_length"]:
        p, s = P["acceptance_length"][k], S["acceptance_length"][k]
        verdict = "a tie" if abs(s - p) < TIE else f"{'EAGLE-3' if s > p else 'P-EAGLE'} accepts more per round"
        print(f"  K={k}: P-EAGLE {p:.3f}, EAGLE-3 {s:.3f}, gap {s - p:+.3f}: {verdict}")
    # each slot's rate with the rounds that reached it, then AL = 1 + p1 + p1·p2 + ... rebuilt from the rates
    heads_report.print_slot_rates({"P-EAGLE": P, "EAGLE-3": S}, N_PROMPTS, N_NEW)

# %% [markdown]
# Now a live check on other prompts: each head drafts in its own mode at a few K on HumanEval prompts, greedy,
# and every output is compared with plain greedy decoding.

# %% tags=["nbval-ignore-output"]
from peagle_lab.prompts import humaneval_prompts
from peagle_lab.training import EvalSettings, ensure_heads, evaluate_head

# a missing head is made (one trainer at a time, no head beside it) before both are loaded
made = ensure_heads(SHIPPED, model, tokenizer, TARGET)
heads = {kind: h for kind, (h, _) in made.items()}
head_names = {kind: str(info["source"]).rstrip("/").split("/")[-1] for kind, (_, info) in made.items()}
KS = settings.pick([1, 3, 7], [1, 7])  # 3 and 7 as in the held-out comparison
prompts = humaneval_prompts(settings.pick(2, 1))
MAX_NEW = settings.pick(48, 24)
reference = {}
live = {kind: evaluate_head(model, tokenizer, head, prompts, EvalSettings(ks=KS, max_new_tokens=MAX_NEW),
                            reference=reference, progress=False) for kind, head in heads.items()}
for kind, ev in live.items():
    print(f"{kind:10s} " + "  ".join(f"K={k}: {v:.2f} ({ev['rounds'][k]} rounds)" for k, v in ev["acceptance_length"].items()))
    for k in KS:  # a row of the acceptance ledger (07's appendix)
        book.add(f"live K sweep, {len(prompts)} HumanEval prompt(s)", head_names[kind], prompt_set="code: HumanEval",
                 prompts=len(prompts), new_tokens=MAX_NEW, k=k, rounds=ev["rounds"][k],
                 acceptance_length=ev["acceptance_length"][k])

# %% tags=["nbval-check-output"]
print("every speculative output identical to plain greedy:", all(ev["lossless"] for ev in live.values()))

# %% tags=["nbval-ignore-output"]
from peagle_lab.workbook import report

heads_report.plot_heldout_and_live({"parallel": P, "sequential": S}, live, KS, (
    f"committed ({REF}): {N_PROMPTS} held-out prompts, {N_NEW} new tokens",
    f"this run ({precision.dtype_name(model.dtype)}): {len(prompts)} HumanEval prompt(s), {MAX_NEW} new tokens"))

# the live check: which head accepts more at each K (a gap under TIE is a tie), and (on SmolLM2) is it the one the
# held-out prompts put ahead?
for k in KS:
    p, s = (live[kind]["acceptance_length"][k] for kind in ("parallel", "sequential"))
    print(f"this run, K={k}: P-EAGLE {p:.2f}, EAGLE-3 {s:.2f}, gap {s - p:+.2f}: {heads_report.leader(s - p, TIE)}"
          + heads_report.against_heldout(s - p, k, P, S, TIE, models.is_default_target()))

report.record("shipped_heads_lossless", all(ev["lossless"] for ev in live.values()))  # for the workbook's summary
for kind, row in (("parallel", P), ("sequential", S)):
    report.record(f"shipped_{kind}_heldout_acceptance_length_k7", (row or {}).get("acceptance_length", {}).get("7"))

# %% [markdown]
# **Reading it.** EAGLE-3 accepts more on the held-out prompts, 2.53 tokens a round at K=7 against 1.90 for P-EAGLE:
# P-EAGLE's slot rates fall after slot 1, so its acceptance stops growing after K=3. That is the reverse of the
# paper's order (the vLLM blog: P-EAGLE 3.94 against EAGLE-3 3.03), and this course does not settle why.
#
# <details><summary>The careful reading</summary>
#
# **Where the gap comes from.** P-EAGLE leads at slot 1 on the held-out prompts (0.62 against 0.50 at K=7), but its
# rate falls to 0.34 and 0.24 at slots 2 and 3, while EAGLE-3's stays between 0.62 and 0.85 up to slot 7. So P-EAGLE's
# AL is 1.895 at K=3 and at K=7, while EAGLE-3's rises from 2.125 to 2.532. Deep rates rest on few rounds (about 22
# reach EAGLE-3's slot 7, 13 P-EAGLE's slot 4): read them to one decimal.
#
# **Why P-EAGLE's stops.** A slot adds its term only in rounds that accepted every slot before it. After P-EAGLE's
# slot 3 that is 5% of the rounds (the term 0.0499), so slot 4 adds 0.0192 and the later slots nothing. The K=3 and
# K=7 totals tie although K=7 has that term: the two runs start their rounds at different positions of the same
# answers (each round starts after the previous one's accepted tokens), so slots 1-3 are scored on other contexts
# and their rates differ a little (slot 2: 0.34 against 0.36). The first three terms add 0.879 at K=7 against 0.898
# at K=3, about as much less as slot 4 adds. Each rebuilt sum lies a little above the recorded figure: the token
# budget cuts each answer's last round short.
#
# **The verdicts.** The printed "accepts more", "ahead" and "a tie" read a gap against `TIE`, the seed spread of
# 07's appendix (0.052, the largest gap between two training seeds in notebooks 02-03), not an estimate of
# prompt-sampling noise: each verdict reads these 8 held-out or 2 live prompts and tests nothing.
#
# **The live check.** Every speculative output was identical to plain greedy decoding. A few dozen rounds per K give
# the direction, not the size. At K=3 and K=7 EAGLE-3 leads, in the held-out order. At K=1 a round drafts slot 1
# only, so the held-out slot-1 rates predict P-EAGLE ahead; this run has EAGLE-3 ahead instead (1.38 against 1.29).
# P-EAGLE's slot-1 lead is a fact of the held-out prompts, not of these HumanEval prompts.
#
# **Against the paper.** The blog (quoted in 00) has P-EAGLE accepting more on GPT-OSS-20B, 3.94 against 3.03 on
# HumanEval with both heads at K=7 (its 1.55x speed-up is each head at its best K: 7 for P-EAGLE, 3 for EAGLE-3), with
# 4-layer heads trained on GPUs on far more data. Here, on the 8 held-out comparison prompts (6 code_write, 2 reasoning,
# committed in bfloat16), the shipped EAGLE-3 head accepts more (gap +0.637 at K=7). The heads differ in training
# (EAGLE-3 had 1.23x the wall time, 1.05x the tokens) and in method (its training-time test against P-EAGLE's mask
# slots), and neither is tested alone. Section 2's learning curves score the methods on another 8 prompts, where the two
# long runs end 0.056 apart (EAGLE-3 ahead, just above the 0.052 seed spread); the two gaps come from different prompts
# and are not one measurement. The comparison file pools its prompts (no per-prompt figures), so 05's paired rule cannot
# be applied to it. P-EAGLE's advantage is cost, one drafter pass for all K tokens instead of K; notebook 05 measures
# it.
#
# </details>

# %% [markdown]
# ## 2 · What training at scale buys
#
# Two committed experiments, both scored by acceptance length at K=7 on 8 held-out prompts x 64 new tokens (not the
# prompts of section 1's comparison):
#
# * **The learning curves** (left panel): snapshots of two long runs, P-EAGLE (`peagle`, continued as `peagle-cont`)
#   and EAGLE-3 (`eagle3`, `eagle3-cont`), against cumulative tokens seen.
# * **The deeper heads** (right panel): P-EAGLE heads with 1, 2 and 4 decoder layers (`exp-L1`, `exp-L2`, `exp-L4`),
#   trained from scratch side by side on the same data for the same 2400 s.
#
# <details><summary>Where these runs come from</summary>
#
# Both experiments ran SmolLM2-135M on `cpu-epyc-avx512bf16-2c`; the curve files do not record the target's dtype.
# The learning curves come from `peagle-lab curve`, the deeper heads from its `deeper/` folder. The long runs are
# earlier runs than the shipped heads, trained on the 1M-token mix and then on more data.
#
# </details>

# %% tags=["nbval-ignore-output"]
docs = [heads_report.read_curve(RECIPE_DIR / HOST / name) if HOST else {"points": []}
        for name in ("curve.json", "deeper/curve.json")]
curve, deeper = (d["points"] for d in docs)
heads_report.print_curve_sources(docs, HOST)  # the label, and the prompts each panel's snapshots were scored on
heads_report.plot_curves(curve, deeper)
heads_report.print_snapshots(curve, deeper)  # each long run's AL at every snapshot, each deeper head's last
# the same heads at the end of their runs, on section 1's comparison prompts
heads_report.print_run_ends(records_["parallel"], compare, P)

# %% [markdown]
# Why does acceptance stay low? In section 1's formula a slot counts only when every slot before it was accepted,
# so the depth where a head stops being accurate caps its acceptance. The next cell plots the held-out **accuracy per
# depth** (top-1 at every anchor of held-out distilled sequences) of the shipped P-EAGLE head and the three deeper
# heads, then computes the one rate that, applied to every slot, reaches the blog's 3.94 at K=7.
#
# <details><summary>The heads' names, and exp-L1's two figures</summary>
#
# The deeper heads are `exp-L1`, `exp-L2` and `exp-L4` in every cell (their head directories are named `peagle-L1`
# and so on); `exp-L1` is also `smollm2-135m-peagle-fresh`, the shipped P-EAGLE head's first run, which the shipped
# head continues. The previous cell gives `exp-L1` two figures at K=7, 1.512 and 1.737: 1.512 is its last snapshot
# (1,300,656 tokens) on the curves' prompts, 1.737 the end of its run (1,394,099 tokens) on section 1's comparison
# prompts, mostly code writing. Compare figures within one prompt set: on each, the three heads end in the order 1,
# 2, 4 layers, an order that mixes depth with tokens seen (the deeper heads saw fewer).
#
# </details>

# %% tags=["nbval-ignore-output"]
PAPER_AL, PAPER_K = 3.94, 7  # the vLLM P-EAGLE blog: GPT-OSS-20B on HumanEval, K=7 (a GPU-trained head)

depth_path = RECIPE_DIR / HOST / "deeper" / "depth_accuracy.json" if HOST else None
dacc = json.loads(depth_path.read_text()) if depth_path and depth_path.is_file() else {"heads": []}
fig, ax = plt.subplots(figsize=(7, 3.8))
for h in dacc["heads"]:
    name = h["head"].rstrip("/").split("/")[-1].replace("peagle-L", "exp-L")  # one name per head, as in the curves
    label = f"{name} ({h['layers']} layer{'s' * (h['layers'] > 1)})"
    ax.plot(range(1, len(h["accuracy"]) + 1), h["accuracy"], "o-", label=label)
    print(f"{label:40s} accuracy per depth 0..{len(h['accuracy']) - 1}: " + " ".join(f"{a:.3f}" for a in h["accuracy"]))
ax.set(xlabel="draft slot (= depth + 1; depth 0 is slot 1)", ylabel="held-out top-1 accuracy", ylim=(0, None),
       title=f"accuracy per depth, {dacc.get('sequences', 0)} held-out sequences")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# the rate p that, applied to every slot, gives the blog's AL: solve 1 + p + p^2 + ... + p^K = AL by bisection
lo, hi = 0.0, 1.0
for _ in range(40):
    rate = (lo + hi) / 2
    lo, hi = (rate, hi) if sum(rate ** j for j in range(PAPER_K + 1)) < PAPER_AL else (lo, rate)
print(f"\nthe blog's AL {PAPER_AL} at K={PAPER_K} (HumanEval) needs every slot accepted with p = {rate:.2f}: 1 + "
      + " + ".join(f"{rate ** j:.2f}" for j in range(1, PAPER_K + 1))
      + f" = {sum(rate ** j for j in range(PAPER_K + 1)):.2f}")

# %% [markdown]
# **Reading it.** Accuracy collapses after depth 0, and that caps acceptance: the shipped head is right 45% of the
# time at depth 0 and 18% at depth 1. More tokens help slowly (both long runs climb from about 1.1 to about 1.4 over
# about 25 times the tokens), and in the same wall time a deeper head did not help.
#
# <details><summary>The careful reading</summary>
#
# **The shape.** After depth 1 the shipped head's accuracy declines slowly to 11% at depth 7; every head has this
# shape. Beyond depth 0 a P-EAGLE head reads mask stand-ins where a sequential head reads its own drafts, and it is
# rarely right there, so P-EAGLE's K sweep goes flat. (Section 1's slot-1 rate of 0.62 exceeds the 0.45 here: it
# scores other prompts, and its rounds start only after a bonus token, not at every anchor.)
#
# **More training.** The climb is not steady: both runs dip just past 1M tokens, and P-EAGLE's last step falls from
# 1.437 to 1.391, a drop about the size of section 5's noise. The two runs end 0.056 apart (1.391 and 1.447), EAGLE-3
# ahead at each of the last six snapshots.
# Continuing `exp-L1` on fresh records, which made the shipped head, raised its acceptance on section 1's comparison
# prompts from 1.737 to 1.895.
#
# **Deeper heads.** In the same wall time the 1-layer head saw the most tokens, ended highest on both prompt sets
# (curves: 1.512 against 1.386 and 1.292; comparison: 1.737 against 1.649 and 1.477) and is ahead at equal tokens
# seen too (right panel). The 2-layer head's end lead over the 4-layer one is not shown to be depth: near 300k tokens
# the 4-layer head is above it (right panel); their last snapshots came at 0.8M and 0.5M tokens.
#
# **The paper is far away.** Its 3.94 at K=7 needs every slot accepted at 0.78, a rate like section 1's slot rates
# (accepted, given every earlier slot was). There the shipped P-EAGLE head reaches 0.62 at slot 1 but 0.34 and 0.24
# at slots 2 and 3. EAGLE-3's slots 2 to 7 are mostly near 0.78 (0.62 to 0.85); its slot 1, at 0.50, is not.
#
# </details>

# %% [markdown]
# ## 3 · Your own model and its chat template (question 1)
#
# Nothing in the recipe is specific to SmolLM2: the taps are chosen from the target's depth, the head's shape comes
# from the target's config, and the tokenizer's chat template is applied in one place (`prompts.chat_ids`) at every
# stage. The next cells show it on a tiny Qwen3 target with random weights, so its answers are noise: the point is the
# mechanics. To train both heads for your own model on a GPU, run
# `PEAGLE_TARGET=<your model> bash scripts/gpu_heads.sh`.
#
# <details><summary>The tiny target and the GPU script</summary>
#
# The package builds the tiny target offline in seconds (`peagle-lab make-tiny-target`: grouped-query attention, tied
# embeddings, a ChatML template). `chat_ids` applies the template for distillation, training, evaluation and serving.
# `scripts/gpu_heads.sh` distils 4,000 prompts, trains each head for 150 s (`PEAGLE_GPU_BUDGET` sets the seconds) and
# installs them where every notebook looks.
#
# </details>

# %% tags=["nbval-check-output"]
from peagle_lab.settings import results_dir
from peagle_lab.tiny_target import make_tiny_target

tiny_dir = make_tiny_target(results_dir() / "nb04" / "tiny-qwen3")  # kept when already built
tiny, tiny_tok = models.load_target(str(tiny_dir), device=DEVICE, dtype=precision.course_dtype(DEVICE))
tc = tiny.config
print(f"{type(tiny).__name__}: {tc.num_hidden_layers} layers, hidden {tc.hidden_size}, {tc.num_attention_heads} "
      f"query / {tc.num_key_value_heads} KV heads, head dim {tc.head_dim}, vocabulary {tc.vocab_size:,}, tied "
      f"embeddings {tc.tie_word_embeddings}")

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.prompts import chat_ids

QUESTION = "Write a function that reverses a list."
for name, tok in (("tiny Qwen3", tiny_tok), ("this run's target", tokenizer)):
    ids = chat_ids(tok, QUESTION)
    print(f"--- {name}: {len(ids)} prompt tokens ---\n{tok.decode(ids)}")

# %% [markdown]
# Each tokenizer brings its own template: ChatML for the tiny target, SmolLM2's (with its default system message)
# for the embedded one; `chat_ids` applies it at every stage, so a head sees the layout its target answers in.
#
# The head is built from the target's config (`PEagleConfig.from_target`): same hidden size, attention heads and
# rope, plus three **taps**, the layers whose hidden states the head reads: a low, a middle and a high one
# (`default_tap_layers`).
#
# ### Exercise: which layers are tapped?
#
# vLLM's EAGLE-3 default taps the residual stream entering layers `2`, `L // 2` and `L - 3` of an L-layer target.
# Write that rule as `my_taps` in the next cell, which prints the depths (1 to 64) where it differs from the
# package's. Why there, and what does the package give instead?
#
# <details><summary>Answer</summary>
#
# ```python
# def my_taps(n_layers):
#     taps = (2, n_layers // 2, n_layers - 3)
#     return taps if taps[0] < taps[1] < taps[2] else (0, n_layers // 2, max(n_layers - 1, 0))
# ```
#
# Below 7 layers the rule stops giving three increasing layers (4 layers: 2, 2, 1), so a shallow target is tapped at
# the inputs of its first, middle and last layer instead (4 layers: 0, 2, 3).
#
# </details>

# %% tags=["nbval-check-output"]
import copy

from peagle_lab.drafter.config import default_tap_layers
from peagle_lab.training import pick_mask_token_id


def my_taps(n_layers):
    """The three layers an EAGLE-3 head taps in a target of ``n_layers`` layers."""
    raise NotImplementedError("write me: vLLM's rule, about two lines")


try:
    wrong = [n for n in range(1, 65) if tuple(my_taps(n)) != tuple(default_tap_layers(n))]
    print(f"your taps and the package's agree at {64 - len(wrong)} of 64 depths" + (
        f"; they differ at {wrong}, e.g. at {wrong[-1]} layers yours are {tuple(my_taps(wrong[-1]))}, the package's "
        f"{default_tap_layers(wrong[-1])}" if wrong else ""))
except NotImplementedError as exc:
    print(f"my_taps is not written yet ({exc}); the answer is folded above the cell")
for n_layers in (30, tc.num_hidden_layers):  # SmolLM2's depth, the tiny target's
    print(f"{n_layers} layers -> taps {default_tap_layers(n_layers)}")
TINY_MASK = pick_mask_token_id(tiny_tok)
tiny_cfg = PEagleConfig.from_target(copy.deepcopy(tc), mask_token_id=TINY_MASK, num_speculative_tokens=4)
print(f"head for the tiny target: hidden {tiny_cfg.hidden_size}, {tiny_cfg.num_attention_heads} / "
      f"{tiny_cfg.num_key_value_heads} heads, head dim {tiny_cfg.head_dim}, vocabulary {tiny_cfg.vocab_size:,}, "
      f"taps {tiny_cfg.aux_hidden_state_layer_ids}, mask token {TINY_MASK} = "
      f"{tiny_tok.convert_ids_to_tokens(TINY_MASK)!r}")

# %% [markdown]
# Now the whole recipe on the tiny target, at small scale: distil a few prompts with its template, extract its
# features, train a few steps, and decode speculatively. Whatever the head drafts, verification keeps the output
# identical to plain greedy decoding.

# %% tags=["nbval-ignore-output"]
import tempfile
from pathlib import Path

from peagle_lab.prompts import load_train_prompts
from peagle_lab.training import TrainConfig, Trainer, TrainerOptions, prepare_sequences
from peagle_lab.distill.data import DistillSettings, distill

with tempfile.TemporaryDirectory() as tmp:
    tiny_records = distill(tiny, tiny_tok, load_train_prompts(settings.pick(8, 4)), Path(tmp) / "tiny.jsonl",
                           DistillSettings(max_new_tokens=24, target=str(tiny_dir)), progress=False)
tiny_seqs = prepare_sequences(tiny, tiny_records, progress=False)
tiny_train = TrainConfig(mode="parallel", num_depths=4, layers=1, draft_vocab_size=1024, steps=settings.pick(12, 4),
                         warmup_steps=1, lr=2e-3, batch_tokens=256, row_tokens=256, mask_token_id=TINY_MASK, seed=0,
                         target=str(tiny_dir))
tiny_res = Trainer(tiny_train, tiny, tiny_seqs, tiny_tok, TrainerOptions(progress=False, verbose=False)).train()
print(f"{len(tiny_seqs)} sequences, taps {tuple(tiny_seqs[0]['taps'].shape[1:])} per token; "
      f"{tiny_res.steps_done} steps, loss {tiny_res.log[0]['loss']:.2f} -> {tiny_res.log[-1]['loss']:.2f}")

# %% tags=["nbval-check-output"]
from peagle_lab.decoding.divergence import first_divergence, is_lossless, lossless_regime
from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner

tiny_head = tiny_res.head.eval()
print("the trained head's taps are the ones from_target chose:",
      list(tiny_head.config.aux_hidden_state_layer_ids) == list(default_tap_layers(tc.num_hidden_layers)))
runner = TargetRunner(tiny, tiny_head.config.aux_hidden_state_layer_ids)
ids = chat_ids(tiny_tok, QUESTION)
plain = plain_generate(runner, list(ids), 24, eos_ids=None)
spec = speculative_generate(runner, HeadDrafter(tiny_head, "parallel"), list(ids), 4, 24, eos_ids=None)
div = first_divergence(spec.tokens, plain, tiny.dtype, DEVICE)
print("speculative output lossless against plain greedy:",
      is_lossless([div.as_dict()] if div else [], lossless_regime(tiny.dtype, DEVICE)))

# %% [markdown]
# ### A template mismatch
#
# A head learns what the target says after the prompt layout it was trained with. The cell serves the P-EAGLE head
# on held-out prompts in three layouts: the trained chat template, bare text with no template, and the chat template
# with another system message. It prints each layout's acceptance and answer length against the trained layout.

# %% tags=["nbval-ignore-output"]
from peagle_lab.prompts import OTHER_SYSTEM, load_scale_records

tmpl_prompts = [r["prompt"] for r in load_scale_records("val") if not r.get("history")][: settings.pick(2, 1)]
TK, TMPL_NEW = 4, settings.pick(40, 16)
tmpl = {t: evaluate_head(model, tokenizer, heads["parallel"], tmpl_prompts,
                         EvalSettings(ks=(TK,), max_new_tokens=TMPL_NEW, template=t), progress=False)
        for t in ("chat", "plain", "system")}
layout = {"chat": "chat template (as trained)", "plain": "no template (bare text)",
          "system": f"chat template, system message {OTHER_SYSTEM[:24]!r}..."}
print(f"{len(tmpl_prompts)} held-out prompt(s), at most {TMPL_NEW} new tokens each, K={TK}")
for t, ev in tmpl.items():
    al, rounds = ev["acceptance_length"][TK], ev["rounds"][TK]
    print(f"{layout[t]:58s} AL {al:.2f} over {rounds} rounds ({round((al - 1) * rounds)} drafts accepted), "
          f"answers {ev['new_tokens']} tokens")
    book.add(f"template: {layout[t][:40]}", head_names["parallel"], prompt_set="held-out split",
             prompts=len(tmpl_prompts), new_tokens=TMPL_NEW, k=TK, rounds=rounds, acceptance_length=al)
base_al = tmpl["chat"]["acceptance_length"][TK]
print("against the trained layout: " + ", ".join(f"{name} {tmpl[t]['acceptance_length'][TK] - base_al:+.2f}"
                                                 for t, name in (("plain", "no template"),
                                                                 ("system", "another system message"))))

# %% [markdown]
# **Reading it.** Without the template the head accepted none of its drafts in this small check (AL 1.00 against 1.52
# with the trained template, two prompts). The fix is one template everywhere: distil with your model's chat template
# and serve the head behind the same one.
#
# <details><summary>The careful reading</summary>
#
# The layout changes the target's answer too (bare text: 44 tokens against 80), so each layout scores the head on a
# different answer: this is what a mismatch costs as served. Another system message costs less (1.34 against 1.52), a
# gap that two prompts cannot establish.
#
# For your own model, distil with its chat template (`peagle-lab distill --target DIR`, as the tiny target did above);
# vLLM applies the tokenizer's template to chat requests.
#
# </details>

# %% [markdown]
# ## 4 · Past one machine
#
# The same trainer runs in several processes (DDP through accelerate). `--batch-tokens` is the global batch, so two
# processes follow one process's loss curve. For a 7-8B target (hidden 4096, 32 layers) on 8 GPUs:
#
# ```bash
# peagle-lab extract --distilled DATA --split train --out FEATURES/part-train --max-seq-len 2048   # once
# torchrun --nproc_per_node 8 -m peagle_lab.cli train --data DATA --features FEATURES --out HEAD \
#     --mode parallel -K 8 --layers 1 --draft-vocab-size 32768 --autocast bfloat16 --max-seq-len 2048 \
#     --row-tokens 4096 --batch-tokens 65536 --lr 5e-4 --warmup-steps 200 --time-budget 36000 --steps 1000000
# accelerate launch --multi_gpu --num_processes 8 -m peagle_lab.cli train ...    # the same, through accelerate
# ```
#
# Large runs usually compute the features online (no `--features`): offline features of an 8B target are large.
#
# <details><summary>The detail</summary>
#
# `tests/training/test_distributed.py` checks on a CPU that two processes follow one process's loss curve, and that a
# run resumes at another world size. Offline features of an 8B target cost 3 x 4096 x 2 B = 24 KiB per token in bf16
# (2.5 TB for 68k sequences of 1.5k tokens, notebook 01).
#
# </details>

# %% [markdown]
# ## 5 · Why is my acceptance length below the paper's? (question 3)
#
# Section 2 shows acceptance rising slowly with training tokens, and a CPU trains on few of them. The recipe runs ask
# which settings still move acceptance at a small budget: short runs of equal wall time, each changing one setting
# from a **baseline**, scored by held-out acceptance length at K=7 (`peagle-lab recipe`). A change counts only if it
# exceeds the noise, the largest acceptance spread between two seeds of one setting: the cell takes it from these runs
# and from the studies of notebooks 02 and 03, and reads each change against both.

# %% tags=["nbval-ignore-output"]
from peagle_lab.experiments import recipe, studies

runs = recipe.read_runs(RECIPE_DIR / HOST) if HOST else []
print(committed_label("The recipe runs", HOST and f"{HOST}, target in {target_dtypes(runs)}"))
shipped_train = records_["parallel"]["config"]
print("the baseline where it differs from the shipped P-EAGLE head's last run (baseline -> shipped): " + ", ".join(
    f"{k} {v} -> {shipped_train.get(k)}" for k, v in recipe.BASELINE.items() if shipped_train.get(k) != v))


own_noise = recipe.noise(runs) or 0.0  # the largest acceptance spread between two seeds of one setting
study_noise = studies.largest_seed_spread()  # the same over the studies of 02 and 03 (07's appendix: the seed spread)
study_runs = [r for name in studies.COMMITTED_STUDIES for r in studies.committed(name)[1]]
noise = max(own_noise, study_noise)
seeds = [r["tokens_seen"] for r in runs if r["name"].startswith("baseline")]
mixed = (f" (its two baseline seeds saw {min(seeds):,} and {max(seeds):,} tokens in the same wall time, "
         f"{100 * (max(seeds) / min(seeds) - 1):.0f}% apart: seed and budget together)" if len(seeds) == 2 else "")
print(f"noise: the recipe's own seed spread {own_noise:.3f}{mixed}, the studies' largest {study_noise:.3f} (target "
      f"in {target_dtypes(study_runs)})")
if runs:
    r0, base = runs[0], next(r for r in runs if r["name"] == "baseline")
    print(f"each run: {r0['budget_s']:.0f} s of training ({r0['autocast']}), scored at K={r0['k']} on "
          f"{r0['val_prompts']} held-out prompts x {r0['max_new_tokens']} new tokens")
    table = ["| run | change | tokens seen | draft vocab coverage | held-out AL | against the baseline | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in sorted(runs, key=lambda r: -r["acceptance_length"]):
        d = r["acceptance_length"] - base["acceptance_length"]
        verdict = ("a baseline seed" if r["name"].startswith("baseline") else
                   f"beyond both ({abs(d):.3f} > {noise:.3f})" if abs(d) > noise else
                   f"within the studies' {study_noise:.3f}" + (f", beyond the seed spread {own_noise:.3f}"
                                                             if abs(d) > own_noise else ""))
        table.append(f"| {r['name']} | {json.dumps(r['change']) if r['change'] else '-'} | {r['tokens_seen']:,} | "
                     f"{r['draft_vocab_coverage']:.3f} | {r['acceptance_length']:.3f} | {d:+.3f} | {verdict} |")
    display(Markdown("\n".join(table)))

# %% [markdown]
# **Reading it.** No setting beats the baseline beyond the noise: the best changes (a 4k draft vocabulary, 10 depths)
# gain +0.028, inside the studies' noise of 0.052. So question 3 is answered only in part: acceptance rises slowly with
# data (section 2), but the paper also differs in target, head depth and benchmark.
#
# <details><summary>The careful reading</summary>
#
# The studies' noise comes from runs with the target in float32; the recipe runs' target was in bfloat16. Every change
# lies beyond the recipe's own seed spread of 0.005, but that spread comes from two baseline seeds, which also saw
# different token counts in the same wall time (64,441 and 75,156): seed and budget together.
#
# Only `4 layers` lies beyond both estimates, at -0.065, and it saw less than half the baseline's tokens (30,955
# against 64,441) in the same time, so its loss is budget as much as setting. The 4k vocabulary's 0.977 coverage is
# of the scale mix's train split; 03's 99.61% was of its 465 sequences.
#
# The paper's target is GPT-OSS-20B and its heads have 4 layers against 1 here; no run here isolates data.
#
# </details>

# %% [markdown]
# ## What we saw
#
# - **The shipped heads.** EAGLE-3 accepts more than P-EAGLE on the held-out prompts (2.53 against 1.90 at K=7), the
#   reverse of the paper's order. Every live speculative output matched plain greedy decoding.
# - **Why acceptance stays low.** Accuracy collapses after depth 0 (45%, then 18% at depth 1). The blog's 3.94 needs
#   every slot accepted at 0.78; the shipped P-EAGLE head's slots 2 and 3 are accepted at 0.34 and 0.24.
# - **Training at scale.** Acceptance grows slowly with tokens seen (the long runs end near 1.4 after about 1.5M
#   tokens), and in the same wall time a deeper head did not help.
# - **Your own model.** The recipe ran unchanged on a tiny Qwen3 target and decoded losslessly. Without the template
#   it was trained with, the shipped P-EAGLE head accepted no draft in a two-prompt check.
# - **The recipe runs.** At this budget no single setting raises acceptance beyond the noise (best +0.028, noise 0.052).
#
# <details><summary>The figures behind these bullets</summary>
#
# - The held-out comparison is committed (`cpu-epyc-avx512bf16-2c` in bfloat16, 8 prompts). EAGLE-3's deep slots are
#   accepted far more often, and P-EAGLE's acceptance stops growing after K=3. P-EAGLE's lead at slot 1 there did not
#   carry over to the live HumanEval prompts, where EAGLE-3 accepted more at K=1 too. Why EAGLE-3 leads is not
#   settled here: on the learning curves' own 8 prompts EAGLE-3's long run also ends ahead, by 0.056.
# - The learning curves come from the same host, and their climb is not steady. Accuracy stays low after depth 0
#   for 1, 2 and 4 layers alike.
# - The tiny target brought its own template, taps and head shape. The shipped SmolLM2 P-EAGLE head accepted no draft
#   when served on bare text.
#
# </details>
#
# Next, `05_parallel_vs_sequential`: what one drafting round costs for each head, and the speed-up those costs and
# these acceptance lengths give.
