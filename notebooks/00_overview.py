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
# **Goal:** understand one speculative round (draft, verify, accept, bonus, roll back) well enough to write it
# yourself, and know exactly what "lossless" means for it.
#
# Plan: the idea and what P-EAGLE changes; the target, its plain greedy answer and its speed; one speculative
# round by hand, checked against the package; an exercise on K; a map of the course.
#
# About the numbers, once: everything here is measured live, so timings move a little between runs. The target
# runs in fp32 on a CPU, in the GPU's own dtype on a GPU (`precision.course_dtype`). Later chapters also show
# committed results from other machines, each labelled with its host (e.g. `cpu-epyc-avx512bf16-2c`).

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, precision, settings

# %% [markdown]
# ## Speculative decoding
#
# At batch size 1, a large LLM on a GPU is typically limited by reading its weights, not by arithmetic: a forward
# over 5 new tokens costs little more than one over 1. Speculative decoding exploits this:
#
# 1. A cheap **drafter** proposes K tokens `d1..dK`.
# 2. The **target** checks all of them in **one** forward pass.
# 3. It keeps the longest prefix of drafts that match its own choices, plus one token of its own (the *bonus*).
#
# Each round commits 1 to K+1 tokens; their mean is the **acceptance length** (1.00 for plain decoding).
#
# Names used in every chapter: **draft j** (j = 1..K) is the j-th token drafted in a round, at **depth** j-1
# (0-based, as in the training code); "slot j" is the drafter input position that drafts it. Draft j's acceptance
# rate, given the drafts before it were accepted, is `nan` when no round reached draft j (notebook 05 prints these
# rates). A head trained for one K can be served at another.
#
# ### Lossless, exactly
#
# With greedy decoding every committed token is the target's own argmax. But verification runs the target over
# K+1 rows at once, plain decoding over one, and the kernels sum in different orders, so logits differ in the last
# bits.
#
# - **fp32 on a CPU**: those differences stay far below the gap between two logits, and the output is
#   **identical** to plain greedy decoding (`tests/decoding/test_speculative.py` checks K = 1 to 8 with both
#   shipped heads).
# - **bf16, or fp32 on a GPU**: identical, **or** a divergence at a *near-tie*, where the plain run's top two
#   logits are within rounding, reported with its logit margin (top-1 minus top-2); notebook 05 shows one. A
#   divergence at a margin of several logits would be a bug.
#
# Lossless keeps the target's answer, right or wrong: the plain answer below is not correct code (it returns
# `False` for every integer above 2), and speculation reproduces it exactly.

# %% [markdown]
# ## EAGLE-3 and P-EAGLE
#
# - **EAGLE** drafters are one small transformer layer that reads the target's hidden states, not just tokens.
# - **EAGLE-3** reads three of the target's layers (low, middle, high), the *taps*, concatenated (3H) and
#   projected to H (notebook 01). It drafts **sequentially**: K tokens cost K drafter passes. Training unrolls it
#   (*training-time test*): each step gets the data's next token and the head's own previous state.
# - **P-EAGLE** drafts **in parallel**: slot 1 gets the new token and the target's features, slots 2..K get a
#   mask token and one shared learned vector (`mask_hidden`). One pass gives all K drafts, so drafting cost grows
#   slowly with K. It trains all depths at once on *conditional drop-token* (COD) samples (notebook 02).
#
# The vLLM blog (post "P-EAGLE", 2026-03-13; paper arXiv 2602.01469) reports, for GPT-OSS-20B on one B200 at
# batch 1 on HumanEval, both heads at K=7: P-EAGLE at 1.55x EAGLE-3's speed, acceptance length 3.94 vs 3.03.
# This course rebuilds the method on a model small enough for a laptop. The illustrative diagram has verifying K=4
# drafts cost 1.3 target forwards (05 measures 1.15-1.18 on a GPU); "How fast" below measures your machine.

# %%
from peagle_lab.workbook.diagrams import draw_drafting_schemes

