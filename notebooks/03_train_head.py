# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (peagle-lab)
#     language: python
#     name: peagle-lab
# ---

# %% [markdown]
# # 03 · Train a P-EAGLE head
#
# **Goal:** train a P-EAGLE head on this machine, seeing each ingredient built in view: the target's own answers,
# the draft vocabulary, the tapped features, and one training row holding every depth at once.
#
# The plan, one section each:
#
# 1. **data**: training prompts, answered by the target itself (self-distillation; should it? question 7);
# 2. **draft vocabulary**: the tokens the head may propose, and the `d2t` / `t2d` maps by hand (question 6);
# 3. **features**: the target's three tapped hidden states and its greedy labels (online or offline, bf16 or
#    fp32? question 2);
# 4. **training**: all anchors and depths of a packed row in a few forward passes (COD, the training mask from
#    notebook 02), per-depth loss and accuracy, checkpoints, resume.
#
# The training run here is small (minutes on a CPU); the shipped heads were trained with the same code from the
# command line (`peagle-lab distill`, `peagle-lab train`), and notebook 04 reads their record.

# %% tags=["nbval-ignore-output"]
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, precision, settings
from peagle_lab.distill.data import distilled_data, distilled_records, read_distilled, shipped_distilled_path

model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))

# %% [markdown]
# ## 1 · Data: the target answers the training prompts
#
# A drafter is trained to guess what **this target** will say next, so the training text should be the target's
# own text. `peagle-lab distill` applies the chat template (`prompts.chat_ids`, the one place it is applied),
# lets the target answer greedily, batched with left padding and a KV cache, and writes prompt + response
# token ids to a JSONL file after every batch (atomically; a restarted run skips the prompts already done):
#
# ```bash
# peagle-lab distill --out data/distill/smollm2-135m.jsonl --max-new-tokens 160 --batch-size 32
# ```
#
# For the embedded target that file ships with the repository (project-written prompts: coding, chat, reasoning;
# no HumanEval problem among them). The first cell reads it and shows one prompt and the target's answer; the
# second reads the larger **scale mix** the shipped heads are trained on (`data/prompts/scale.jsonl`: code
# writing, completion from a signature and docstring, explanation, chat, short reasoning, multi-turn), whose 5%
# held-out split is never trained on and measures acceptance on unseen prompts of the same kinds.

# %% tags=["smollm2-fact", "nbval-check-output"]
path, meta, records, shipped = distilled_data(model, tokenizer, None if models.is_default_target(TARGET)
                                              else settings.pick(32, 8), TARGET, progress=False)
if not shipped:
    print(f"no shipped distilled data for this target ({shipped_distilled_path(TARGET).name} is SmolLM2-135M's): "
          f"distilled {len(records)} prompts here")
tokens = sum(len(r["input_ids"]) for r in records)
response = sum(len(r["input_ids"]) - r["prompt_len"] for r in records)
print(f"{path.name}: {len(records)} sequences, {tokens:,} tokens ({response:,} written by the target), "
      f"decoding={meta['decoding']}, max_new_tokens={meta['max_new_tokens']}, "
      f"{sum(r['finished'] for r in records)} answers ended with EOS")
r = records[0]
print("\n--- prompt (chat template applied) ---")
print(tokenizer.decode(r["input_ids"][: r["prompt_len"]]))
print("--- the target's answer (first 300 characters) ---")
print(tokenizer.decode(r["input_ids"][r["prompt_len"]:])[:300])

# %% tags=["nbval-ignore-output"]
from collections import Counter

from peagle_lab.distill.data import select_split
from peagle_lab.prompts import load_scale_records
from peagle_lab.workbook.notebook import committed_label

scale_path = shipped_distilled_path("smollm2-135m-scale")
_, scale = read_distilled(scale_path)
mix = load_scale_records()
train_part, held = select_split(scale, "train")
print(committed_label("The scale mix, self-distilled"))
print(f"{scale_path.name}: {len(scale):,} of {len(mix):,} prompts answered, "
      f"{sum(len(r['input_ids']) for r in scale):,} tokens, {scale_path.stat().st_size / 1e6:.1f} MB; "
      f"{len(train_part):,} train / {held:,} held-out")
