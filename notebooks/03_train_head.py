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
# no HumanEval problem among them). The first cell reads it and shows one prompt and the target's answer. The
# second reads the larger **scale mix** of prompts (`data/prompts/scale.jsonl`: code writing, completion from a
# signature and docstring, explanation, chat, short reasoning, multi-turn, and `data`: small tables to convert or
# query; the printed `prompt kinds` count each) and a first self-distilled part of it,
# whose held-out split is never trained on and measures acceptance on unseen prompts of the same kinds, then the
# whole mix self-distilled (the `.jsonl.gz` line, stored compressed), the file the shipped heads were trained
# on. Last it lists, run by run, what each shipped head was trained on, from the head's own record
# (`training.json`, the same record as its `TRAINING.md`): the data file, the split, the records (`a:b`, the
# slice of the train split a run read), the tokens seen in that run alone, then their sum over the runs (the
# cumulative count that 04's learning curves plot on their x axis).

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
from pathlib import Path

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
full_path = scale_path.with_name(scale_path.name + ".gz")  # the whole mix, self-distilled
if full_path.exists():
    _, full = read_distilled(full_path)
    print(f"{full_path.name}: {len(full):,} of {len(mix):,} prompts answered, "
          f"{sum(len(r['input_ids']) for r in full):,} tokens, {full_path.stat().st_size / 1e6:.1f} MB (compressed)")
    del full

import json
import re

from peagle_lab.drafter.heads import SHIPPED

for kind, head_dir in SHIPPED.items():
    rec = json.loads((head_dir / "training.json").read_text())
    runs = rec.get("history", []) + [dict(head=head_dir.name, data=rec["data"]["file"], command=rec["command"],
                                          sequences=rec["data"]["sequences"], tokens_seen=rec["tokens_seen"],
                                          distinct_tokens=rec["data"].get("tokens"))]
    print(f"{head_dir.name} ({kind}), {len(runs)} training run(s), each continuing the one before:")
    for r in runs:
        span = re.search(r"--records (\S+)", r.get("command", ""))
        split = re.search(r"--split (\S+)", r.get("command", ""))
        print(f"  {r['head']}: {r['sequences']:,} sequences of {Path(r['data']).name}"
              f"{f', split {split.group(1)}' if split else ''}{f', records {span.group(1)}' if span else ''}; "
              f"{r['distinct_tokens'] or 0:,} distinct tokens, {r['tokens_seen']:,} tokens seen in this run"
              + (f" ({r['tokens_seen'] / r['distinct_tokens']:.2f} epochs)" if r.get("distinct_tokens") else ""))
    cum = rec.get("cumulative") or {}
    print(f"  cumulative: {sum(r['tokens_seen'] or 0 for r in runs):,} tokens seen over the {len(runs)} run(s)"
          + (f", {cum['distinct_tokens']:,} distinct tokens ({cum['epochs']} epochs: runs on the same records "
             "count once)" if cum.get("distinct_tokens") else ""))

# %% [markdown]
# ### Should the target write the answers itself? (question 7)
#
# An equal-budget experiment (the same optimizer steps per run; the tokens seen are printed under the table)
# answers it (`peagle-lab study self-distill`, results committed per host). The same prompts, each asking for one
# function of Python's standard library, are answered once by people (the library's own source: the table's
# `human answers` row) and once by the target (`peagle-lab distill`). A head is trained on each for the same
# number of optimizer steps (the tokens seen differ slightly, by the percentage printed), two seeds each, and
# both are scored on held-out prompts of the same kind, answered by the target at inference as they are when
# serving. The labels are the target's own greedy tokens in both arms:
# only the text the head reads differs. The table's columns are those of notebook 02's mask study (held-out AL,
# seed spread: the larger minus the smaller seed, tokens seen, per-position acceptance of slots 1-3); the lines
# under it say which gaps exceed both seeds' spreads and how many rounds reach each slot. Its acceptance lengths
# are not comparable with 02's mask study, although the caption lines read alike: the training data (these
# stdlib-function answers) and the held-out prompts differ, which is why this study's target's-own-answers arm
# and 02's learned arm, both standard P-EAGLE heads at the same steps, print different acceptance lengths.

# %% tags=["nbval-ignore-output"]
from IPython.display import Markdown, display