draw_drafting_schemes(k=4);

# %% [markdown]
# ## The target and its plain greedy answer
#
# The default target, SmolLM2-135M-Instruct (a Llama), is embedded so the course runs offline; `PEAGLE_TARGET`
# swaps in any Hugging Face causal LM. Its plain greedy answer is the baseline every speculative run must reproduce
# and beat.

# %%
model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.features.taps import default_tap_layers

cfg = model.config
n_params = sum(p.numel() for p in model.parameters())  # tied embedding / lm_head counted once
print(f"{cfg.architectures[0]}: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, "
      f"{cfg.num_attention_heads} heads ({cfg.num_key_value_heads} KV), vocab {cfg.vocab_size:,}")
print(f"parameters: {n_params:,} ({n_params / 1e6:.1f}M), dtype {model.dtype}")
print(f"EAGLE-3 taps (vLLM default): layers {default_tap_layers(cfg.num_hidden_layers)}")

# %%
import time

from peagle_lab.prompts import chat_ids
from peagle_lab.timer import synchronize  # a GPU runs asynchronously: wait for it before reading the clock

NEW_TOKENS = settings.pick(48, 16)
REPEATS = settings.pick(3, 1)
prompt_ids = torch.tensor([chat_ids(tokenizer, "Write a Python function that checks whether a number is prime.")],
                          device=DEVICE)
gen_args = dict(attention_mask=torch.ones_like(prompt_ids), do_sample=False, temperature=None, top_p=None,
                top_k=None, pad_token_id=tokenizer.pad_token_id)


def greedy(n):
    with torch.no_grad():
        return model.generate(prompt_ids, max_new_tokens=n, min_new_tokens=n, **gen_args)[0, prompt_ids.shape[1]:]


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
# First the decoding speed. Then the fact speculation rests on: with the prompt in the KV cache, what one forward
# over 6 or 9 new tokens (verifying K=5 or K=8 drafts) costs against a forward over 1.

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
    for n in (1, 6, 9):
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
print(f"forward over 1 new token: {1e3 * step[1]:.1f} ms; over 6: {1e3 * step[6]:.1f} ms "
      f"(ratio {step[6] / step[1]:.2f}x); over 9: {1e3 * step[9]:.1f} ms (ratio {step[9] / step[1]:.2f}x)")
print(f"the timing diagram above draws a K=4 verification at 1.3 decoding steps; on this machine verifying K=5 "
      f"drafts costs {step[6] / step[1]:.2f} steps, K=8 drafts {step[9] / step[1]:.2f}")
print(hardware.describe(DEVICE))
for key, value in [("target_params", n_params), ("greedy_tokens_per_s", round(tok_s, 2)),
                   ("forward_9_vs_1_ratio", round(step[9] / step[1], 3)), ("hardware", hardware.describe(DEVICE))]:
    record(key, value, notebook="00_overview")

# %% [markdown]
# **Reading it.** Verifying 6 or 9 tokens costs far less than 6 or 9 decoding steps, but on this CPU more than the
# diagram's 1.3 (the ratios are printed above). A round must commit more tokens than that ratio, plus the
# drafter's cost, to beat plain decoding. `05_parallel_vs_sequential` measures the ratio again for K = 1 to 10.
#
# ## One speculative round, written out
#
# The package's loop (`peagle_lab.decoding.speculative.speculative_generate`) fits in about 25 lines, with the
# shipped P-EAGLE head as drafter (for another target, one trained on the spot). One convention matters, the
# **EAGLE shift**: drafter slot t holds token t+1 with the target's taps at position t, the state that predicted
# it. Each round:
#
# 1. **draft** K tokens in one drafter pass (`drafter.propose`; notebook 02 builds it by hand);
# 2. **verify**: one target forward over the last committed token and the K drafts;
# 3. **accept** the longest prefix of drafts equal to the target's own greedy choices;
# 4. add the **bonus** token, the target's choice right after that prefix;
# 5. **roll back** the target's KV cache, dropping the rejected drafts.
#
# The cache keeps every position, even for sliding-window layers (GPT-OSS), whose window the attention mask
# applies, so a rollback never needs an evicted entry. The first round prints its tensors' shapes.