print("prompt kinds:", dict(Counter(m["category"] for m in mix)))

# %% [markdown]
# ### Should the target write the answers itself? (question 7)
#
# An equal-budget experiment answers it (`peagle-lab study self-distill`, results committed per host). The same
# prompts, each asking for one function of Python's standard library, are answered once by people (the
# library's own source) and once by the target (`peagle-lab distill`). A head is trained on each for the same
# number of tokens, two seeds each, and both are scored on held-out prompts of the same kind, answered by the
# target at inference as they are when serving. The labels are the target's own greedy tokens in both arms:
# only the text the head reads differs.

# %% tags=["nbval-ignore-output"]
from IPython.display import Markdown, display

from peagle_lab.experiments import studies

sd_host, sd_runs = studies.committed("self-distill")
print(committed_label("The self-distillation study", sd_host))
display(Markdown(studies.summary_markdown(sd_runs)))

# %% [markdown]
# **Reading it.** Compare the two rows of the table above at the same budget (their tokens seen match): the head
# trained on the target's own answers accepts more per round on the held-out prompts than the one trained on the
# human answers, and the gap is larger than the seed spread of either arm, so it is not run-to-run noise. Most of
# the gap is at slot 1. The head learns to predict the target from text the target writes, and the library's
# own source is not written the way the target writes. So yes: let the target regenerate the answers
# (`peagle-lab distill`) when you can afford its generation; the labels come from the target in both arms, the
# text is what distillation buys.
#
# ## 2 · Draft vocabulary
#
# The head's LM head only needs the tokens the target actually produces: a smaller output layer is cheaper to
# run and to train. `vocab.build_draft_vocab` keeps the most frequent target ids (plus the mask token and EOS,
# always); the checkpoint stores the map as `d2t` (draft id -> target id offset) and `t2d`. Coverage is the
# fraction of the target's tokens in the data that the draft vocabulary can still produce; a token outside it
# can never be drafted (still lossless: the target verifies every draft).

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.training import pick_mask_token_id
from peagle_lab.drafter.vocab import build_draft_vocab, count_tokens, coverage

V = model.config.vocab_size
MASK_ID = pick_mask_token_id(tokenizer)
counts = count_tokens([r["input_ids"][r["prompt_len"]:] for r in records], V)
print(f"{int((counts > 0).sum()):,} distinct token ids among {int(counts.sum()):,} response tokens "
      f"(target vocabulary {V:,})")
for size in [n for n in (1024, 2048, 4096, 8192, 16384) if n < V] + [V]:
    ids = build_draft_vocab(counts, size, V, always=(MASK_ID, tokenizer.eos_token_id))
    print(f"draft vocabulary {size:>6,}: coverage {100 * coverage(counts, ids, V):6.2f}%  "
          f"(lm_head {size * model.config.hidden_size / 1e6:5.1f} M parameters)")

# %% [markdown]
# ### `d2t` and `t2d`, by hand (question 6)
#
# A toy draft vocabulary of 8 ids shows the two maps a checkpoint carries and vLLM reads: draft id `i` stands for
# target id `i + d2t[i]`, and `t2d` marks, over the whole target vocabulary, the ids the head can emit.
#
# The head's `lm_head` must have one row per draft id. A checkpoint where it does not (a head trained with
# another `--draft-vocab-size` than its config says, or a truncated file) is refused by the export check, which
# names the tensor and both shapes, before vLLM would fail on it or draft from the wrong rows: the second cell
# cuts 96 rows off the shipped head's `lm_head` and shows the refusal.

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.drafter.vocab import d2t_t2d

toy = build_draft_vocab(counts, 8, V, always=(MASK_ID, tokenizer.eos_token_id))
d2t, t2d = d2t_t2d(toy, V)
for i, (tid, off) in enumerate(zip(toy.tolist(), d2t.tolist())):
    print(f"draft id {i}: target id {tid:>5} = {i} + d2t[{i}] (= {off:>5})   {tokenizer.decode([tid])!r}")
print(f"t2d: {t2d.dtype}, {t2d.numel():,} entries (one per target id), True at {t2d.nonzero().flatten().tolist()}")