from peagle_lab.experiments import studies

sd_host, sd_runs = studies.committed("self-distill")
print(committed_label("The self-distillation study", sd_host))
display(Markdown(studies.summary_markdown(sd_runs)))
if sd_runs:
    seen = [r["tokens_seen"] for r in sd_runs]
    print(f"tokens seen per run: {min(seen):,} to {max(seen):,} "
          f"({100 * (max(seen) - min(seen)) / min(seen):.1f}% apart; the same {sd_runs[0]['steps']} steps each)")
    print("\n".join(studies.verdict_lines(sd_runs)))

# %% [markdown]
# **Reading it.** The two arms ran the same number of optimizer steps, their tokens seen within the percentage
# printed, on the held-out prompts of the caption. The verdict lines say whether the gap between them exceeds the
# seed spread of both arms, by how much, and which arm is ahead; the slot lines show at which slot the two differ,
# and on how many rounds each rate rests. Verdict: the head trained on the target's own answers is ahead, 1.380
# against 1.245 tokens per round in the committed table, a gap of 0.135, beyond both arms' seed spreads (0.052 and
# 0.006), and its slot-1 rate is the higher one (0.33 against 0.23): it learns to predict the target from text the
# target writes, and the library's own source is not written the way the target writes. So let the target
# regenerate the answers (`peagle-lab distill`) when you can afford its generation; the labels come from the
# target in both arms, the text is what distillation buys.
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
#
# ### Online or offline, bf16 or fp32? (question 2)
#
# Offline features are computed once and read back for every epoch and every head; online features cost one
# target forward each time a sequence is used, and no disk. Storing the taps in bf16 halves the disk and rounds
# them to 8 significant bits. The cell prepares the training sequences, then does all three on a few of them:
# one online pass, and an extraction in each dtype, read back.

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
print(f"reading back the bf16 shards: {rows[0]['seconds'] / rows[2]['seconds']:,.0f}x the online rate")

# %% [markdown]
# Reading back runs many times faster than the target forward it replaces (the last line: the ratio of the two
# rates), at 3 x H x 2 bytes per token in bf16 (notebook 01 has the table for larger targets), and bf16 rounds
# each tap by at most one part in 2^8. Does that rounding cost acceptance? The storage study (`peagle-lab study
# storage`) trains on bf16 taps with the settings and seeds of the mask study's learned variant (notebook 02),
# whose taps are fp32 (the table's "float32 taps" arm; in both arms the training arithmetic itself runs in bf16
# autocast: only the stored inputs differ):

# %% tags=["nbval-ignore-output"]
st_host, st_runs = studies.committed("storage")
mk_host, mk_runs = studies.committed("mask")
print(committed_label("The storage study", st_host))
fp32_arm = [dict(r, name=r["name"].replace("learned (P-EAGLE)", "float32 taps"))
            for r in mk_runs if r["name"].startswith("learned (P-EAGLE)")]
display(Markdown(studies.summary_markdown(fp32_arm + st_runs)))
print("training data (taps dtype) per arm:", {r["name"]: r.get("data") for r in fp32_arm + st_runs})
print("\n".join(studies.verdict_lines(fp32_arm + st_runs)))

