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
# # 00 · Overview: speculative decoding and P-EAGLE in one page
#
# **Goal:** understand one speculative round (draft, verify, accept, bonus, roll back) well enough to write its loop
# yourself, and know exactly what "lossless" means.
#
# **What to expect on a 2-core CPU.** The course builds every piece in view and checks it against the package: the round
# (this chapter), the drafter (02), its training data (03) and training (04), and the loop's losslessness. It runs on a
# laptop-class CPU with a 135M-parameter target, so the speed-ups it can show are small; each chapter says what its
# numbers can and cannot decide, and 09 sets the verdicts side by side.
#
# *Committed* results are saved under `data/`; *live* ones run here and move with the machine's load. Terms and
# rules are explained where they are first used; `reference.md`, beside the notebooks, collects them.

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
# At batch size 1, a GPU forward over a few new tokens costs little more than one over 1 (the timing cell below quotes
# an H200: 1.17 steps for 6 tokens): memory traffic and kernel launches
# dominate, not arithmetic. Speculative decoding exploits this:
#
# 1. A cheap **drafter** proposes K tokens.
# 2. The **target**, the model we want output from, checks them all in **one** forward pass.
# 3. It keeps the longest prefix of drafts matching its own choices, plus one token of its own (the *bonus*).
#
# A **round** commits 1 to K+1 tokens; their mean over rounds is the **acceptance length** (AL), 1.00 for plain
# decoding.
#
# ### Lossless, exactly
#
# Greedy speculation commits only the target's own argmax tokens. But verification runs K+1 rows at once, so its logits
# can differ from plain decoding's in the last bits.
#
# - **fp32 on a CPU** (regime *exact*): the output has been **identical** to plain greedy decoding in every run and
#   test of this course, so any difference is treated as a bug. This chapter checks every run.
# - **bf16, or fp32 on a GPU** (regime *near-tie*): identical, **or** diverging at a *near-tie*, where the top two
#   logits are closer than rounding can separate.
#
# In bf16 the bound is 4 ulps of the top logit. An *ulp* (unit in the last place) is the gap between neighbouring bf16
# numbers there. In fp32 on a GPU, or across engines (08), it is 2^-11 of the top logit: other kernels sum in other
# orders.
#
# 07 prints the bound beside each logit margin (top-1 minus top-2). A margin of several logits means a bug. Above
# temperature 0, lossless means sampling exactly the target's distribution (09). Lossless keeps the target's answer,
# right or wrong: the plain answer below is not correct code.

# %% [markdown]
# ## EAGLE-3 and P-EAGLE
#
# Both are EAGLE drafters: a small transformer (one layer here) that reads the target's hidden states, not just tokens.
#
# - **EAGLE-3** reads three target layers' hidden states, the *taps* (01), and drafts **sequentially**: one drafter
#   pass per token, each fed the token and state of the pass before.
# - **P-EAGLE** drafts all K tokens **in one pass**. Slots 2..K get a mask token (a learned placeholder) and a shared
#   learned vector, `mask_hidden`, in place of token and taps. 02 builds it; 04 trains it, with the training tricks
#   both methods need.
#
# The vLLM blog "P-EAGLE" (2026-03-13; arXiv 2602.01469) reports P-EAGLE at 1.55x EAGLE-3's speed, each at its best K (7
# and 3). That is GPT-OSS-20B on one B200 at batch 1, on HumanEval (164 Python problems). At K=7 the acceptance lengths
# are 3.94 against 3.03. The diagram's costs are illustrative.

# %%
from peagle_lab.workbook.diagrams import draw_drafting_schemes

draw_drafting_schemes(k=4);

# %% [markdown]
# ## The target and its plain greedy answer
#
# SmolLM2-135M-Instruct (a Llama) is embedded so the course runs offline; `PEAGLE_TARGET` swaps in any Hugging Face
# causal LM. Every speculative run must reproduce its plain greedy answer.

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
# The next cell times greedy decoding, then a forward over 6 or 9 new tokens (verifying K=5 or K=8 drafts) against one
# over 1. For comparison it quotes a committed H200 run: an 8B model's shapes, random weights, an eager PyTorch loop.

# %%
import copy
import json
import statistics

from peagle_lab import hardware
from peagle_lab.workbook.report import record

tok_s = NEW_TOKENS / statistics.median(times)
print(f"greedy decoding: {tok_s:.1f} tokens/s ({NEW_TOKENS} tokens, median of {REPEATS})")

