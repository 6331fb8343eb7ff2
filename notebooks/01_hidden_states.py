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
# # 01 · Hidden states: what the drafter reads
#
# **Goal:** learn which three target hidden states, the *taps*, a drafter reads, and what storing them costs.
#
# The drafter is the small EAGLE-3 or P-EAGLE model that proposes tokens for the big *target* to check (00). All
# outputs here are live; only the extraction speed varies between runs.

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, precision, settings

model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))

# %% [markdown]
# ## One forward, three taps
#
# The drafter reads three hidden states side by side: 3H numbers per position, with H the hidden size. Its `fc` layer
# projects them back to H. For L layers, vLLM's EAGLE-3 code taps 2, L//2 and L-3 by default (read in its source,
# not run here).

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.prompts import chat_ids
from peagle_lab.features.taps import default_tap_layers, target_forward

L, H = model.config.num_hidden_layers, model.config.hidden_size
TAPS = default_tap_layers(L)
ids = chat_ids(tokenizer, "Write a Python function that checks whether a number is prime.")
x = torch.tensor([ids], device=DEVICE)
with torch.no_grad():
    fwd = model(x, output_hidden_states=True, use_cache=False)
hs = fwd.hidden_states  # a tuple: the embedding output, then the output of every layer
taps = torch.cat([hs[i] for i in TAPS], dim=-1)  # the three taps side by side: 3H features per position
print(f"{L} layers, hidden {H}, taps {TAPS}")
print(f"input_ids {tuple(x.shape)} -> {len(hs)} hidden states of {tuple(hs[0].shape)}, "
      f"logits {tuple(fwd.logits.shape)}")
print(f"taps = cat(hidden_states[{TAPS[0]}], [{TAPS[1]}], [{TAPS[2]}]): {tuple(taps.shape)} (= 3 x {H})")
with torch.no_grad():
    out = target_forward(model, x, TAPS, use_cache=False)  # the package's version of the same forward
print("equal to the package's target_forward taps:", torch.equal(taps, out.taps))

# %% [markdown]
# **Reading it.** One forward pass gives all three taps: layers 2, 15 and 27 of 30.
#
# ## Which state is "tap i"?
#
# - **vLLM**: tap `i` is the residual stream **entering** layer `i`. The residual stream is the running sum each layer
#   adds its output to.
# - **transformers**: `hidden_states[i]` is the input of layer `i`, except `hidden_states[L]`, taken **after** the final
#   norm.
#
# They agree for every i < L. The trap is a layer's *output*, `hidden_states[i + 1]`: one layer off. The next cell
# checks this with hooks.
#
# With the same head, 08's acceptance length (tokens per round, 00) and per-slot acceptance rates equal ours: consistent
# with vLLM tapping the same way. Greedy tokens could not show it, since no drafter changes them.

# %% tags=["nbval-check-output"]
seen, last = {}, {}


def record_input(i):  # forward pre-hook: what enters decoder layer i
    def hook(module, args, kwargs):
        seen[i] = args[0] if args else kwargs["hidden_states"]
    return hook


def record_output(module, args, output):  # forward hook: what leaves the last decoder layer
    last["out"] = output


hooks = [layer.register_forward_pre_hook(record_input(i), with_kwargs=True)
         for i, layer in enumerate(model.model.layers)]
hooks.append(model.model.layers[-1].register_forward_hook(record_output))
with torch.no_grad():
    out = target_forward(model, x, TAPS, use_cache=False)
    hs = model(x, output_hidden_states=True, use_cache=False).hidden_states
for h in hooks:
    h.remove()

print("len(hidden_states) == L + 1:", len(hs) == L + 1)
print("hidden_states[i] == input of layer i, for every i < L:", all(torch.equal(hs[i], seen[i]) for i in range(L)))
print("taps[..., j*H:(j+1)*H] == input of layer TAPS[j], for each of the 3 taps:",
      all(torch.equal(out.taps[..., j * H:(j + 1) * H], seen[i]) for j, i in enumerate(TAPS)))
print("hidden_states[L] == output of the last layer:       ", torch.equal(hs[L], last["out"]))
print("hidden_states[L] == final_norm(output of last layer):", torch.equal(hs[L], model.model.norm(last["out"])))

# %% [markdown]
# **Reading it.** Tap `i` is the input of layer `i`; the last entry is the final norm's output.
#
# ## How big, how different?
#
# The plot compares the norm at position 0 with the other positions. Position 0 is what the literature calls an
# *attention sink*: heads with nothing to attend to put their weight there. This chapter shows its norm, not the
# attention weights.

# %%
import matplotlib.pyplot as plt

from peagle_lab.workbook.lens import cosine_matrix, plot_similarity, residual_stream