# %% [markdown]
# **Reading it.** The two arms of the table above differ only in the stored taps (the line under it prints each
# run's data set, named by its taps dtype). The verdict line says whether their gap in held-out acceptance
# exceeds the seed spread of both arms. Verdict: it does not (1.210 for bf16 taps against 1.211 for float32
# taps in the committed table, a gap of 0.001 beside seed spreads of 0.027 and 0.004): rounding the
# stored taps to bf16 costs nothing this study can measure, and halves the disk (the bytes per token in the cell
# before), which is why bf16 is the default for stored taps (notebook 01). (The shipped heads' records, printed
# at the top of this chapter and in 04, name their data files and training precision, the bf16 autocast, but not
# the dtype of the taps they read.) Online features trade that disk for a target forward each time a sequence
# is used: the right choice when the features of the data set would not fit on disk (notebook 01's table), the
# slower one when they do.
#
# ## 4 · Training
#
# ### One training row, planned by hand
#
# A packed row holds several sequences, one after the other (positions restart with each). Its **depth-0
# elements** are all its positions but the last of each sequence (which has no next token: 446 of the 448 tokens
# printed below); of those, the **anchors** are trained (the response positions and the last prompt position)
# and the rest are context only. Depth `d >= 1` keeps a sample of the anchors, each element `(a, d)` sitting at
# position `a + d` and predicting the target's token `d + 1` steps past its anchor, `y[a+d+1]`; an anchor too near
# its sequence's end has no such label and drops out. The sample is **COD** (*conditional drop-token*, from
# PARD): depth `d` keeps `round(anchors x max(ratio^d, min_ratio))` of them, drawn at random from the anchors
# kept at depth `d - 1`, so the sets are nested (a rollout kept at depth d exists at every depth before it) and
# the deep depths cost a fraction of the compute.
#
# The cell writes that planning in about 25 lines (`plan_row_by_hand`) and checks it against the package's
# `plan_row` (`training/elements.py` and `training/cod.py`), which the trainer calls for every row: given the same
# seeded generator, both must pick the same elements at every depth, with the same positions and labels.
#
# ### Exercise: predict the size of a row
#
# The cell plans one row of two sequences with the shipped recipe's COD (`RATIO = 0.7`, floor `MIN_RATIO = 0.2`,
# 8 depths), then with `RATIO = 0.5`, then with 4 depths. Predict first: the elements per depth and in all for
# each. Then edit the settings and try others.
#
# <details><summary>Answer</summary>
#
# Depth 0 does not change (446: every position with a next token), nor do the 320 trained anchors. With 0.7 each
# deeper depth keeps about 0.7 times the one above (222, 154, 107, 74 in the saved run), until the floor, 20% of
# the anchors (64, less the few near a sequence's end), holds it flat (60, 60, 60). With 0.5 the counts halve
# (159, 78) and hit the floor from depth 3 on (0.5³ = 0.125 is under 0.2), so the row holds fewer elements in all
# (993 against 1,183). With 4 depths the row has the first four entries of the 8-depth row, exactly (the same
# seed draws the same subsets in the same order), and 929 elements. The number of elements is what a training
# step costs, so COD is what makes training K depths cost less than K times one depth.
#
# </details>

# %% tags=["smollm2-fact", "nbval-check-output"]
def plan_row_by_hand(row, num_depths, ratio, min_ratio, generator):
    """A packed row's training elements, depth by depth: one dict of tensors per depth (g: the element's index among
    depth 0's; seq; anchor_pos a; pos a + d; flat: where x_{a+d+1} and its label y_{a+d+1} sit in the row)."""
    seq, pos, flat, end, anchor, off = [], [], [], [], [], 0
    for s_id, s in enumerate(row):  # sequences of 2+ tokens, packed one after the other; positions restart
        T = len(s["input_ids"])
        t = torch.arange(T - 1)  # every position with a next token is a depth-0 element
        seq.append(torch.full((T - 1,), s_id))
        pos.append(t)
        flat.append(off + t + 1)
        end.append(torch.full((T - 1,), off + T))  # one past the sequence's last token
        anchor.append(t >= s["prompt_len"] - 1)  # trained: the response positions and the last prompt position
        off += T
    seq, pos, flat, end, anchor = (torch.cat(v) for v in (seq, pos, flat, end, anchor))
    depths = [dict(g=torch.arange(len(seq)), seq=seq, anchor_pos=pos, pos=pos, flat=flat, loss=anchor)]
    anchors = anchor.nonzero().squeeze(1)  # depth-0 indices of the anchors
    kept = torch.arange(len(anchors))  # COD: the anchors kept at the depth before (all, at depth 0)
    for d in range(1, num_depths):
        n = max(1, round(len(anchors) * max(ratio ** d, min_ratio)))  # a share ratio^d, never under the floor
        kept = kept[torch.randperm(len(kept), generator=generator)[:n]].sort().values  # nested in the depth before
        g = anchors[kept]
        g = g[flat[g] + d < end[g]]  # the label y_{a+d+1} must exist: anchors near a sequence's end drop out
        if len(g) == 0:
            break
        depths.append(dict(g=g, seq=seq[g], anchor_pos=pos[g], pos=pos[g] + d, flat=flat[g] + d))
    return depths