with torch.no_grad():
    cache = model(prompt_ids, use_cache=True).past_key_values
    runs = {1: [], 6: [], 9: []}
    for _ in range(settings.pick(9, 3)):  # interleaved: a change in the machine's load falls on all three alike
        for n in runs:
            c = copy.deepcopy(cache)
            synchronize(DEVICE)
            t0 = time.perf_counter()
            model(answer[:n].reshape(1, -1), past_key_values=c, use_cache=True)
            synchronize(DEVICE)
            runs[n].append(time.perf_counter() - t0)
    step = {n: statistics.median(r) for n, r in runs.items()}
print(f"forward over 1 new token: {1e3 * step[1]:.1f} ms; over 6: {1e3 * step[6]:.1f} ms "
      f"(ratio {step[6] / step[1]:.2f}x); over 9: {1e3 * step[9]:.1f} ms (ratio {step[9] / step[1]:.2f}x)")
gpu = json.loads((settings.data_dir() / "results" / "gpu-h200" / "gpu-check" / "timing.json").read_text())["result"]
g5 = next(r for r in gpu["rows"] if r["k"] == 5)
print(f"on a GPU (committed: H200, {gpu['target_params'] / 1e9:.0f}B-parameter shapes, random weights, "
      f"{gpu['dtype']}, an eager PyTorch loop, not a serving engine): a step {gpu['decode_step_ms']:.1f} ms, verifying "
      f"K=5 {g5['verify_ratio']:.2f} steps; here {step[6] / step[1]:.2f}")
if step[9] < step[6]:  # a longer forward measured cheaper: noise, or another kernel path
    print(f"the forward over 9 measured {1e3 * (step[6] - step[9]):.1f} ms cheaper than over 6: a longer forward "
          "should cost more: timing noise, or a kernel taking another path for that row count")
load = hardware.load_average()
if load and load[0] > hardware.usable_cores():
    print(f"load avg {load[0]:.1f} on {hardware.usable_cores()} cores: another job shares the CPU, so these timings "
          "may run high and move more than usual")
print(hardware.describe(DEVICE))
for key, value in [("target_params", n_params), ("greedy_tokens_per_s", round(tok_s, 2)),  # the workbook summary
                   ("forward_9_vs_1_ratio", round(step[9] / step[1], 3)), ("hardware", hardware.describe(DEVICE))]:
    record(key, value, notebook="00_overview")

# %% [markdown]
# **Reading it.** In float32 on this CPU, verifying K=5 drafts costs 2.00 one-token steps, against 1.17 on the H200. A
# round here must commit more than 2.00 tokens, plus drafting's time, just to pay for that; bfloat16 makes it cheaper in
# decode steps (06). These are medians of a few repeats in one run; they move between runs (each chapter prints its
# own). The H200 step is an eager PyTorch loop, not a serving engine: read its ratio, not its milliseconds. Random
# weights cost the same as trained ones: a forward's time depends on the shapes, not on the values.
#
# ## One speculative round, written out
#
# `draft` and `speculate` below write the package's loop by hand in about 60 lines (it always drafts K; the package's
# loop drafts only what fits near the budget), drafting with the *shipped* P-EAGLE head (the
# trained head that comes with the course). It uses the **EAGLE shift**: drafter position t holds token x_{t+1} with
# h_t, the taps that predicted it. With context x_0..x_n and x_{n+1} just chosen from h_n, slot 1 (position n) drafts
# x_{n+2} at depth 0, and slot j drafts x_{n+j+1} at depth j-1.

# %%
from peagle_lab.workbook.diagrams import draw_eagle_shift

draw_eagle_shift(n=4, k_fig=4)  # context x_0..x_4, one round of K=4 drafts

# %% [markdown]
# In the diagram, the new positions end in slot 1 (dark green) and K-1 mask slots follow. Older positions sit in the
# drafter's KV cache (stored keys and values). Each round:
#
# 1. **draft** K tokens in one drafter pass;
# 2. **verify** the last committed token and the K drafts in one target forward;
# 3. **accept** the longest prefix of drafts equal to the target's greedy choices;
# 4. add the **bonus** token, the target's choice right after that prefix;
# 5. **roll back** the target's KV cache past the rejected drafts.
#
# The *prefill* is the target's first forward, over the whole prompt. Treat `draft` as a black box; 02 writes the head.
# In 02's terms, `head.fuse` is `fc`, and `mask_slot_hidden()` is `fc(mask_hidden)`, the mask slots' hidden input.
# `to_target_logits` maps draft ids to target ids (`d2t`). `Slots` holds the new tokens, their taps and the first one's
# position. After the drawing of its first round, a cell checks the round against the package's loop and plain
# decoding.