# %% tags=["nbval-check-output"]
from safetensors.torch import load_file

from peagle_lab.drafter import PEagleConfig
from peagle_lab.errors import PeagleError
from peagle_lab.drafter.heads import SHIPPED
from peagle_lab.serving.validation import validate_head

shipped_cfg = PEagleConfig.from_dir(SHIPPED["parallel"])
tensors = load_file(SHIPPED["parallel"] / "model.safetensors")
tensors["lm_head.weight"] = tensors["lm_head.weight"][:-96]  # 96 rows fewer than the draft vocabulary
try:
    validate_head(shipped_cfg, tensors)
except PeagleError as exc:
    print(exc)

# %% [markdown]
# ## 3 · Features
#
# For every position `t` of every sequence: the three tapped residual streams `h_t` (3H; taps
# `eagle_aux_hidden_state_layer_ids`) and the target's greedy label `y_t`. They come from one forward pass of
# the frozen target per sequence, computed once and kept (here in a cache of `peagle_lab.features` shards under
# `$PEAGLE_RESULTS/features/`, which later runs reuse).

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter.heads import target_slug
from peagle_lab.settings import results_dir
from peagle_lab.memory import release
from peagle_lab.training import (TrainConfig, Trainer, TrainerOptions, draft_vocab_size_for, final_accuracy, plan_row,
                                 prepare_sequences)

N_SEQ = settings.pick(96, 16)
train_records = distilled_records(model, tokenizer, N_SEQ, TARGET)
seqs = prepare_sequences(model, train_records, features_dir=results_dir() / "features" / target_slug(TARGET),
                         progress=False)
print(f"{len(seqs)} sequences, {sum(len(s['input_ids']) for s in seqs):,} tokens, taps {tuple(seqs[0]['taps'].shape[1:])}")

# %% [markdown]
# ### Online or offline, bf16 or fp32? (question 2)
#
# Offline features are computed once and read back for every epoch and every head; online features cost one
# target forward each time a sequence is used, and no disk. Storing the taps in bf16 halves the disk and rounds
# them to 8 significant bits. The cell does all three on the same few sequences: one online pass, and an
# extraction in each dtype, read back.

# %% tags=["nbval-ignore-output"]
import tempfile
import time
from pathlib import Path

from peagle_lab.features import ExtractionSettings, extract_features, load_features, sequence_features

few = [r["input_ids"] for r in train_records[: settings.pick(8, 2)]]
n_tok = sum(map(len, few))
t0 = time.perf_counter()
online = [sequence_features(model, ids, taps_dtype=torch.float32) for ids in few]
rows = [dict(way="online (a target forward per use)", seconds=time.perf_counter() - t0, disk=0, err=0.0)]
with tempfile.TemporaryDirectory() as tmp:
    for dt in (torch.float32, torch.bfloat16):
        where = Path(tmp) / str(dt)
        extract_features(model, few, where, ExtractionSettings(taps_dtype=dt), progress=False, verbose=False)
        t0 = time.perf_counter()
        back = load_features(where, taps_dtype=torch.float32)
        secs = time.perf_counter() - t0
        err = max(float(((b["taps"] - o["taps"]).abs().max() / o["taps"].abs().max())) for b, o in zip(back, online))
        disk = sum(f.stat().st_size for f in where.rglob("*") if f.is_file())
        rows.append(dict(way=f"offline {str(dt).split('.')[-1]} (read back)", seconds=secs, disk=disk, err=err))
print(f"{len(few)} sequences, {n_tok:,} tokens")
for r in rows:
    print(f"{r['way']:34s} {n_tok / r['seconds']:>10,.0f} tokens/s   disk {r['disk'] / n_tok:>7,.0f} B/token   "
          f"largest error {r['err']:.1e} (relative to the largest tap)")

# %% [markdown]
# Reading back runs more than a thousand times faster than the target forward it replaces (the two rates above), at 3 x H x 2 bytes per
# token in bf16 (notebook 01 has the table for larger targets), and bf16 rounds each tap by at most one part in
# 2^8. Does that rounding cost acceptance? The storage study (`peagle-lab study storage`) trains on bf16
# taps with the settings and seeds of the mask study's learned variant (notebook 02), whose taps are fp32 (in both
# arms the training arithmetic itself runs in bf16 autocast: only the stored inputs differ):