MIN_RATIO = 0.2
for RATIO, NUM_DEPTHS in ((0.7, 8), (0.5, 8), (0.7, 4)):  # the shipped recipe, then the exercise; edit to try others
    mine = plan_row_by_hand(seqs[:2], NUM_DEPTHS, RATIO, MIN_RATIO, generator=torch.Generator().manual_seed(0))
    pkg = plan_row(seqs[:2], NUM_DEPTHS, RATIO, MIN_RATIO, generator=torch.Generator().manual_seed(0))
    same = len(mine) == len(pkg.depths) and all(torch.equal(m[k], getattr(p, k))
                                                for m, p in zip(mine, pkg.depths) for k in m)
    print(f"COD {RATIO} (floor {MIN_RATIO}), {NUM_DEPTHS} depths: elements per depth {[len(m['g']) for m in mine]}, "
          f"{sum(len(m['g']) for m in mine):,} in all; by hand == plan_row: {same}")
plan = plan_row(seqs[:2], 8, 0.7, MIN_RATIO, generator=torch.Generator().manual_seed(0))  # the row used below
print(f"a row of 2 sequences ({len(plan.x)} tokens): depth 0 trains {int(plan.depths[0].loss.sum())} anchors "
      f"(response positions + the last prompt position); its other {int((~plan.depths[0].loss).sum())} elements "
      f"are context only")

# %% [markdown]
# ### The training forward, depth by depth, by hand
#
# What a training step computes on that row. The head (untrained, as a run starts) runs over the planned elements
# **depth by depth through one drafter KV cache**: depth 0 reads every position (token `x[t+1]`, the fused taps
# of `t`); depth `d >= 1` adds one mask slot per kept anchor (the mask token and `fc(mask_hidden)`, notebook 02),
# whose keys and values are appended to the same cache, so later depths attend to earlier ones. Which keys a
# query may read is notebook 02's training-mask rule, written here as one boolean expression: the same sequence,
# and either a depth-0 key with anchor `<= a` (the context) or a key of its own rollout. The building blocks are
# the package's decoder layer, rotary tables, final norm and `lm_head` (notebook 02 wrote the same layer out in
# plain PyTorch); `RowCache` stands in for the package's `DrafterCache`; `tr.fuse` and `tr.mask_slot_hidden` are
# the head's `fc` as the trainer holds it (in units of the taps' scale: the same function). The trainer runs this as
# `DraftTrainer.run_depths` (`training/objective.py`, with the mask from `training/mask.py`); the check cell
# after the EAGLE-3 unroll compares the logits.
#
# Then the loss: each depth's cross-entropy over its trained anchors against the target's greedy token `d + 1`
# steps past the anchor, mapped into the draft vocabulary (a label outside it is skipped); the loss is the mean
# over depths, each depth weighted equally. The trainer does exactly this for every packed row of every step
# (`DraftTrainer.forward`), then backpropagates.

# %%
class RowCache:
    """ONE drafter KV cache for the whole row: each depth appends its keys and values after the depths before."""

    def __init__(self):
        self.k, self.v = {}, {}

    def update(self, layer, k, v):  # the attention of `layer` calls this with the new slots' (1, heads, Q, hd)
        if layer in self.k:
            k, v = torch.cat([self.k[layer], k], dim=2), torch.cat([self.v[layer], v], dim=2)
        self.k[layer], self.v[layer] = k, v
        return k, v  # the queries attend over every key cached so far, through the mask