# %%
from transformers import DynamicCache

from peagle_lab.decoding.slots import Slots
from peagle_lab.training import ensure_head

head, head_info = ensure_head("parallel", model, tokenizer, TARGET)
taps_of = lambda out: torch.cat([out.hidden_states[i] for i in head.config.aux_hidden_state_layer_ids], -1)[0]
head_name = str(head_info["source"]).rstrip("/").split("/")[-1]
drafter_cache = head.new_cache()  # the drafter's own KV cache, over the committed positions
first_round = {}  # the first round's verify pass, kept for the drawing below


def draft(slots, K):
    """K drafts in one P-EAGLE pass (what the package's HeadDrafter.propose does): the newly committed slots, then
    K-1 mask slots; the drafts are the argmax of the last K rows."""
    drafter_cache.crop(slots.start)  # the drafter's rollback: drop last round's mask and draft slots
    n, dtype = len(slots), next(head.parameters()).dtype
    tokens = torch.tensor([list(slots.tokens) + [head.config.mask_token_id] * (K - 1)], device=DEVICE)
    hidden = torch.cat([head.fuse(slots.taps.to(DEVICE, dtype).view(1, n, -1)),        # fc over the taps
                        head.mask_slot_hidden().to(dtype).expand(1, K - 1, -1)], dim=1)  # fc(mask_hidden)
    positions = torch.arange(slots.start, slots.start + n + K - 1, device=DEVICE)[None]
    logits, _ = head(tokens, hidden, positions, cache=drafter_cache, logits_from=n - 1)  # rows n-1 .. n+K-2
    return head.to_target_logits(logits[0].float()).argmax(-1)  # draft vocabulary -> target ids (d2t)


def speculate(K, show=False):
    """Greedy speculative decoding of NEW_TOKENS tokens, K drafts a round: (tokens, tokens committed per round)."""
    cache = DynamicCache()  # keeps every position (the model's mask applies any sliding window): crop rolls back
    with torch.no_grad():
        out = model(prompt_ids, past_key_values=cache, output_hidden_states=True)  # prefill
        tokens = [int(out.logits[0, -1].argmax())]
        slots = Slots.after_prefill(prompt_ids[0].tolist(), tokens[0], taps_of(out))  # the EAGLE shift
        per_round = []
        while len(tokens) < NEW_TOKENS:
            drafts = draft(slots, K)                                                    # 1. draft
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
                first_round.update(inputs=verify[0].tolist(), choices=choice, accepted=a, start=start)
            if a < K:
                cache.crop(a - K)                                                       # 5. roll back K - a drafts
            # the EAGLE shift: verify row i predicted input i+1, so rows 0..a (the last committed token and the
            # accepted drafts) are the taps that predicted the new tokens; the rows of rejected drafts are dropped
            slots = Slots(new, taps_of(out)[: len(new)], start)
            tokens += new
            per_round.append(len(new))
    return tokens[:NEW_TOKENS], per_round


K = 5
tokens, per_round = speculate(K, show=True)
print(f"{len(per_round)} rounds (target forwards after the prefill), tokens per round {per_round}")

# %% [markdown]
# The first round, drawn from the values the cell kept: the verify pass reads the last committed token and the 5
# drafts; row j's greedy choice checks draft j + 1; the round keeps the drafts up to the first mismatch, adds the
# choice there as its bonus, and crops the rejected drafts from the target's cache.

# %%
from peagle_lab.workbook.diagrams import draw_verify_round

as_text = lambda ids: [tokenizer.decode([t]) for t in ids]
draw_verify_round(as_text(first_round["inputs"]), as_text(first_round["choices"]), first_round["accepted"],
                  first_round["start"]);

# %%
from peagle_lab.decoding.divergence import first_divergence, lossless_regime
from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.workbook import payoff

runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
package = speculative_generate(runner, HeadDrafter(head), prompt_ids[0], k=K, max_new_tokens=NEW_TOKENS)
plain = plain_generate(runner, prompt_ids[0], NEW_TOKENS)
print(f"head: {head_info['source']} ({head_info['origin']}; trained for K={head_info['trained_k']}, "
      f"{head_info['num_hidden_layers']} layer, draft vocabulary {head_info['draft_vocab_size']})")
al = package.stats.acceptance_length
print(f"acceptance length {sum(per_round) / len(per_round):.2f} by hand, {al:.2f} in the package's loop "
      f"(this prompt, K={K}, {NEW_TOKENS} new tokens, {precision.dtype_name(model.dtype)})")