states = residual_stream(model, ids)  # (L + 1, T, H): inputs of layers 0..L-1, then the pre-norm output
norms = states.norm(dim=-1)
fig, ax = plt.subplots(figsize=(8, 3.2))
ax.semilogy(norms[:, 0].cpu(), label="position 0")
ax.semilogy(norms[:, 1:].mean(-1).cpu(), label="other positions (mean)")
for t in TAPS:
    ax.axvline(t, color="red", ls=":", lw=1)
ax.set_xlabel(f"layer whose input it is (red: taps; {L} = output of the last layer)")
ax.set_ylabel("L2 norm")
ax.legend()
ratio = norms[:, 0] / norms[:, 1:].mean(-1)
print("position 0's norm over the other positions' mean, at the taps: "
      + ", ".join(f"tap {t}: {ratio[t]:.0f}x" for t in TAPS))

# %% [markdown]
# **Reading it.** Position 0's norm is 151x the other positions' mean at tap 15 and 51x at tap 27 (5x at tap 2). It
# would swamp any comparison, so the cosines below skip it.

# %% tags=["smollm2-fact", "nbval-check-output"]
sim = cosine_matrix(states, skip_first=1)
tap_sim = sim[list(TAPS)][:, list(TAPS)]
for i, row in zip(TAPS, tap_sim.tolist()):
    print(f"tap {i:2d}: " + "  ".join(f"{v:.2f}" for v in row))

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5.2), gridspec_kw={"width_ratios": [1, 1.2]})
plot_similarity(tap_sim, labels=TAPS, title="the three taps", annotate=True, ax=ax1)
plot_similarity(sim, labels=[*range(L), f"{L} out"], highlight=TAPS, ax=ax2,
                title="input of every layer (taps in red)")
fig.tight_layout();

# %% [markdown]
# **Reading it.** The three taps differ: cosine 0.76 between taps 2 and 15, 0.43 between 15 and 27, 0.34 between 2
# and 27.
#
# Gaps of nearly equal length give very different cosines (13 layers from 2 to 15: 0.76; 12 from 15 to 27: 0.43), so
# layer distance alone does not set them. The right plot suggests what else does: read by eye (no cell prints it),
# most layers, from the first few on, form one block of near-parallel neighbours and the last few a second, and tap
# 27 sits in the second.
#
# ## Logit lens: what each tap already predicts
#
# The *logit lens* reads a state through the final norm and the output layer `lm_head`, as if the model stopped
# there. The next cell reads the last position.

# %%
from peagle_lab.workbook.lens import logit_lens

probs, top = logit_lens(model, states[:, -1], k=3)
rows = sorted({0, *TAPS, L - 1, L})
for i in rows:
    name = f"tap {i}" if i in TAPS else ("out" if i == L else f"layer {i}")
    guesses = "  ".join(f"{tokenizer.decode([t])!r} {p:.2f}" for p, t in zip(probs[i].tolist(), top[i].tolist()))
    print(f"{name:>9}: {guesses}")
print("current token (the prompt's last):", repr(tokenizer.decode(ids[-1:])),
      "| first answer token:", repr(tokenizer.decode(top[L, :1])))
first_top = next(i for i in range(L + 1) if top[i, 0] == top[L, 0])
print(f"the model's choice is the lens's top-1 first at {'the output' if first_top == L else f'layer {first_top}'} "
      f"(of {L} layers)")

# %% tags=["nbval-check-output"]
lens_probs, lens_top = logit_lens(model, states[L], k=1)
print("lens on the last layer's output == the model's own prediction, at every position:",
      torch.equal(lens_top[:, 0], out.logits[0].argmax(-1)))

# %% [markdown]
# **Reading it.** Each tap leans towards a different next token. The model's choice, three backticks, leads only at
# the output (0.65).
#
# ### Exercise: tap other layers
#
# The cell below counts how often each tap's lens top-1 is the model's next token, for vLLM's taps, `(1, 2, 3)` and
# `(L - 4, L - 3, L - 2)`. Predict which tap agrees most, and which set you would give a drafter.
#
# <details><summary>Answer</summary>
#
# - Late layers agree most: 34-51%, against 0-2% for `(1, 2, 3)`.
# - But layers 26 to 28 sit in one near-parallel block, so they likely give a drafter much the same view three times.
#   That is a reading of the heatmap; no head here trains on them. vLLM's spread gives three different views.
# - Test your pick with `peagle-lab train --tap-layers`; compare two settings at an equal budget with
#   `peagle-lab recipe`.
#
# </details>

# %%
own_choice = out.logits[0, 1:].argmax(-1)
for MY_TAPS in (TAPS, (1, 2, 3), (L - 4, L - 3, L - 2)):  # vLLM's, then the exercise's two sets; edit to try others
    _, lens_top = logit_lens(model, states[list(MY_TAPS), 1:], k=1)  # (taps, T - 1, 1); position 0 left out
    agree = [f"tap {i}: {(row == own_choice).float().mean():.0%}" for i, row in zip(MY_TAPS, lens_top[..., 0])]
    print(f"taps {tuple(MY_TAPS)}: lens top-1 == the model's next token at  " + ",  ".join(agree)
          + f"  (of {len(own_choice)} positions)")