def run_depths_by_hand(tr, plan):
    """Draft-vocabulary logits of every element, depth by depth (parallel mode, learned stand-ins)."""
    head, cache, out = tr.head, RowCache(), []
    ks, ka, kd = (torch.zeros(0, dtype=torch.long, device=plan.x.device) for _ in range(3))  # who each key is
    for d, el in enumerate(plan.depths):
        if d == 0:  # every position t: token x_{t+1} with the fused taps of t
            ids, hidden = plan.x[el.flat], tr.fuse(plan.taps.to(tr.fc_weight.dtype))
        else:  # one mask slot per kept anchor: the mask token with fc(mask_hidden)
            ids = torch.full_like(el.pos, head.config.mask_token_id)
            hidden = tr.mask_slot_hidden().reshape(1, -1).expand(len(ids), -1)
        ks, ka = torch.cat([ks, el.seq]), torch.cat([ka, el.anchor_pos])  # the keys this depth adds to the cache
        kd = torch.cat([kd, torch.full_like(el.seq, d)])
        s, a = el.seq[:, None], el.anchor_pos[:, None]
        # notebook 02's rule: same sequence, and a depth-0 key with anchor <= a or a key of the query's own rollout
        mask = (ks == s) & (((kd == 0) & (ka <= a)) | ((kd > 0) & (ka == a)))
        cos, sin = head.rotary(el.pos[None], hidden.dtype)  # RoPE at position a + d
        h, residual = hidden[None], None
        for i, layer in enumerate(head.decoder_layers):  # the package's decoder layer, written out in notebook 02
            h, residual = layer(head.embed_tokens(ids)[None], h, residual, cos, sin, mask[None, None], cache, i)
        out.append(head.lm_head(head.norm(h + residual))[0])  # final norm, lm_head over the draft vocabulary
    return out

# %% tags=["nbval-ignore-output"]
import torch.nn.functional as F

cfg = TrainConfig(mode="parallel", num_depths=8, layers=1, draft_vocab_size=draft_vocab_size_for(model, 8192),
                  steps=settings.pick(30, 6),
                  warmup_steps=settings.pick(6, 1), lr=2e-3, batch_tokens=settings.pick(1024, 256), row_tokens=512,
                  mask_token_id=MASK_ID, save_every=settings.pick(10, 2), seed=0, target=TARGET)
module = Trainer(cfg, model, seqs, tokenizer, TrainerOptions(progress=False, verbose=False)).module  # head + loss
row = plan.to(module.tap_scale.device)
with torch.no_grad():
    logits = run_depths_by_hand(module, row)  # per depth: (elements, draft vocabulary) logits
    pkg_logits, _ = module.run_depths(row)
    fwd_gap = max((m - p).abs().max().item() for m, p in zip(logits, pkg_logits))
    by_hand = []
    for d, (el, lg) in enumerate(zip(row.depths, logits)):
        labels = module.t2d_index[row.y[el.flat]]  # the target's token d + 1 past the anchor, as a draft id (-1: none)
        keep = el.loss & (labels >= 0)
        by_hand.append(F.cross_entropy(lg[keep].float(), labels[keep]))
        print(f"depth {d}: {len(el.flat):4d} elements, {int(el.loss.sum()):4d} trained anchors, "
              f"{int(keep.sum()):4d} with a label in the draft vocabulary, cross-entropy {by_hand[-1]:.3f}")
    loss, _ = module(row)
print(f"largest logit difference, by hand vs DraftTrainer.run_depths: {fwd_gap:.1e}")
print(f"mean over depths {torch.stack(by_hand).mean():.4f}; DraftTrainer.forward on the same row {loss:.4f}")
del module, logits, pkg_logits  # one head in training at a time: an 8B target's head and its optimizer take ~7 GB
release()

# %% [markdown]
# ### EAGLE-3's training, unrolled by hand: the training-time test
#
# A sequential (EAGLE-3) head drafts slot 2 from its **own** output: the token it drafted and its own prenorm
# state of slot 1, not the target's. Training it on the target's states alone would teach it inputs it never
# sees when drafting, so EAGLE-3 trains with the *training-time test*: for every anchor `a` it unrolls K steps as
# drafting does, each step appending one slot that holds the data's next token and the drafter's own prenorm state
# of the step before; step `d` predicts the target's token `d + 1` past the anchor. The package computes all
# anchors of a step in one pass (`run_depths` in sequential mode, through the training mask); the cell below
# unrolls each anchor of a short sequence on its own, with plain calls of the head (the shipped EAGLE-3 head when
# it fits the target, else a fresh one: the check holds for any weights), and compares the logits of every
# element and the loss (each depth's cross-entropy over its anchors, then the mean over depths).

# %% tags=["nbval-ignore-output"]
from dataclasses import replace

from peagle_lab.drafter.heads import head_for_target