# %% tags=["nbval-ignore-output"]
st_host, st_runs = studies.committed("storage")
mk_host, mk_runs = studies.committed("mask")
print(committed_label("The storage study", st_host))
fp32_arm = [dict(r, name=r["name"].replace("learned (P-EAGLE)", "float32 taps"))
            for r in mk_runs if r["name"].startswith("learned (P-EAGLE)")]
display(Markdown(studies.summary_markdown(fp32_arm + st_runs)))

# %% [markdown]
# **Reading it.** The two arms of the table above differ only in the stored taps. Their difference in held-out
# acceptance is far smaller than the seed spread of either arm: rounding the stored taps to bf16 costs nothing
# measurable here, and halves the disk (the bytes per token in the cell before), which is why the shipped heads
# were trained on offline bf16 shards. Online features trade that disk for a target forward each time a sequence
# is used: the right choice when the features of the data set would not fit on disk (notebook 01's table), the
# slower one when they do.
#
# ## 4 · Training
#
# ### One training row
#
# A packed row holds several sequences. Its depth-0 elements are all its positions; depth d keeps a COD sample of
# the anchors (response positions), each predicting the target's token `d + 1` steps ahead. COD, *conditional
# drop-token* sampling (from PARD), keeps every anchor at depth 0 and a shrinking share deeper (`ratio`, then
# `ratio`^2, ..., never under `min_ratio`), each deeper set drawn from the one above: the deep slots cost a
# fraction of the compute. The cell below plans one row of two sequences and prints its element count per depth.
#
# ### Exercise: predict the size of a row
#
# Set `RATIO = 0.5` (keep half at each depth) and predict the elements per depth and in all, then run the cell.
# Then try `NUM_DEPTHS = 4`.
#
# <details><summary>Answer</summary>
#
# Depth 0 is unchanged (every position of the row). Each deeper depth keeps about `RATIO` times the anchors of
# the depth above (rounded), until the floor `MIN_RATIO` x anchors is reached, after which it stays flat: with
# 0.5 the counts halve (about 1/2, 1/4, ... of the anchors) and hit the 20% floor from depth 3 on, so the row
# holds fewer elements in all than with 0.7. With `NUM_DEPTHS = 4` the list has four entries: the same first
# four, and the total is smaller by the depths dropped. The number of elements is what a training step costs,
# so COD is what makes training K depths cost less than K times one depth.
#
# </details>

# %% tags=["smollm2-fact", "nbval-check-output"]
RATIO, MIN_RATIO, NUM_DEPTHS = 0.7, 0.2, 8  # the shipped recipe's COD; change one and predict
plan = plan_row(seqs[:2], num_depths=NUM_DEPTHS, ratio=RATIO, min_ratio=MIN_RATIO,
                generator=torch.Generator().manual_seed(0))
print(f"a row of 2 sequences ({len(plan.x)} tokens): elements per depth {[len(d.g) for d in plan.depths]}, "
      f"{sum(len(d.g) for d in plan.depths)} in all")
print(f"depth 0 trains {int(plan.depths[0].loss.sum())} anchors (response positions + the last prompt position); "
      f"its other {int((~plan.depths[0].loss).sum())} elements are context only")

# %% [markdown]
# ### The loss of one row, by hand
#
# What a training step computes, on the row just planned. The head (untrained, as a run starts) runs over the
# planned elements depth by depth (`run_depths`: depth 0 reads the fused taps of every position, depth d >= 1 a
# mask slot per kept anchor, each depth attending through notebook 02's training mask). Each depth's
# cross-entropy is taken over its trained anchors against the target's greedy token d + 1 steps past the anchor,
# mapped into the draft vocabulary (a label outside it is skipped); the loss is the mean over depths, each depth
# weighted equally. The trainer does exactly this for every packed row of every step (`DraftTrainer.forward` in
# `training/objective.py`, the last line compares), then backpropagates.

# %% tags=["nbval-ignore-output"]
import torch.nn.functional as F

