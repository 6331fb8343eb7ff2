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
# # 03 · Training data: the target's answers, the draft vocabulary, the features
#
# **Goal:** prepare everything a P-EAGLE head trains on, each piece built in view and checked against the package:
#
# 1. **Data**: the target answers the training prompts (question 7).
# 2. **Draft vocabulary**: which tokens the head may propose; the `d2t` / `t2d` maps (question 6).
# 3. **Features**: tapped hidden states, stored or recomputed, in bf16 or fp32 (question 2).
#
# 04 trains a head on them. Live cells run here, seeded. The studies are committed.

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
# A drafter learns to guess what **this target** says next, so it trains on the target's own text.
# `peagle-lab distill` has the target answer each prompt greedily and stores the token ids. The course keeps four
# such files, and the table says which heads read each:
#
# | file (`data/distill/`) | the target's answers to | read by |
# |---|---|---|
# | `smollm2-135m.jsonl` | 465 mixed training prompts (answers capped at 160 tokens; 141 ended on their own) | this chapter's examples and its draft-vocabulary count (section 2) |
# | `smollm2-135m-scale.jsonl.gz` | the whole **scale mix**, the course's large prompt set with a held-out split | the shipped heads (the runs below) |
# | `smollm2-135m-scale.jsonl` | 5,265 of the scale mix's prompts | the shipped EAGLE-3 head's first two runs; 05's learning curves |
# | `smollm2-135m-lists.jsonl` | templated requests for lists | 04's demonstration head (96 answers); 06's matched pair (480) |
#
# The first cell shows one answer of the first file. The second cell lists the runs behind each shipped head. **Distinct
# tokens** counts the tokens in the slice a run read (`records 6000:12000`), **tokens seen** those trained on. Their
# ratio is the epochs.

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

from peagle_lab.drafter.heads import SHIPPED
from peagle_lab.workbook.heads_report import training_runs

for kind, head_dir in SHIPPED.items():
    print(f"({kind}) " + "\n".join(training_runs(head_dir)))

# %% [markdown]
# ### Should the target write the answers itself? (question 7)
#
# The study (`peagle-lab study self-distill`) trains heads on prompts asking for functions of Python's standard
# library. One arm trains on **human answers** (the library's source), the other on the **target's own answers**. Both
# use the target's greedy tokens as labels.
#
# - **held-out AL**: acceptance length, the tokens a round commits, on 16 held-out prompts of the scale mix;
# - **seed spread**: the largest minus the smallest AL over the seeds. A gap counts only beyond both arms' spreads
#   (02 and 05 read gaps the same way, and call one firm beyond 0.052, the largest spread of any committed study);
# - **P(accept)**: the acceptance rates of slots 1 to 3 (00's p1, p2, p3).

# %% tags=["nbval-ignore-output"]
from IPython.display import Markdown, display

from peagle_lab.experiments import studies


def compare_arms(runs, a_name, b_name):
    """Both arms' mean held-out AL and seed spread, and the gap of ``a`` over ``b`` read by the course's rule
    (``studies.separated``: a gap counts beyond both spreads). Returns the gap and whether it counts."""
    arms = {r["setting"]: r for r in studies.summarize(runs)}
    a, b = arms[a_name], arms[b_name]
    gap, beyond = studies.separated(a, b)
    tokens = runs[0]["val_prompts"] * runs[0]["max_new_tokens"]  # per run; a round commits AL of them
    for r in (a, b):
        print(f"{r['setting']}: AL {r['acceptance_length']:.3f}, seed spread {r['seed_spread']:.3f}; slot 1 accepted "
              f"at {r['slots_1_3'][0]:.2f} in at most about {tokens / r['acceptance_length']:.0f} rounds per run")
    spread = max(a["seed_spread"], b["seed_spread"])
    print(f"gap {gap:+.3f} tokens per round, {'beyond' if beyond else 'within'} the larger seed spread ({spread:.3f})")
    return gap, beyond


def dtypes(runs):
    """The target's dtype and the heads' training autocast, as the runs record them."""
    seen = lambda get: "/".join(sorted({str(get(r)) for r in runs}))
    return (f"; target in {seen(lambda r: r['machine'].get('target_dtype'))}, heads trained under "
            f"{seen(lambda r: r.get('autocast'))} autocast") if runs else ""


sd_host, sd_runs = studies.committed("self-distill")
print(committed_label("The self-distillation study", sd_host) + dtypes(sd_runs))
display(Markdown(studies.summary_markdown(sd_runs)))
if sd_runs:
    seen = [r["tokens_seen"] for r in sd_runs]
    print(f"tokens seen per run: {min(seen):,} to {max(seen):,} "
          f"({100 * (max(seen) - min(seen)) / min(seen):.1f}% apart; the same {sd_runs[0]['steps']} steps each)\n")
    gap, beyond = compare_arms(sd_runs, "target's own answers", "human answers")
    print("verdict: " + (f"the target's own answers win by {gap:.3f} tokens per round" if beyond and gap > 0
                         else "the seeds cannot separate the two arms"))

