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
# # 01 · Hidden states: what the drafter reads
#
# **Goal:** know exactly which three hidden states of the target an EAGLE-3 or P-EAGLE drafter reads (the
# *taps*), what each of them knows, and what storing them for training costs.
#
# Plan: build the taps from one target forward, by hand; pin down which layer "tap i" is; compare the taps
# (norms, cosine similarity, logit lens) with an exercise on which layers to tap; price storing them on disk;
# extract them for training with the package.

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
# The three tapped states are concatenated along the feature axis: a drafter for a target of hidden size H
# reads 3H numbers per position (its `fc` layer projects them back to H). vLLM's default taps for an L-layer
# target are layers 2, L//2 and L-3: a low, a middle and a high layer.

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
print(f"input_ids {tuple(x.shape)} -> {len(hs)} hidden states of {tuple(hs[0].shape)}, logits {tuple(fwd.logits.shape)}")
print(f"taps = cat(hidden_states[{TAPS[0]}], [{TAPS[1]}], [{TAPS[2]}]): {tuple(taps.shape)} (= 3 x {H})")
with torch.no_grad():
    out = target_forward(model, x, TAPS, use_cache=False)  # the package's version of the same forward
print("equal to the package's target_forward taps:", torch.equal(taps, out.taps))

# %% [markdown]
# ## Which state is "tap i"?
#
# Two conventions meet here. A drafter trained on one and served with the other reads states one layer off, and
# nothing raises an error (the course does not measure how much acceptance that costs; the check below is what
# keeps the two in line).
#
# - **vLLM** (`eagle_aux_hidden_state_layer_ids`): tap `i` is the residual stream **entering** decoder layer `i`.
# - **transformers** (`output_hidden_states=True`): `hidden_states[0]` is the embedding output and
#   `hidden_states[i]` the output of layer `i-1`, which is the input of layer `i`. So tap `i` = `hidden_states[i]`.
#   But the last entry, `hidden_states[L]`, comes **after** the final norm: it is not a raw layer output.
#
# The cell checks all of it with hooks on the decoder layers, in the same forward that produces the taps.

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
# ## How big, how different?
#
# `residual_stream` collects the input of every layer, plus the last layer's output before the final norm.
# The first position is special: it acts as an *attention sink*, with a far larger norm than the others, so the
# comparisons below leave it out. In the figure its norm moves in jumps between some layers, down as well as up,
# while the mean of the other positions grows slowly: the three taps see the sink at very different scales.

# %%
import matplotlib.pyplot as plt

from peagle_lab.workbook.lens import cosine_matrix, plot_similarity, residual_stream

states = residual_stream(model, ids)  # (L + 1, T, H): inputs of layers 0..L-1, then the pre-norm output
norms = states.norm(dim=-1)
fig, ax = plt.subplots(figsize=(8, 3.2))
ax.semilogy(norms[:, 0].cpu(), label="position 0 (attention sink)")
ax.semilogy(norms[:, 1:].mean(-1).cpu(), label="other positions (mean)")
for t in TAPS:
    ax.axvline(t, color="red", ls=":", lw=1)
ax.set_xlabel(f"layer whose input it is (red: taps; {L} = output of the last layer)")
ax.set_ylabel("L2 norm")
ax.legend();

# %% [markdown]
# Cosine similarity between the three taps, averaged over positions: how much of the same information they carry.

# %% tags=["smollm2-fact", "nbval-check-output"]
sim = cosine_matrix(states, skip_first=1)
tap_sim = sim[list(TAPS)][:, list(TAPS)]
for i, row in zip(TAPS, tap_sim.tolist()):
    print(f"tap {i:2d}: " + "  ".join(f"{v:.2f}" for v in row))

# %%
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1, 1.6]})
plot_similarity(tap_sim, labels=TAPS, title="the three taps", annotate=True, ax=ax1)
plot_similarity(sim, labels=[*range(L), f"{L} out"], highlight=TAPS, ax=ax2,
                title="input of every layer (taps in red)")
fig.tight_layout();

# %% [markdown]
# Neighbouring layers are nearly parallel; layers far apart are not, and the last few layers form a block of
# their own. The taps are spread out so that each adds something the others lack: one tap alone would miss
# part of it, three taps cost three times the disk (below).
#
# ## Logit lens: what each tap already predicts
#
# Read a state through the target's own final norm and `lm_head`, as if the model stopped there. Here at the
# last position of the prompt, where the answer starts.

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
# Read the rows top to bottom. The input of layer 0 is the token embedding itself, so the lens reads back the
# current token (the prompt's last token, printed). With the embedded target: that token is `'\n'`, the three
# taps each put their own guess on top (`' ('`, `' I'`, `' Here'`), and the model's actual choice (three
# backticks, opening a code block) reaches the top of the lens only at the layer the last line names: the output
# itself, not even layer 29. Each tap holds a different view of "what comes next", and the drafter gets all three.
#
# ### Exercise: tap other layers
#
# The cell below reads every position of the prompt through the logit lens at each layer of a tap set and
# counts how often the lens's top token equals the model's own next token: vLLM's taps, then `(1, 2, 3)`, then
# `(L - 4, L - 3, L - 2)`. Predict first: which tap agrees most often, and which set would you rather give a
# drafter? Then edit the sets and try others.
#
# <details><summary>Answer</summary>
#
# Agreement rises with depth. vLLM's low and middle taps almost never agree (0% and 2% in the saved run) and its
# late tap about half the time (49%); the three early layers `(1, 2, 3)` agree almost never (0-2%: near the
# embedding, the lens mostly reads back the current token); the three late layers agree most (34-51%), since the
# lens reaches every position only at the output. Most next-token signal is not the same as the best drafter
# input, though, and the course trains no drafter on other taps to measure it: three late layers are nearly
# parallel (the similarity map above), so they add little to one another, and the drafter would lose the
# low-level view of the token and its context. vLLM's spread (low, middle, high) trades a little next-token
# signal for three different views; the drafter learns its own read-out through `fc`.
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
# Training reads the taps for every token of the training set. Either store them once (*offline*: fast epochs,
# huge disk) or run the target during training (*online*: no disk, a target forward per step). Per token,
# offline costs 3 x H x 2 bytes in bfloat16 plus two int32 ids (the token and the target's greedy label).