# %%
from transformers import DynamicCache

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.slots import Slots
from peagle_lab.training import ensure_head

head, head_info = ensure_head("parallel", model, tokenizer, TARGET)
taps_of = lambda out: torch.cat([out.hidden_states[i] for i in head.config.aux_hidden_state_layer_ids], -1)[0]
drafter = HeadDrafter(head)


def speculate(K, show=False):
    """Greedy speculative decoding of NEW_TOKENS tokens, K drafts a round: (tokens, tokens committed per round)."""
    cache = DynamicCache()  # keeps every position (the model's mask applies any sliding window): crop rolls back
    with torch.no_grad():
        out = model(prompt_ids, past_key_values=cache, output_hidden_states=True)  # prefill
        tokens = [int(out.logits[0, -1].argmax())]
        slots = Slots.after_prefill(prompt_ids[0].tolist(), tokens[0], taps_of(out))  # the EAGLE shift
        per_round = []
        while len(tokens) < NEW_TOKENS:
            drafts, _ = drafter.propose(slots, K, Sampling())                           # 1. draft
            start = cache.get_seq_length()                                              # position of tokens[-1]
            verify = torch.tensor([[tokens[-1]] + drafts.tolist()], device=DEVICE)
            out = model(verify, past_key_values=cache, output_hidden_states=True)     # 2. verify in one pass
            choice = out.logits[0].argmax(-1).tolist()
            a = 0
            while a < K and int(drafts[a]) == choice[a]:                                # 3. longest agreeing prefix
                a += 1
            new = drafts[:a].tolist() + [choice[a]]                                     # 4. bonus token
            if show and not per_round:
                print(f"slots {len(slots)} x taps {tuple(slots.taps.shape)} -> drafts {tuple(drafts.shape)}; "
                      f"verify input {tuple(verify.shape)} -> logits {tuple(out.logits.shape)}")
                print(f"accepted {a} of {K}, committed {len(new)}; target cache {cache.get_seq_length()} -> "
                      f"{cache.get_seq_length() - (K - a)} positions")
            if a < K:
                cache.crop(a - K)                                                       # 5. roll back K - a drafts
            slots = Slots.after_round(new, taps_of(out), start)  # new tokens, the taps that predicted them
            tokens += new
            per_round.append(len(new))
    return tokens[:NEW_TOKENS], per_round


K = 5
tokens, per_round = speculate(K, show=True)
print(f"{len(per_round)} rounds (target forwards after the prefill), tokens per round {per_round}")

# %% [markdown]
# Now the same prompt through the package's loop and its plain greedy decoding; the last line compares the
# hand-written output with plain greedy.

# %%
from peagle_lab.decoding.divergence import first_divergence, lossless_regime
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.workbook import ledger

runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
package = speculative_generate(runner, HeadDrafter(head), prompt_ids[0], k=K, max_new_tokens=NEW_TOKENS)
plain = plain_generate(runner, prompt_ids[0], NEW_TOKENS)
print(f"head: {head_info['source']} ({head_info['origin']}; trained for K={head_info['trained_k']}, "
      f"{head_info['num_hidden_layers']} layer, draft vocabulary {head_info['draft_vocab_size']})")
print(f"acceptance length {sum(per_round) / len(per_round):.2f} by hand, "
      f"{package.stats.acceptance_length:.2f} in the package's loop (this prompt, K={K}, {NEW_TOKENS} new tokens, "
      f"{str(model.dtype).split('.')[-1]})")
speedup = plain.seconds / package.seconds
verdict = "pays" if speedup > 1.05 else "loses" if speedup < 0.95 else "breaks even (within 5%)"
print(f"wall time, the package's loops, one run each: plain {plain.seconds:.2f} s, speculative {package.seconds:.2f} s "
      f"-> {speedup:.2f}x: speculation {verdict} here")