# %% [markdown]
# **Reading it.** A head trained on the target's own answers accepts more: AL 1.380 against 1.245, a gap beyond the
# seed spread. The study shows the gap, not its cause.
#
# ## 2 · Draft vocabulary
#
# The head needs only the tokens the target writes, and a smaller output layer is cheaper. `build_draft_vocab` keeps
# the most frequent target ids, plus the mask token and EOS. **Coverage** is the share of response tokens the draft
# vocabulary can produce. A token outside it costs acceptance, never correctness.

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.training import pick_mask_token_id
from peagle_lab.drafter.vocab import build_draft_vocab, count_tokens, coverage

V = model.config.vocab_size
MASK_ID = pick_mask_token_id(tokenizer)
counts = count_tokens([r["input_ids"][r["prompt_len"]:] for r in records], V)
print(f"{int((counts > 0).sum()):,} distinct token ids among {int(counts.sum()):,} response tokens "
      f"(target vocabulary {V:,})")
sizes, covered = [n for n in (256, 512, 1024, 2048, 4096, 8192, 16384) if n < V] + [V], []
for size in sizes:
    ids = build_draft_vocab(counts, size, V, always=(MASK_ID, tokenizer.eos_token_id))
    covered.append(100 * coverage(counts, ids, V))
    print(f"draft vocabulary {size:>6,}: coverage {covered[-1]:6.2f}%  "
          f"(lm_head {size * model.config.hidden_size / 1e6:5.1f} M parameters)")

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(sizes, covered, "o-")
ax.axvline(4096, color="#999", ls=":", label="the shipped heads' 4,096 ids")
ax.set(xscale="log", xlabel="draft vocabulary size (ids, log scale)", ylabel="response tokens covered (%)",
       title="what share of the target's answers a draft vocabulary can write")
ax.legend(frameon=False, loc="lower right")
plt.show()

# %% [markdown]
# **Reading it.** 4,096 draft ids, the shipped size, cover 99.61% of the response tokens with an `lm_head` of 2.4 M
# parameters instead of 28.3 M. The curve flattens there: 256 ids already cover 70.44%, 2,048 cover 95.03%, and past
# 4,096 little is left to gain. This is in-sample, so expect less on other text.
#
# ### `d2t` and `t2d`, by hand (question 6)
#
# vLLM reads `d2t`: draft id `i` stands for target id `i + d2t[i]`. `t2d` marks the target ids the head can emit (the
# export drops it, notebook 08). A toy vocabulary of 8 ids shows both. Then the cell gives the shipped head an
# `lm_head` 96 rows short of the draft vocabulary. The export check refuses it.

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.drafter.vocab import d2t_t2d

toy = build_draft_vocab(counts, 8, V, always=(MASK_ID, tokenizer.eos_token_id))
d2t, t2d = d2t_t2d(toy, V)
for i, (tid, off) in enumerate(zip(toy.tolist(), d2t.tolist())):
    print(f"draft id {i}: target id {tid:>5} = {i} + d2t[{i}] (= {off:>5})   {tokenizer.decode([tid])!r}")
print(f"t2d: {t2d.dtype}, {t2d.numel():,} entries (one per target id), True at {t2d.nonzero().flatten().tolist()}")

from safetensors.torch import load_file

from peagle_lab.drafter import PEagleConfig
from peagle_lab.errors import PeagleError
from peagle_lab.serving.validation import validate_head

shipped_cfg = PEagleConfig.from_dir(SHIPPED["parallel"])
tensors = load_file(SHIPPED["parallel"] / "model.safetensors")
tensors["lm_head.weight"] = tensors["lm_head.weight"][:-96]  # 96 rows fewer than the draft vocabulary
try:
    validate_head(shipped_cfg, tensors)
except PeagleError as exc:
    print(exc)

# %% [markdown]
# ### Exercise: write `d2t` and `t2d`
#
# Write `my_d2t_t2d(draft_ids, vocab_size)` for a sorted tensor of draft ids: `d2t`, an int64 offset per draft id
# (draft id `i` stands for target id `i + d2t[i]`), and `t2d`, a bool per target id, True where the head can emit
# it. The check compares both with the package's `d2t_t2d` on 200 random draft vocabularies. Answer: the next cell.

# %%
def my_d2t_t2d(draft_ids, vocab_size):
    """The maps of a sorted draft vocabulary: (d2t, t2d) as vLLM reads them."""
    raise NotImplementedError("write me: about four lines")


def check_maps(rule, trials=200):
    """``rule`` against the package's d2t_t2d on random sorted draft vocabularies of random target vocabularies."""
    gen, right = torch.Generator().manual_seed(0), 0
    for _ in range(trials):
        v = int(torch.randint(8, 5000, (1,), generator=gen))
        ids = torch.randperm(v, generator=gen)[:int(torch.randint(1, v + 1, (1,), generator=gen))].sort().values
        mine, theirs = rule(ids, v), d2t_t2d(ids, v)
        right += all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(mine, theirs))
    print(f"your d2t and t2d equal the package's on {right} of {trials} random draft vocabularies")


try:
    check_maps(my_d2t_t2d)