if K + 1 in step:  # the verification's cost, measured above: a round that commits fewer tokens cannot pay
    cost = step[K + 1] / step[1]
    print(f"prediction: a round commits {al:.2f} tokens and its verification alone costs {cost:.2f} decoding steps, "
          + ("so on these timings speculation cannot pay here" if al < cost else
             f"so it pays if a drafter pass costs < {al - cost:.2f} steps"))
speedup = plain.seconds / package.seconds
print(f"wall time, the package's loops on this prompt, one run each: plain {plain.seconds:.2f} s, speculative "
      f"{package.seconds:.2f} s -> {speedup:.2f}x: speculation is {payoff.one_run_verdict(speedup)} on this prompt "
      "(07 reads a committed run of 24 prompts)")
print("hand-written == package's loop:", tokens == package.tokens[:NEW_TOKENS])
print(f"regime: {lossless_regime(model.dtype, DEVICE)} ({model.dtype} on {DEVICE})")
div = first_divergence(tokens, plain, model.dtype, DEVICE)
print("hand-written vs plain greedy:", "identical" if div is None else div.message())

# %% [markdown]
# **Reading it.** The hand-written round, the package's loop and plain greedy decoding give identical tokens. In the
# first round the drafter reads 42 slots, one per prompt token. Rolling back 2 rejected drafts shrinks the target's
# cache from 48 positions to 46. Speculation is slower here, 0.78x in one run: a round commits 1.47 tokens, but
# verifying it costs 2.00 steps, and drafting adds its own time.
#
# ### Acceptance length, draft by draft
#
# Let p_j be draft j's acceptance rate over the rounds that reached it (accepted drafts 1..j-1); `nan` if none did. A
# round always commits its bonus, and commits draft j in a share p1·p2⋯pj of rounds. So
#
# **AL = 1 + p1 + p1·p2 + … + p1·p2⋯pK.**

# %%
import math

rates = package.stats.conditional_acceptance  # p_1 .. p_K
terms, reach = [], 1.0
for p in rates:
    reach *= 0.0 if math.isnan(p) else p  # the share of rounds accepting drafts 1..j (a draft never reached: 0)
    terms.append(reach)
al_formula = 1 + sum(terms)
print("rates:", "  ".join(f"p{j}={p:.3f}" for j, p in enumerate(rates, 1)))
print(f"AL = 1 + {' + '.join(f'{t:.3f}' for t in terms)} = {al_formula:.3f}; measured: {al:.3f}")
print("equal: p1⋯pj is exactly the share of rounds that accepted draft j" if abs(al_formula - al) < 5e-4 else
      f"{al_formula - al:+.3f} apart: a round that drafted fewer than K (near the token budget) and accepted them "
      "all reached no further draft, so the next rate counts fewer rounds and the product overstates a little")
if al_formula > 1:
    print(f"draft 1 supplies {terms[0] / (al_formula - 1):.0%} of the {al_formula - 1:.3f} extra tokens a round "
          "commits over plain decoding")

# %% [markdown]
# **Reading it.** The terms shrink fast: draft 1 supplies 80% of the 0.469 extra tokens per round. Draft 5, never
# reached, adds nothing. Where most drafts are accepted, as on 06's list requests, rounds commit several tokens and
# speculation beats plain decoding.
#
# ### Exercise: change K
#
# The next cell reruns the hand-written loop at `K_TRY` = 1, then 10. Predict the rounds, the acceptance length, and
# whether the tokens change.
#
# <details><summary>Answer</summary>
#
# K = 1 takes 33 rounds against K = 5's 32: most K = 5 rounds commit 1 or 2 tokens anyway. K = 10 takes the same 32
# rounds. A slot sees only earlier slots, so its first 5 drafts are K = 5's, and no K = 5 round accepted a 4th draft.
# The tokens never change.
#
# </details>

# %%
tries = {}  # K -> the acceptance length of each round
for K_TRY in (1, 10):  # the two values of the exercise; edit to try others
    tokens_try, rounds_try = speculate(K_TRY)
    tries[K_TRY] = rounds_try
    print(f"K={K_TRY}: {len(rounds_try)} rounds, acceptance length {sum(rounds_try) / len(rounds_try):.2f}, "
          f"max per round {max(rounds_try)}; identical to plain greedy: {tokens_try == plain.tokens}")
print(f"(K={K}, above: {len(per_round)} rounds, acceptance length {sum(per_round) / len(per_round):.2f})")