# %% tags=["nbval-check-output"]
from peagle_lab import features

print(features.format_cost_table(features.disk_cost_table()))
one_state = features.estimate_bytes(68_000 * 1_500, 4096, n_taps=1)
print(f"\none stored state (EAGLE-1/2), Llama-3.1-8B, ShareGPT-like: {features.format_bytes(one_state)}")
per_token = one_state / (68_000 * 1_500)
print(f"740 GB at the same {per_token:,.0f} B/token is {740e9 / per_token / 1e6:.0f}M tokens, "
      f"{740e9 / per_token / 68_000:,.0f} per sequence instead of 1,500")

# %% [markdown]
# The table prices full training sets, not what this notebook stores. The line under it: the same 8B set with
# the single state EAGLE-1 and -2 stored, the setting for which EAGLE's authors quoted 740 GB. The two figures
# assume the same 2-byte state of hidden size 4096; they differ in the token count. Ours is a round upper figure
# (every one of the 68k sequences a full 1,500 tokens); the last line turns 740 GB back into the tokens it
# implies at our bytes per token: somewhat shorter sequences on average. Same order of magnitude either way:
# hundreds of gigabytes for one state, terabytes for EAGLE-3's three (the table's 8B rows). Even the 135M
# target (its first row) needs hundreds of gigabytes for a ShareGPT-sized set; the 8B and 20B targets need
# terabytes, and long context multiplies it. Only small sets are worth storing: the slice extracted below takes megabytes. That is why
# SpecForge (SGLang's training framework for EAGLE drafters), speculators (the vLLM project's library for
# speculator models) and P-EAGLE's own recipes train online or keep only a small offline set. Top-k target
# logits (for a KL loss) add 8 bytes per kept logit per token.
#
# ## Extracting features for training
#
# `extract_features` runs the target over a set of sequences and writes shards of safetensors with a manifest:
# taps in **bfloat16** by default (half of float32; `03_train_head` compares training from bf16 and from fp32
# taps, and its committed studies and 02's say which taps dtype each used), token ids and greedy labels as int32
# on disk (the reader hands them back as int64, PyTorch's dtype for indices, as the reading cell below shows). It
# prints the estimate before and the real size after. Here: a slice of the training prompts, chat-templated, without
# responses (notebook 03 lets the target write the responses first: self-distillation).

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
# Every shard is written under a temporary name and renamed when complete, and so is the manifest. Run the same
# call again after an interruption and only the missing shards are computed; here nothing is missing. A
# directory holding features made with other settings is refused rather than mixed.

# %%
from peagle_lab.errors import PeagleError

again = extract_features(model, sequences, out_dir, ExtractionSettings(shard_size=16, target=TARGET))
try:
    extract_features(model, sequences, out_dir, ExtractionSettings(tap_layers=(1, 2, 3), shard_size=16, target=TARGET))
except PeagleError as err:
    print("\nrefused:", err)

# %% [markdown]
# Training reads it back as one dict of tensors per sequence (`FeatureDataset`, `iter_shards`, `load_features`).

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
      f"{features.format_bytes(result.bytes_on_disk)} on disk (estimate {features.format_bytes(result.estimate_bytes)})")
print(hardware.describe(DEVICE))
for key, value in [("extract_tokens_per_s", round(result.tokens_per_s, 1)), ("extract_tokens", result.num_tokens),
                   ("extract_bytes_on_disk", result.bytes_on_disk), ("extract_estimate_bytes", result.estimate_bytes),
                   ("bytes_per_token_bf16", features.bytes_per_token(H))]:
    record(key, value, notebook="01_hidden_states")

# %% [markdown]
# ## What we saw
#
# - One forward with `output_hidden_states=True` gives every tap: tap `i` = residual stream entering layer `i`
#   = transformers' `hidden_states[i]` (never `hidden_states[L]`, which comes after the final norm). Three taps
#   side by side are 3H numbers per token, the drafter's input.
# - The three taps overlap but are far from copies of each other (their cosine similarities, printed above, sit
#   well below the near-1 of neighbouring layers), and the logit lens reads a different guess from each; its
#   agreement with the model's next token rises with depth (0%, 2% and 49% for vLLM's taps in the exercise), so
#   only the late tap already carries much of the answer, and the low and middle taps add other views.
# - Offline features cost 3 x H x 2 bytes per token (the table): fine for the slices the workbook trains on,
#   hundreds of gigabytes to terabytes for ShareGPT-sized data. Extraction is resumable and atomic; the reader
#   hands training a dict per sequence.
#
# Next: `02_mask_tokens`, how one drafter pass produces K tokens from these features.