except NotImplementedError as exc:
    print(f"my_d2t_t2d is not written yet ({exc}); the answer is the next cell")

# %%
# The answer. d2t holds offsets, not ids: vLLM adds d2t[i] to draft id i. t2d marks each kept target id.
def my_d2t_t2d(draft_ids, vocab_size):
    d2t = draft_ids - torch.arange(len(draft_ids))
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[draft_ids] = True
    return d2t, t2d


check_maps(my_d2t_t2d)

# %% [markdown]
# ## 3 · Features
#
# For each position `t`, one forward of the frozen target gives the **taps** `h_t` (three tapped hidden states, 3H
# values) and the greedy label `y_t`.
#
# ### Online or offline, bf16 or fp32? (question 2)
#
# Offline features are computed once and read back every epoch. Online features cost a target forward per use, but no
# disk. The cell extracts the features of the sequences 04 trains on, the target's answers to 96 **list requests**
# ("Write the letters of the alphabet from I to T, one per line"): text so predictable that 40 steps on this 2-core
# CPU give a head that visibly drafts. Then it compares the three ways on a few: speed, disk and error.

# %% tags=["nbval-ignore-output"]
from peagle_lab.drafter.heads import target_slug
from peagle_lab.settings import results_dir
from peagle_lab.training import prepare_sequences

from peagle_lab.features.identity import recorded_target_problem
from peagle_lab.settings import data_dir

N_SEQ = settings.pick(96, 16)
list_meta, list_answers = read_distilled(data_dir() / "distill" / "smollm2-135m-lists.jsonl")
OWN_LISTS = recorded_target_problem(list_meta, model) is None  # the list answers were made with this target
train_records = list_answers[:N_SEQ] if OWN_LISTS else distilled_records(model, tokenizer, N_SEQ, TARGET)
seqs = prepare_sequences(model, train_records, features_dir=results_dir() / "features" / target_slug(TARGET),
                         progress=False)
print(f"{len(seqs)} sequences ({'list answers' if OWN_LISTS else 'this target has no list answers: its own data'})"
      f", {sum(len(s['input_ids']) for s in seqs):,} tokens, taps {tuple(seqs[0]['taps'].shape[1:])}")

import tempfile
import time

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
print(f"bf16 shards: read back {rows[0]['seconds'] / rows[2]['seconds']:,.0f}x faster than the online forward, "
      f"on {rows[2]['disk'] / rows[1]['disk']:.2f}x float32's disk (timed live on {precision.host_slug(DEVICE)})")

# %% [markdown]
# **Reading it.** Storing features pays: bf16 shards read back 1,943x faster than the target forward, on half of
# float32's disk. They read back slower than float32 shards (636,355 against 1,618,552 tokens/s; the cause is not
# timed here), so bf16 is for disk, not speed.
#
# ### Does bf16 storage cost acceptance?
#
# bf16 rounds each tap (the largest error above). The committed storage study retrains 02's learned mask variant,
# trained there on float32 taps, on bf16 taps with the same settings and seeds. Both arms train under bf16 autocast,
# and autocast rounds `fc`'s input to bf16 in both: the float32 arm rounds the scaled taps once, the bf16 arm rounds
# the raw taps on disk first. So the study asks whether that extra rounding costs acceptance, not whether bf16
# training does (a float32-autocast arm would; it is not run).

# %% tags=["nbval-ignore-output"]
st_host, st_runs = studies.committed("storage")
mk_host, mk_runs = studies.committed("mask")
fp32_arm = [dict(r, name=r["name"].replace("learned (P-EAGLE)", "float32 taps"))
            for r in mk_runs if r["name"].startswith("learned (P-EAGLE)")]
print(committed_label("The storage study", st_host) + dtypes(fp32_arm + st_runs))
display(Markdown(studies.summary_markdown(fp32_arm + st_runs)))
print("taps dtype per arm:", {r["name"].split(" (seed")[0]: r.get("data") for r in fp32_arm + st_runs}, "\n")
gap, beyond = compare_arms(fp32_arm + st_runs, "bfloat16 taps", "float32 taps")
print("verdict: " + (f"bf16 taps change AL by {gap:+.3f}, beyond the seeds' noise" if beyond
                     else "bf16 taps cost no acceptance the seeds can measure"))

# %% [markdown]
# **Reading it.** The storage study finds no acceptance cost the seeds can measure: AL 1.210 on bf16 taps against 1.211
# on float32 taps, a gap of -0.001 inside the seeds' spread. So rounding the taps on disk has no cost these seeds can
# measure beyond what bf16 autocast already rounds, and bf16 storage is the default: half the disk for no measured
# loss.
#
# ## What we saw
#
# - Training on the target's own answers beats human answers: AL 1.380 against 1.245.
# - 4,096 draft ids cover 99.61% of the response tokens, in-sample; `d2t` stores offsets, `t2d` a mask.
# - bf16 feature shards read back 1,943x faster than a target forward, at no measurable AL cost.
#
# Next, `04_train_head`: a P-EAGLE head trained on these features by a loop written by hand, then drafting in 00's
# round.