print(f"tokens committed per target forward {package.stats.acceptance_length:.2f} against the K={K} "
      f"verification's cost of {step[K + 1] / step[1]:.2f} decoding steps, measured above" if K + 1 in step else "")
print("hand-written == package's loop:", tokens == package.tokens[:NEW_TOKENS])
ledger.record(chapter="00", what="the hand-written round's prompt",
              head=str(head_info["source"]).rstrip("/").split("/")[-1],
              host=precision.host_slug(DEVICE), prompt_set="one chat prompt (prime check)", prompts=1,
              new_tokens=NEW_TOKENS, k=K, dtype=precision.dtype_name(model.dtype), rounds=package.stats.rounds,
              acceptance_length=package.stats.acceptance_length)
print(f"regime: {lossless_regime(model.dtype, DEVICE)} ({model.dtype} on {DEVICE})")
div = first_divergence(tokens, plain, model.dtype, DEVICE)
print("hand-written vs plain greedy:", "identical" if div is None else div.message())

# %% [markdown]
# **Reading it.** The hand-written round, the package's loop and plain greedy decoding produce the same tokens, at
# an acceptance length of about 1.5 tokens per round. That is too few to pay for a round (a verification plus a
# drafter pass), so speculation loses on this prompt: the wall-time line prints the verdict, the next line the
# two numbers behind it. `05_parallel_vs_sequential` gathers the acceptance lengths every chapter records.
#
# ### When the drafts are easy
#
# Acceptance depends on the text, and a list of consecutive numbers is text the target writes predictably. The
# cell times plain decoding, the P-EAGLE head and the EAGLE-3 head (sequential drafting) on such a prompt at the
# same K, interleaved, median of three, and checks each output against plain greedy.

# %%
easy_ids = torch.tensor(chat_ids(tokenizer, "List the numbers from 100 to 130, one per line."))
eagle3, eagle3_info = ensure_head("sequential", model, tokenizer, TARGET)
easy_heads = {name: str(info["source"]).rstrip("/").split("/")[-1]
              for name, info in (("P-EAGLE", head_info), ("EAGLE-3", eagle3_info))}
easy_runs = {"plain": lambda: plain_generate(runner, easy_ids, NEW_TOKENS),
             "P-EAGLE": lambda: speculative_generate(runner, HeadDrafter(head), easy_ids, k=K,
                                                     max_new_tokens=NEW_TOKENS),
             "EAGLE-3": lambda: speculative_generate(runner, HeadDrafter(eagle3), easy_ids, k=K,
                                                     max_new_tokens=NEW_TOKENS)}
easy_s, easy_out = {name: [] for name in easy_runs}, {}
for _ in range(3):  # interleaved: a change in the machine's load falls on every method alike
    for name, run in easy_runs.items():
        easy_out[name] = run()
        easy_s[name].append(easy_out[name].seconds)
easy_plain = statistics.median(easy_s["plain"])
print(repr(tokenizer.decode(easy_out["plain"].tokens[:NEW_TOKENS])[:90]), "...")
for name in ("P-EAGLE", "EAGLE-3"):
    r, sec = easy_out[name], statistics.median(easy_s[name])
    gain = easy_plain / sec
    verdict = "pays" if gain > 1.05 else "loses" if gain < 0.95 else "breaks even (within 5%)"
    print(f"{name} K={K}: acceptance length {r.stats.acceptance_length:.2f} over {r.stats.rounds} rounds, "
          f"{sec:.2f} s against plain {easy_plain:.2f} s (medians of 3) -> {gain:.2f}x: speculation {verdict}; "
          f"identical to plain greedy: {r.tokens[:NEW_TOKENS] == easy_out['plain'].tokens[:NEW_TOKENS]}")
    ledger.record(chapter="00", what="predictable text", head=easy_heads[name], host=precision.host_slug(DEVICE),
                  prompt_set="one list prompt (numbers 100 to 130)", prompts=1, new_tokens=NEW_TOKENS, k=K,
                  dtype=precision.dtype_name(model.dtype), rounds=r.stats.rounds,
                  acceptance_length=round(r.stats.acceptance_length, 4))