cfg = TrainConfig(mode="parallel", num_depths=8, layers=1, draft_vocab_size=draft_vocab_size_for(model, 8192),
                  steps=settings.pick(30, 6),
                  warmup_steps=settings.pick(6, 1), lr=2e-3, batch_tokens=settings.pick(1024, 256), row_tokens=512,
                  mask_token_id=MASK_ID, save_every=settings.pick(10, 2), seed=0, target=TARGET)
module = Trainer(cfg, model, seqs, tokenizer, TrainerOptions(progress=False, verbose=False)).module  # head + loss
row = plan.to(module.tap_scale.device)
with torch.no_grad():
    logits, _ = module.run_depths(row)  # per depth: (elements, draft vocabulary) logits
    by_hand = []
    for d, (el, lg) in enumerate(zip(row.depths, logits)):
        labels = module.t2d_index[row.y[el.flat]]  # the target's token d + 1 past the anchor, as a draft id (-1: none)
        keep = el.loss & (labels >= 0)
        by_hand.append(F.cross_entropy(lg[keep].float(), labels[keep]))
        print(f"depth {d}: {len(el.flat):4d} elements, {int(el.loss.sum()):4d} trained anchors, "
              f"{int(keep.sum()):4d} with a label in the draft vocabulary, cross-entropy {by_hand[-1]:.3f}")
    loss, _ = module(row)
print(f"mean over depths {torch.stack(by_hand).mean():.4f}; DraftTrainer.forward on the same row {loss:.4f}")
del module, logits  # one head in training at a time: an 8B target's head and its optimizer take ~7 GB
release()

# %% [markdown]
# ### Train, interrupt, resume
#
# `peagle_lab.training.Trainer` (and `peagle-lab train` on the command line): AdamW, linear warm-up then cosine
# decay, gradient clipping, gradient accumulation over packed rows, bf16 autocast where the hardware multiplies
# bf16 natively (a GPU, or a CPU with AMX / AVX512-BF16) and fp32 elsewhere, checkpoints (the head directory plus
# optimizer, step, data cursor and RNG state, written atomically) and resume, a time budget that stops cleanly
# and saves. The same code runs under `torchrun` / `accelerate launch` on several processes (README: "Several
# processes").
#
# Expect the loss to **start above ln(8192) = 9.0**, the loss of a uniform guess over the draft vocabulary: the
# head starts with the target's own lm_head and final norm, which turn the untrained fused hidden state into a
# confident distribution, and a confident wrong guess costs more than a uniform one.
#
# To show resume, the run below is interrupted halfway (`stop_after`) and a fresh `Trainer` continues it
# from the checkpoint; a third run, never interrupted, shows that the result is the same.

# %% tags=["nbval-ignore-output"]
import shutil

