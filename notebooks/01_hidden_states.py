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
# **Goal:** know exactly which three hidden states of the target an EAGLE-3 or P-EAGLE drafter reads (the
# *taps*), what each of them knows, and what storing them for training costs.
#
# Plan: build the taps by hand; pin down which layer "tap i" is; compare the taps, with an exercise on which
# layers to tap; price storing them; extract them.
#
# Everything is computed live (fp32 on a CPU, the GPU's dtype on a GPU) and quoted for the embedded target; only
# the extraction speed varies between runs.

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
# A drafter reads three hidden states of the target side by side: 3H numbers per position for hidden size H, which
# its `fc` layer projects back to H. vLLM's default taps for L layers are 2, L//2 and L-3: low, middle, high.

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
# **Reading it.** The taps are layers 2, 15 and 27 of 30, 1728 numbers per position, equal to the package's.
#
# ## Which state is "tap i"?
#
# Two conventions meet here; mixing them silently feeds the drafter states one layer off.
#
# - **vLLM** (`eagle_aux_hidden_state_layer_ids`): tap `i` is the residual stream **entering** decoder layer `i`.
# - **transformers** (`output_hidden_states=True`): `hidden_states[0]` is the embedding output, `hidden_states[i]`
#   the input of layer `i`. So tap `i` = `hidden_states[i]`, except that `hidden_states[L]` comes **after** the
#   final norm.
#
# Hooks on the decoder layers check the transformers half: `hidden_states[i]` is the input of layer `i`. vLLM's half
# is read from its source (06 lists what vLLM reads), not run here.

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
# **Reading it.** The conventions hold: tap `i` is `hidden_states[i]`, and `hidden_states[L]` is the final norm's
# output, not the last layer's.
#
# ## How big, how different?
#
# `residual_stream` stacks every layer's input (the *residual stream*: the running sum each layer adds its output to)
# and the last layer's pre-norm output. The figure compares the norm of position 0 with the other positions'. Position
# 0 is known as an *attention sink* (attention heads with nothing to attend to put their weight there); here it is
# seen only through its unusually large state.

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
# **Reading it.** On the log scale the sink's norm jumps between layers: about 5 times the others' at tap 2, some 50
# to 150 times at taps 15 and 27. The comparisons below leave it out, starting with the taps' cosine similarity.

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
# **Reading it.** The taps overlap but are far from copies: cosine 0.76 between taps 2 and 15, only 0.34 between
# 2 and 27. Neighbouring layers are nearly parallel; spread-out taps give three different views.
#
# ## Logit lens: what each tap already predicts
#
# Read a state through the target's final norm and `lm_head`, as if the model stopped there: here at the prompt's
# last position.

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
# **Reading it.** Each tap has its own guess (`' ('`, `' I'`, `' Here'`) and none is the model's: its choice, three
# backticks, tops the lens only at the output, not even at layer 29. (Layer 0 reads back the current token.)
#
# ### Exercise: tap other layers
#
# The cell below counts how often, over the prompt's positions, each tap's lens top token is the model's own next
# token, for vLLM's taps, `(1, 2, 3)` and `(L - 4, L - 3, L - 2)`. Predict: which tap agrees most, and which set
# would you give a drafter?
#
# <details><summary>Answer</summary>
#
# The late layers agree most: 0%, 2% and 49% for vLLM's taps in the saved run, 0-2% for `(1, 2, 3)`, 34-51% for
# the late set. More next-token signal need not make a better drafter input (the course does not train one to
# measure it). The argument for vLLM's spread: three late layers are nearly parallel and would add little to each
# other, and the low-level view of the token would be lost; a spread gives three different views.
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
# Training needs the taps of every token: store them once (*offline*: fast epochs, huge disk) or run the
# target during training (*online*: no disk, a target forward per step). Offline costs 3 x H x 2 bytes per token in
# bfloat16, plus two int32 ids (the token and its greedy label).

# %% tags=["nbval-check-output"]
from peagle_lab import features

print(features.format_cost_table(features.disk_cost_table()))
one_state = features.estimate_bytes(68_000 * 1_500, 4096, n_taps=1)
print(f"\none stored state (EAGLE-1/2), Llama-3.1-8B, ShareGPT-like: {features.format_bytes(one_state)}")
per_token = one_state / (68_000 * 1_500)
print(f"740 GB at the same {per_token:,.0f} B/token is {740e9 / per_token / 1e6:.0f}M tokens, "
      f"{740e9 / per_token / 68_000:,.0f} per sequence instead of 1,500")

# %% [markdown]
# **Reading it.** Stored taps are huge: a ShareGPT-sized set takes 353 GB even for the 135M target and 2.5 TB for
# Llama-3.1-8B. That is why real recipes run the target during training or store only small sets.
#
# <details><summary>The careful reading</summary>
#
# - Long context multiplies it: 54.8 TB for Llama-3.1-8B at 32k tokens a sequence.
# - For the single state EAGLE-1 and -2 stored we get 836 GB where EAGLE's authors quoted 740 GB: the same order;
#   740 GB fits 1,327 tokens per sequence instead of 1,500, slightly shorter sequences.
# - The recipes meant: SpecForge, speculators (vLLM's library) and P-EAGLE's train online or store only small sets.
#
# </details>
#
# ## Extracting features for training
#
# `extract_features` writes safetensors shards with a manifest: taps in **bfloat16** by default (`03_train_head`
# compares fp32), ids and greedy labels as int32. Here: a slice of the training prompts, without responses.

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
# **Reading it.** The disk estimate is close: 12.8 MB predicted and written. Shards and manifest are renamed into
# place only when complete, so a rerun computes only missing shards; the cell tries that, then asks for other taps.

# %%
from peagle_lab.errors import PeagleError

again = extract_features(model, sequences, out_dir, ExtractionSettings(shard_size=16, target=TARGET))
try:
    extract_features(model, sequences, out_dir, ExtractionSettings(tap_layers=(1, 2, 3), shard_size=16, target=TARGET))
except PeagleError as err:
    print("\nrefused:", err)

# %% [markdown]
# **Reading it.** The rerun skipped all 4 shards; other taps were refused rather than mixed in. Training reads one
# dict of tensors per sequence (`FeatureDataset`), ids as int64.

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
# - Tap `i` is the residual stream entering layer `i`, transformers' `hidden_states[i]` (never `hidden_states[L]`,
#   which follows the final norm); three side by side are the drafter's 3H-wide input.
# - The taps are far from copies (cosines 0.34 to 0.76) and each guesses differently; at vLLM's taps (layers 2, 15,
#   27) the lens agrees with the model's next token at 0%, 2% and 49% of positions: only the last tap guesses well
#   (the exercise: 0-2% at the first three layers, 34-51% at the last three).
# - Offline features cost 3 x H x 2 bytes per token: megabytes for our slice, hundreds of gigabytes to terabytes
#   for ShareGPT-sized sets.
# - Extraction resumes, refuses mixed settings, and stores a fresh forward's taps in bf16.
#
# Next: `02_mask_tokens`, how one drafter pass produces K tokens from these features.