# %% [markdown]
# **Reading it.** On predictable text EAGLE-3 commits nearly 4 tokens a round (3.92) and speculation pays clearly
# even on this CPU, with the output still identical to plain greedy. P-EAGLE reaches only about 2, too few for a clear
# gain (its line prints the verdict). The gap is in the deep drafts: EAGLE-3 drafts each token from its own
# previous draft, P-EAGLE drafts slots 2..K from mask stand-ins. Closing it is what `03` and `04` train for.
#
# ### Exercise: change K
#
# The cell below reruns the hand-written loop at `K_TRY` = 1, then 10. Predict: how many rounds, what acceptance
# length, and do the tokens change?
#
# <details><summary>Answer</summary>
#
# At K = 1 a round commits at most 2 tokens, so it takes more rounds than K = 5 (33 against 32 in the saved run;
# acceptance length 1.42 against 1.47). A larger K does not help: K = 10 takes the same 32 rounds as K = 5,
# because no round commits more than 4 tokens (3 accepted drafts plus the bonus), so drafts 4 to 10 are never
# accepted on this prompt, while each verification grows from 6 rows to 11 (drafts beyond 8, the head's trained
# K, were never trained at all). The tokens never change: `identical to plain greedy: True`.
#
# </details>

# %%
for K_TRY in (1, 10):  # the two values of the exercise; edit to try others
    tokens_try, rounds_try = speculate(K_TRY)
    print(f"K={K_TRY}: {len(rounds_try)} rounds, acceptance length {sum(rounds_try) / len(rounds_try):.2f}, "
          f"max per round {max(rounds_try)}; identical to plain greedy: {tokens_try == plain.tokens}")
    ledger.record(chapter="00", what=f"exercise, the hand-written round at K={K_TRY}",
                  head=str(head_info["source"]).rstrip("/").split("/")[-1], host=precision.host_slug(DEVICE),
                  prompt_set="one chat prompt (prime check)", prompts=1, new_tokens=NEW_TOKENS, k=K_TRY,
                  dtype=precision.dtype_name(model.dtype), rounds=len(rounds_try),
                  acceptance_length=round(sum(rounds_try) / len(rounds_try), 4))
print(f"(K={K}, above: {len(per_round)} rounds, acceptance length {sum(per_round) / len(per_round):.2f})")

# %% [markdown]
# ### Exercise: write the acceptance rule yourself
#
# Step 3 and 4 of the round are the whole of greedy verification. Replace the body of `my_accept` below: given the
# K drafts and the target's greedy token at each of the K + 1 verified positions (`choice[j]` is its token after
# the first j drafts), return what the round commits: the accepted drafts, then the bonus token. The cell checks
# your rule against the package's (`peagle_lab.decoding.sampling.accept_greedy`) on 500 random rounds; until you
# write it, it says so.
#
# <details><summary>Answer</summary>
#
# ```python
# def my_accept(drafts, choice):
#     a = 0
#     while a < len(drafts) and drafts[a] == choice[a]:
#         a += 1
#     return drafts[:a] + [choice[a]]
# ```
#
# A draft counts only while every draft before it was accepted, so the first disagreement ends the round; the bonus
# is the target's token at that position, which is why a round always commits at least one token.
#
# </details>

# %%
import random

from peagle_lab.decoding.sampling import accept_greedy


def my_accept(drafts, choice):
    """The tokens one greedy round commits: the accepted drafts, then the bonus token."""
    raise NotImplementedError("write me: about four lines")