# %% [markdown]
# ## What offline features cost on disk
#
# Training needs every token's taps: stored once (*offline*: fast epochs, huge disk) or recomputed each step
# (*online*: no disk). Offline bf16 costs 3 x H x 2 bytes per token, plus int32 ids for the token and its greedy
# label, the target's top-1 next token.

# %% tags=["nbval-check-output"]
from peagle_lab import features

print(features.format_cost_table(features.disk_cost_table()))
one_state = features.estimate_bytes(68_000 * 1_500, 4096, n_taps=1)
print(f"\none stored state (EAGLE-1/2), Llama-3.1-8B, ShareGPT-like: {features.format_bytes(one_state)}")

# %% [markdown]
# **Reading it.** Stored taps are huge: 2.5 TB for Llama-3.1-8B on a ShareGPT-sized set, so at that scale a recipe
# trains online or stores a subset. Even one state per token, as the earlier EAGLE-1/2 read, takes 836.4 GB.
#
# ## Extracting features for training
#
# `extract_features` writes 64 prompts' features as *shards* (files of up to 16 sequences) plus a manifest. Taps are
# stored in **bfloat16**, ids and labels in int32, read back as int64. 03 compares fp32 and extracts from the target's
# own answers.

# %%
import shutil

from peagle_lab.features import ExtractionSettings, FeatureDataset, extract_features
from peagle_lab.prompts import load_train_prompts

N_PROMPTS = settings.pick(64, 16)
sequences = [chat_ids(tokenizer, p) for p in load_train_prompts(N_PROMPTS)]
out_dir = settings.results_dir() / "features" / f"01-{N_PROMPTS}-prompts"
shutil.rmtree(out_dir, ignore_errors=True)  # a fresh run for this demo
result = extract_features(model, sequences, out_dir, ExtractionSettings(shard_size=16, target=TARGET))

# %% [markdown]
# **Reading it.** The disk estimate holds: 12.8 MB predicted and written. Only complete shards are written, so a rerun
# redoes only the missing ones. The next cell reruns, then asks for other taps.

# %%
from peagle_lab.errors import PeagleError

again = extract_features(model, sequences, out_dir, ExtractionSettings(shard_size=16, target=TARGET))
try:
    extract_features(model, sequences, out_dir, ExtractionSettings(tap_layers=(1, 2, 3), shard_size=16, target=TARGET))
except PeagleError as err:
    print("\nrefused:", err)

# %% [markdown]
# **Reading it.** The rerun skipped all 4 shards, and other taps were refused, not mixed in. `FeatureDataset` gives
# training one dict per sequence.

# %% tags=["smollm2-fact", "nbval-check-output"]
ds = FeatureDataset(out_dir)
rec = ds[0]
print({k: (tuple(v.shape), str(v.dtype)) for k, v in sorted(rec.items())})
print("tap layers:", ds.tap_layers, "| taps stored as", ds.manifest["taps_dtype"])
with torch.no_grad():
    fresh = target_forward(model, rec["input_ids"][None].to(DEVICE), TAPS, use_cache=False).taps[0]
print("stored taps == a fresh forward rounded to bf16:", torch.equal(rec["taps"], fresh.to(torch.bfloat16).cpu()))
print("greedy label after the prompt:", repr(tokenizer.decode(rec["greedy_next"][-1])))

# %%
from peagle_lab import hardware
from peagle_lab.workbook.report import record

print(f"extraction: {result.tokens_per_s:.0f} tokens/s over {result.num_tokens:,} tokens; "
      f"{features.format_bytes(result.bytes_on_disk)} on disk "
      f"(estimate {features.format_bytes(result.estimate_bytes)})")
print(hardware.describe(DEVICE))
for key, value in [("extract_tokens_per_s", round(result.tokens_per_s, 1)), ("extract_tokens", result.num_tokens),
                   ("extract_bytes_on_disk", result.bytes_on_disk), ("extract_estimate_bytes", result.estimate_bytes),
                   ("bytes_per_token_bf16", features.bytes_per_token(H))]:
    record(key, value, notebook="01_hidden_states")

# %% [markdown]
# ## What we saw
#
# **In one sentence:** An EAGLE drafter reads three of the target's hidden states, from a low, a middle and a high
# layer, and the three differ: in direction, and in how often they already point at the next token.
#
# - Tap `i` is `hidden_states[i]`, the input of layer `i`.
# - The three taps differ: cosine 0.34 to 0.76.
# - The lens finds the model's next token at 49% of positions at tap 27, at most 2% at the earlier taps.
# - Offline bf16 taps take 2.5 TB for Llama-3.1-8B on a ShareGPT-sized set.
# - Extraction resumes and refuses mixed settings.
#
# Next: `02_mask_tokens`, K draft tokens from one drafter pass.