seq_head, seq_info = head_for_target("sequential", model, tokenizer, TARGET)
fits = seq_info["origin"] != "fresh"
D = 4  # steps (depths) unrolled
ttt_cfg = replace(cfg, mode="sequential", num_depths=D, init_from=seq_info["path"] if fits else None,
                  draft_vocab_size=seq_head.config.draft_vocab_size if fits else cfg.draft_vocab_size)
del seq_head
ttt = Trainer(ttt_cfg, model, seqs, tokenizer, TrainerOptions(progress=False, verbose=False)).module.eval()
L = seqs[0]["prompt_len"] + 16  # the prompt and 16 response tokens
short = dict(seqs[0], input_ids=seqs[0]["input_ids"][:L], labels=seqs[0]["labels"][:L], taps=seqs[0]["taps"][:L])
ttt_plan = plan_row([short], D, ratio=1.0, min_ratio=1.0)  # every anchor at every depth
with torch.no_grad():
    ttt_logits, _ = ttt.run_depths(ttt_plan)
    ttt_loss, _ = ttt(ttt_plan)
    head = ttt.sync_head()
    x, y, h = (short[k].to(DEVICE) for k in ("input_ids", "labels", "taps"))
    ttt_worst, ce = 0.0, [[] for _ in range(D)]
    for a in ttt_plan.depths[0].anchor_pos[ttt_plan.depths[0].loss].tolist():
        tokens, hidden = x[1:a + 2], head.fuse(h[:a + 1].float())  # context slots 0..a: x_{t+1}, fc(h_t)
        for d in range(min(D, L - a - 1)):  # step d sits at position a + d and predicts y_{a+d+1}
            logits, prenorm = head(tokens[None], hidden[None], torch.arange(a + d + 1, device=DEVICE)[None])
            i = int((ttt_plan.depths[d].anchor_pos == a).nonzero())
            ttt_worst = max(ttt_worst, (logits[0, -1] - ttt_logits[d][i]).abs().max().item())
            label = ttt.t2d_index[y[a + d + 1]]  # as a draft id; -1: outside the draft vocabulary, skipped
            if label >= 0:
                ce[d].append(F.cross_entropy(logits[0, -1].float(), label))
            # the training-time test: the next slot holds the data's next token and the drafter's OWN state
            tokens, hidden = torch.cat([tokens, x[a + d + 2:a + d + 3]]), torch.cat([hidden, prenorm[0, -1:]])
ttt_by_hand = torch.stack([torch.stack(c).mean() for c in ce if c]).mean().item()
print(f"EAGLE-3 head {seq_info['source']}, {L} tokens, {D} steps: elements per depth "
      f"{[len(el.g) for el in ttt_plan.depths]}; largest logit difference, unrolled vs run_depths {ttt_worst:.1e}; "
      f"loss by hand {ttt_by_hand:.4f}, DraftTrainer.forward {ttt_loss:.4f}")
del ttt, head, ttt_logits
release()

# %% tags=["nbval-check-output"]
print("P-EAGLE row: the depth-by-depth forward by hand equals DraftTrainer.run_depths (logits within 1e-4):",
      fwd_gap < 1e-4)
print("P-EAGLE row: the loss by hand equals DraftTrainer.forward (within 1e-4):",
      abs(torch.stack(by_hand).mean().item() - loss.item()) < 1e-4)
print("EAGLE-3 training-time test: the unroll by hand equals the sequential objective (logits and loss within 1e-4):",
      ttt_worst < 1e-4 and abs(ttt_by_hand - ttt_loss.item()) < 1e-4)

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
# This run keeps a draft vocabulary of 8192 ids (`draft_vocab_size_for(model, 8192)`: at most the target's
# vocabulary), larger than the shipped heads' (their `config.json`): the coverage table above shows what each size
# keeps, and a larger one costs a larger `lm_head`.
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
peak = max(log, key=lambda r: r["loss"])
below = next((r["step"] for r in log if r["loss"] < math.log(cfg.draft_vocab_size)), None)
print(f"loss at step 1: {log[0]['loss']:.2f} (ln {cfg.draft_vocab_size} = {math.log(cfg.draft_vocab_size):.2f}); "
      f"highest {peak['loss']:.2f} at step {peak['step']} (warm-up: {cfg.warmup_steps} steps); "
      + (f"first below the uniform guess at step {below}" if below is not None
         else f"not below the uniform guess within the {len(log)} steps"))