OUT = results_dir() / "nb03" / "head"
shutil.rmtree(OUT.parent, ignore_errors=True)
first = Trainer(cfg, model, seqs, tokenizer, TrainerOptions(out_dir=OUT))
part = first.train(stop_after=cfg.steps // 2)  # an interruption halfway
part.head = None  # only the interrupted run's record is read below: its head and optimizer are freed
del first
release()
second = Trainer(cfg, model, seqs, tokenizer, TrainerOptions(out_dir=OUT, resume=True))
resumed_at = second.step
res = second.train()
del second  # the trained head stays in res.head; the optimizer goes
res.head.cpu()  # beside the next trainer, the finished head waits in RAM
release()
print(f"draft vocabulary {res.info['draft_vocab_size']} ids, coverage {res.info['draft_vocab_coverage']:.4f}")

# %% tags=["nbval-ignore-output"]
straight = Trainer(cfg, model, seqs, tokenizer, TrainerOptions(progress=False, verbose=False)).train()
by_step = {r["step"]: r["loss"] for r in res.log}
loss_gap = max(abs(r["loss"] - by_step[r["step"]]) for r in straight.log)
weight_gap = max(float((a.float().cpu() - b.float()).abs().max())
                 for a, b in zip(straight.head.state_dict().values(), res.head.state_dict().values()))
print(f"uninterrupted vs interrupted + resumed, {len(straight.log)} steps: largest loss difference {loss_gap:.1e}, "
      f"largest weight difference {weight_gap:.1e}")
del straight
release()

# %% tags=["nbval-check-output"]
from peagle_lab.training import resume_tolerance

print("first run stopped by:", part.stopped_by, "| second run resumed where it stopped:",
      resumed_at == part.steps_done, "| finished all steps:", res.steps_done == cfg.steps)
print("head directory:", sorted(p.name for p in OUT.iterdir()))
print("training state:", sorted(p.name for p in (OUT / "checkpoint").iterdir()))
# CPU kernels are deterministic; CUDA's backward adds with atomics in a varying order (resume_tolerance says how much)
loss_tol, weight_tol = resume_tolerance(next(model.parameters()).device)
print("the resumed run is the uninterrupted run:", loss_gap < loss_tol and weight_gap < weight_tol)

# %% tags=["nbval-ignore-output"]
import math

import matplotlib.pyplot as plt

log = res.log
steps = [r["step"] for r in log]
fig, axes = plt.subplots(1, 3, figsize=(15, 4))
axes[0].plot(steps, [r["loss"] for r in log])
axes[0].set(xlabel="step", ylabel="loss (mean over depths)", title="training loss")
for d in range(cfg.num_depths):
    axes[1].plot(steps, [r["depth_loss"][d] for r in log], label=f"depth {d}")
axes[1].set(xlabel="step", ylabel="cross-entropy", title="loss per depth")
axes[1].legend(fontsize=7, ncol=2)
acc = final_accuracy(log, last=max(len(log) // 4, 1))
axes[2].bar(range(1, len(acc) + 1), [a or 0 for a in acc])
axes[2].set(xlabel="draft slot (depth + 1)", ylabel="top-1 accuracy", title="accuracy per depth (last quarter)")
plt.tight_layout()
plt.show()
print("per-depth accuracy at the end:", acc)
print(f"loss at step 1: {log[0]['loss']:.2f} (ln {cfg.draft_vocab_size} = {math.log(cfg.draft_vocab_size):.2f})")

head = res.head
own = {n: p.numel() for n, p in head.named_parameters() if n != "embed_tokens.weight"}
print(f"\nthe head: {sum(own.values()) / 1e6:.2f} M parameters of its own (embedding table of "
      f"{head.embed_tokens.weight.numel() / 1e6:.1f} M shared with the target, one row learned):")
for name, n in own.items():
    print(f"  {name:45s} {n:>10,}")

# %% [markdown]
# **Reading it.** The loss starts above the uniform guess's and falls within a few steps. A run this short
# teaches the head little: whatever accuracy it reaches sits at depth 0 (slot 1, the token right after the
# anchor, predicted from the target's own features of the anchor); the deeper depths, which see only mask
# slots, learn slower. Notebook 04 shows what far more training buys at each depth.
#
# What was trained (the parameter list above): one decoder layer whose attention reads `[embedding, fused
# hidden]` (2H), the `fc` that fuses the three taps, `mask_hidden`, the mask token's embedding row, and the final
# norm and lm_head over the draft vocabulary. The embedding table itself is the target's and is not counted as
# the head's.

# %% tags=["nbval-ignore-output"]
from peagle_lab.workbook import report

report.record("nb03_train_steps", res.steps_done)
report.record("nb03_final_depth_accuracy", final_accuracy(res.log, last=max(len(res.log) // 4, 1)));

# %% [markdown]
# ## What we saw
#
# - The training text is the target's own answers (self-distillation), and the committed study shows why: at
#   the same budget, a head trained on them accepts more on held-out prompts than one trained on human text.
# - The draft vocabulary keeps the tokens the target uses; `d2t` / `t2d` map draft ids to target ids, and a
#   head whose `lm_head` does not match its draft vocabulary is refused before it is served.
# - Features are the three tapped hidden states plus the greedy label; offline bf16 shards are read back far
#   faster than the target forward they replace, at no measurable cost in acceptance.
# - One packed row trains every depth at once, COD keeping a shrinking share of anchors deeper; training
#   resumes from its checkpoint to the same result as an uninterrupted run.
#
# Next, `04_scale_and_acceptance`: the shipped heads trained on far more tokens, what that buys per depth,
# a head for your own model (shown on a second architecture), and why acceptance stays below the paper's.
