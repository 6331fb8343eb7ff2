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
# # 07 · Explorer: watch speculative decoding token by token
#
# Type a prompt, choose **K** (how many tokens the drafter proposes per round), the **head** and the **drafting
# mode**, and press **Generate**. The target verifies the K drafts in one forward pass and keeps the longest
# prefix it agrees with, plus one token of its own.
#
# Every generated token is coloured by where it came from:
#
# * **slot j** (one colour per j): a draft the target accepted at depth j of its round;
# * **grey**: the token the target itself produced after verifying (the *bonus* token; also the very first
#   token, which comes from the prefill).
#
# A run of colours 1, 2, 3, ... means one target forward produced several tokens. The **acceptance length** is
# the mean number of tokens per round (accepted drafts + the bonus); the bars show, for each slot j, how often it
# was accepted when the slots before it were. *Parallel* drafting (P-EAGLE) drafts all K tokens in one drafter
# pass; *sequential* drafting (EAGLE-3) needs K passes. Both are lossless: at temperature 0 the text is exactly
# plain greedy decoding's, which the explorer checks by also timing plain decoding in the same run.

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, settings

# %%
from IPython.display import HTML, display

from peagle_lab.workbook import report, viz
from peagle_lab.workbook.explorer import GenerationSettings, available_heads, explorer, get_head, run_generation

K = 4
MAX_NEW = settings.pick(64, 12)
model, tokenizer = models.load_target(TARGET, device=DEVICE)
HEADS = available_heads(model)
print("heads on offer:", HEADS, "| K:", K, "| max new tokens:", MAX_NEW)

# %% [markdown]
# ## The explorer
#
# Things to try: raise K and watch the deep slots' bars fall; run the same head in parallel and in sequential
# mode and compare the times; raise the temperature (fewer drafts are accepted, and the output stays distributed
# exactly as the target's). The heads on offer are the shipped ones in `data/heads/`; a checkout without them
# falls back to an untrained head and says so (grey almost everywhere, acceptance length close to 1). The
# shipped heads are small and trained on a CPU budget, so expect mostly single green tokens: slot 1 accepted
# about a third of the time, deeper slots rarely (notebook 03 shows why, and what more training buys).

# %%
ex = explorer(model, tokenizer, k=K, max_new_tokens=MAX_NEW)
ex

# %% [markdown]
# ## One fixed run (no clicking needed)
#
# The same loop without widgets: greedy, the first head on offer, in the mode it was trained for.

# %% tags=["nbval-ignore-output"]
head_name = HEADS[0]
run = run_generation(model, tokenizer, get_head(head_name, model), GenerationSettings(k=K, max_new_tokens=MAX_NEW),
                     head_name=head_name)
report.record(f"acceptance_length_k{K}_{head_name}", round(run.stats.acceptance_length, 3))
print(f"head: {head_name} | mode: {run.mode}")
display(HTML(run.html(tokenizer)))
print(run.summary())

# %% tags=["nbval-ignore-output"]
fig = viz.plot_per_position_acceptance(
    run.stats.conditional_acceptance,
    title=f"{head_name} head, {run.mode} drafting, K={K}: acceptance length {run.stats.acceptance_length:.2f}")
print("saved", settings.display_path(viz.save_figure(fig, "07_explorer_per_position")))

# %% tags=["nbval-check-output"]
print("every token has a source:", len(run.sources) == len(run.tokens))
print("the first token comes from the target:", run.sources[0] == viz.TARGET)
print("speculative output == plain greedy output:", run.lossless)