head = res.head
own = {n: p.numel() for n, p in head.named_parameters() if n != "embed_tokens.weight"}
print(f"\nthe head: {sum(own.values()) / 1e6:.2f} M parameters of its own (embedding table of "
      f"{head.embed_tokens.weight.numel() / 1e6:.1f} M shared with the target, one row learned):")
for name, n in own.items():
    print(f"  {name:45s} {n:>10,}")

from peagle_lab.workbook import report

report.record("nb03_train_steps", res.steps_done)
report.record("nb03_final_depth_accuracy", acc)

from peagle_lab.training.evaluate import EvalSettings, evaluate_head

K_EVAL = 4
ev = evaluate_head(model, tokenizer, head.to(DEVICE, next(model.parameters()).dtype).eval(),
                   load_scale_records("val")[: settings.pick(2, 1)],
                   EvalSettings(ks=(K_EVAL,), max_new_tokens=settings.pick(48, 16)), progress=False)
print(f"\nthe head just trained, drafting in the speculative loop: acceptance length "
      f"{ev['acceptance_length'][K_EVAL]:.2f} at K={K_EVAL} over {ev['rounds'][K_EVAL]} rounds ({ev['prompts']} "
      f"held-out prompt(s) of the scale mix x {ev['max_new_tokens']} new tokens, {str(model.dtype).split('.')[-1]}); "
      f"per-position acceptance {ev['per_position_acceptance'][K_EVAL]}; output identical to plain greedy: "
      f"{ev['lossless']}")

# %% [markdown]
# **Reading it.** The loss starts above the uniform guess's (the `loss at step 1` line); in the first steps it
# can climb further while the warm-up raises the learning rate to its peak, and then it falls: the same line
# names its highest step and the step at which it first drops below the uniform guess, if it does in this run. A run this short teaches
# the head little, and the per-depth accuracy line says where it sits: depth 0 (slot 1, the token right after
# the anchor, predicted from the target's own features of the anchor) learns first; the deeper depths, which see
# only mask slots, learn slower. The last line puts the head to work: drafting in the real speculative loop on
# held-out prompts, its acceptance length (with the rounds it rests on) is what this little training buys, and
# the output is still the target's own. In its per-position list, `None` marks a draft no round reached (05 prints
# the same as `-`). Notebook 04 shows what far more training buys at each depth, and notebook
# 05's acceptance ledger lists the acceptance lengths of the shipped heads.
#
# What was trained (the parameter list above): one decoder layer whose attention reads `[embedding, fused
# hidden]` (2H), the `fc` that fuses the three taps, `mask_hidden`, the mask token's embedding row, and the final
# norm and lm_head over the draft vocabulary. The embedding table itself is the target's and is not counted as
# the head's.

# %% [markdown]
# ## What we saw
#
# - The training text is the target's own answers (self-distillation), and the committed study shows why: at
#   the same number of steps, the head trained on them accepts more on held-out prompts than one trained on human
#   text, by more than the seed spread of either arm (the verdict line).
# - The draft vocabulary keeps the tokens the target uses; `d2t` / `t2d` map draft ids to target ids, and a
#   head whose `lm_head` does not match its draft vocabulary is refused before it is served.
# - Features are the three tapped hidden states plus the greedy label; offline bf16 shards are read back far
#   faster than the target forward they replace (the two rates printed), at no cost in acceptance the storage
#   study can measure.
# - One packed row trains every depth at once, COD keeping a shrinking, nested share of anchors deeper. Both halves
#   of the trainer's core were written here in a few dozen lines and match the package: the COD plan of a row (the
#   same elements at every depth as `plan_row`, given the same seed) and the depth-by-depth forward through one KV
#   cache with the training mask (the logits of `run_depths`, the largest difference printed); the loss of a row
#   computed from them equals the trainer's, and EAGLE-3's training-time test, unrolled by hand (each step feeding
#   the drafter's own state back), equals the package's sequential objective. Training resumes from its checkpoint
#   to the same result as an uninterrupted run, and the head it trains drafts in the real loop.
#
# Next, `04_scale_and_acceptance`: the shipped heads trained on far more tokens, what that buys per depth,
# a head for your own model (shown on a second architecture), and why acceptance stays below the paper's.