# %% [markdown]
# ### Exercise: write the acceptance rule yourself
#
# Write the body of `my_accept` (steps 3 and 4): return the accepted drafts, then the bonus token. `choice[j]` is the
# target's greedy token after the first j drafts, for j = 0..K. The next cell checks your rule against the package's
# `accept_greedy` on 500 random rounds; the one after holds the answer.

# %%
import random

from peagle_lab.decoding.sampling import accept_greedy


def my_accept(drafts, choice):
    """The tokens one greedy round commits: the accepted drafts, then the bonus token."""
    raise NotImplementedError("write me: about four lines")


def check_accept(rule, rounds=500):
    """``rule`` against the package's accept_greedy on random rounds (drafts from a 4-token vocabulary)."""
    rng, wrong = random.Random(0), []
    for _ in range(rounds):
        k = rng.randint(1, 8)
        choice = [rng.randrange(4) for _ in range(k + 1)]
        drafts = [c if rng.random() < 0.7 else rng.randrange(4) for c in choice[:k]]
        a, bonus = accept_greedy(torch.tensor(drafts), torch.nn.functional.one_hot(torch.tensor(choice), 4).float())
        if rule(drafts, choice) != drafts[:a] + [bonus]:
            wrong.append((drafts, choice))
    print(f"the rule and the package's agree on {rounds - len(wrong)} of {rounds} random rounds"
          + (f"; the first disagreement: drafts {wrong[0][0]}, target {wrong[0][1]}" if wrong else ""))


try:
    check_accept(my_accept)
except NotImplementedError as exc:
    print(f"my_accept is not written yet ({exc}); the answer is the next cell")

# %%
# The answer. A draft counts only while every draft before it was accepted, so the first disagreement ends the
# round; the bonus is the target's token at that position, which is why a round always commits at least one token.
def answer_accept(drafts, choice):
    a = 0
    while a < len(drafts) and drafts[a] == choice[a]:
        a += 1
    return drafts[:a] + [choice[a]]


check_accept(answer_accept)

# %% tags=["nbval-ignore-output"]
# Bookkeeping: this chapter's acceptance lengths as rows of 09's acceptance ledger.
from peagle_lab.workbook import ledger

book = ledger.Logbook("00", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(model.dtype))
book.add("the hand-written round's prompt", head_name, prompt_set="one chat prompt (prime check)", prompts=1,
         new_tokens=NEW_TOKENS, k=K, stats=package.stats)
for k_try, rounds_try in tries.items():
    book.add(f"exercise, the hand-written round at K={k_try}", head_name, prompt_set="one chat prompt (prime check)",
             prompts=1, new_tokens=NEW_TOKENS, k=k_try, rounds=len(rounds_try),
             acceptance_length=round(sum(rounds_try) / len(rounds_try), 4))

# %% [markdown]
# ## The course
#
# | notebook | question it answers |
# |---|---|
# | `01_hidden_states` | What does the drafter read? |
# | `02_mask_tokens` | How does one pass draft K tokens? The drafter written from scratch. |
# | `03_training_data` | What does a head train on? The target's answers, the draft vocabulary, the features. |
# | `04_train_head` | How is a head trained? COD, the forward by hand, the loop by hand, the whole path. |
# | `05_scale_and_acceptance` | How far does training go, and how do you train a head for your own model? |
# | `06_parallel_vs_sequential` | What does a round cost each way, and when does parallel drafting pay? |
# | `07_what_it_takes` | The shipped heads on open prompts; losslessness in bfloat16; what acceptance would pay here. |
# | `08_vllm_deploy` | Serving a head with vLLM, under load and with tensor parallelism. |
# | `09_explorer` | Drafts token by token; speculative sampling; the course's verdicts side by side. |
#
# `reference.md`, beside the notebooks, collects the glossary, the rules every measurement follows, the heads and
# prompt sets, each chapter's run time and the questions users ask most, with the chapter that answers each.

# %% [markdown]
# ## What we saw
#
# - A round is five steps: draft, verify, accept, bonus, roll back. The hand-written round matches the package's loop
#   (AL 1.47).
# - Every speculative output here is identical to plain greedy decoding (float32, CPU).
# - Verifying K=5 drafts costs 2.00 one-token steps, more than the 1.47 tokens a round commits: speculation ran at 0.78x
#   here.
# - Draft 1 supplied 80% of the extra tokens. K=10 gave the same AL as K=5: a larger K cannot rescue weak early drafts.
#
# Next: `01_hidden_states`, the features every EAGLE-3 and P-EAGLE drafter reads.