rng = random.Random(0)
wrong, checked = [], 0
try:
    for _ in range(500):
        k = rng.randint(1, 8)
        choice = [rng.randrange(4) for _ in range(k + 1)]
        drafts = [c if rng.random() < 0.7 else rng.randrange(4) for c in choice[:k]]
        a, bonus = accept_greedy(torch.tensor(drafts), torch.nn.functional.one_hot(torch.tensor(choice), 4).float())
        checked += 1
        if my_accept(drafts, choice) != drafts[:a] + [bonus]:
            wrong.append((drafts, choice))
    print(f"your rule and the package's agree on {checked - len(wrong)} of {checked} random rounds"
          + (f"; the first disagreement: drafts {wrong[0][0]}, target {wrong[0][1]}" if wrong else ""))
except NotImplementedError as exc:
    print(f"my_accept is not written yet ({exc}); the answer is folded above the cell")

# %% [markdown]
# ## The course
#
# | notebook | question it answers |
# |---|---|
# | `00_overview` | What is speculative decoding, what does P-EAGLE change, what does lossless mean? (this one) |
# | `01_hidden_states` | What does the drafter read: the three tapped layers, their cost on disk, extraction |
# | `02_mask_tokens` | How one pass drafts K tokens: mask token, `mask_hidden`, the attention layout |
# | `03_train_head` | Training a P-EAGLE head: self-distilled data, the draft vocabulary (`d2t`/`t2d`), COD sampling, per-depth loss |
# | `04_scale_and_acceptance` | How far training goes: the shipped heads, the learning curve, your own model on a second architecture |
# | `05_parallel_vs_sequential` | Parallel vs sequential drafting: per-position acceptance, drafting cost, speed per suite, losslessness |
# | `06_vllm_deploy` | Export to vLLM's eagle3 format and serve with `parallel_drafting`; load and tensor parallelism |
# | `07_explorer` | Watch drafts being accepted token by token, with any prompt, head and K |
#
# ### Questions users of EAGLE, SpecForge and vLLM keep asking
#
# (SpecForge is SGLang's framework for training EAGLE drafters; vLLM the serving engine of notebook 06.)
#
# | question | answered in |
# |---|---|
# | 1. I have my own model and chat template: what matters? | `04_scale_and_acceptance`, "Your own model" (a tiny Qwen3 target) |
# | 2. How much storage do features take; online or offline; bf16 or fp32? | `01_hidden_states`, disk cost; `03_train_head` |
# | 3. Why is my acceptance length below the paper's? | `04_scale_and_acceptance` (the shipped heads, the learning curve) |
# | 4. What is acceptance length, and why are some slots `nan`? | `00_overview`, "Speculative decoding"; `05_parallel_vs_sequential`, per-position acceptance |
# | 5. How do I convert a head for vLLM? | `06_vllm_deploy`, the export (`d2t`, the config vLLM reads) |
# | 6. What are `d2t`, `t2d` and the draft vocabulary? | `03_train_head`, `d2t` and `t2d` |
# | 7. Should the target regenerate the training answers? | `03_train_head`, self-distillation |
# | 8. Why no speed-up at large batch, and what does tensor parallelism do? | `06_vllm_deploy`, load and tensor parallelism |
# | 9. Speculative decoding changed my greedy output! | `00_overview`, "Lossless, exactly"; `05_parallel_vs_sequential`, losslessness |

# %% [markdown]
# ## What we saw
#
# - A speculative round is five small steps: draft K, verify K + 1 tokens in one target forward, accept the
#   agreeing prefix, add the bonus token, roll back the KV cache; our hand-written round matches the package's.
# - In fp32 on a CPU the speculative output is identical to plain greedy decoding, at every K tried (1, 5, 10) and
#   on both prompts.
# - Speculation pays only when a round commits more than it costs: on the chat prompt, at about 1.5 tokens a round,
#   it loses; on the number list, EAGLE-3's nearly 4 tokens a round pay clearly.
# - A larger K does not rescue weak drafts: K = 10 takes as many rounds as K = 5. Raising acceptance is what the
#   rest of the course is about.
#
# Next: `01_hidden_states`, the features every EAGLE-3 and P-EAGLE drafter reads.
