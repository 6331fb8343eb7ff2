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
# # 00 · Overview: speculative decoding and P-EAGLE
#
# **Goal:** understand one speculative round (draft, verify, accept, bonus, roll back) well enough to write its loop
# yourself, and know exactly what "lossless" means.
#
# **What to expect on a 2-core CPU.** The course builds each piece in view and checks it against its package,
# `peagle_lab`. The target is small (135M parameters), and the drafters the course trains (*heads*) accept few drafts
# on open prompts, so their speed-ups here are small; this chapter's float32 runs are slower than plain decoding.
# Speculation pays where many drafts are accepted. Here that means list requests, where 06 races a P-EAGLE and an
# EAGLE-3 head trained alike, and an *oracle* drafter that accepts at the paper's rate; on open prompts the course's
# heads do not get there. 07 prices the acceptance it would take, and 12 sets every verdict side by side.
#
# Results are *committed* (saved under `data/`) or *live* (run here, moving with the machine's load).
#
# **Precision.** On a CPU the chapters load the target in float32, where speculative output equals plain greedy
# output token for token. Chapters 06, 07 and 09 run in bf16 where the CPU has bf16 units, as a GPU would (06 and 07
# time speculation there; 09 takes a bf16 divergence apart); they print the dtype they run in, and their outputs may
# leave plain greedy only at near-ties.

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
# At batch size 1, a GPU forward over a few new tokens costs little more than a *step*, a forward over one new token:
# memory traffic and kernel launches dominate, not arithmetic (the usual explanation; this chapter times the cost, not
# its cause). Speculative decoding exploits this:
#
# 1. A cheap **drafter** proposes K tokens.
# 2. The **target**, the model we want output from, checks them all in **one** forward pass.
# 3. It keeps the longest prefix of drafts matching its own choices, plus one token of its own (the *bonus*).
#
# A **round** commits 1 to K+1 tokens; their mean is the **acceptance length** (AL), 1.00 for plain decoding.
#
# ### Lossless, exactly
#
# Greedy speculation commits only the target's own argmax tokens, so its output is plain greedy decoding's. In float32
# on a CPU the loop is built to be **identical**, and this chapter checks every run. In bfloat16 or on a GPU, verifying
# K+1 rows at once can change a logit's last bits, so where the top two logits nearly tie the output may differ (09).
#
# Lossless keeps the target's answer, right or wrong: the plain answer below is not correct code.

# %% [markdown]
# ## EAGLE-3 and P-EAGLE
#
# Both are EAGLE drafters: a small transformer (one layer here) that reads three of the target's hidden states, the
# *taps* (01), not just its tokens.
#
# - **EAGLE-3** drafts **sequentially**: one pass per token, each fed the token and state of the pass before.
# - **P-EAGLE** drafts all K tokens **in one pass**, one *slot* per draft. Slots 2..K get a learned mask token and a
#   shared learned vector, `mask_hidden`, in place of token and taps. 02 builds it; 04 trains it.
#
# The vLLM blog "P-EAGLE" (2026-03-13; arXiv 2602.01469) reports P-EAGLE at 1.55x EAGLE-3's speed, each at its best K
# (7 and 3): GPT-OSS-20B on one B200, batch 1, HumanEval. At K=7 the acceptance lengths are 3.94 against 3.03. These
# are published figures, not measured here; `reference.md` lists every such figure the course quotes, with its
# source. The diagram's costs are illustrative; 06 measures them.

# %%
from peagle_lab.workbook.diagrams import draw_drafting_schemes

draw_drafting_schemes(k=4);

# %% [markdown]
# ## The target and its plain greedy answer
#
# SmolLM2-135M-Instruct, a Llama, is embedded so the course runs offline; `PEAGLE_TARGET` swaps in any Hugging Face
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
# The next cell times greedy decoding, then forwards over 6 and 9 new tokens (K=5 and K=8 drafts) against a step. For
# comparison it quotes a committed H200 run with an 8B model's shapes.

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
print(f"host {precision.host_slug(DEVICE)}: {hardware.describe(DEVICE)}")
for key, value in [("target_params", n_params), ("greedy_tokens_per_s", round(tok_s, 2)),  # the workbook summary
                   ("forward_9_vs_1_ratio", round(step[9] / step[1], 3)), ("hardware", hardware.describe(DEVICE))]:
    record(key, value, notebook="00_overview")

# %% [markdown]
# **Reading it.** Verification is costly on this CPU: 1.89 steps for K=5 drafts in float32, against 1.17 on the H200. A
# round here must commit about two tokens, plus drafting's time, just to break even.
#
# A likely reason, not measured here (the cell times costs, not causes): at batch 1 a forward mostly streams the
# weights from memory, so extra rows are nearly free while the arithmetic keeps up. The H200's arithmetic is far
# faster than its memory; a 2-core CPU's float32 arithmetic is not.
#
# The chapter runs in float32 so its outputs equal plain decoding's; a verify pass costs fewer steps in bfloat16 on
# a CPU with bf16 units, which 06 and 07 time.
#
# <details><summary>How sure is this?</summary>
#
# - Medians of a few repeats in one run; they move between runs. Here 9 rows measured 1.93, a little above 6 rows' 1.89.
# - Steps compare within one dtype: a bf16 step need not be faster than a float32 one.
# - The H200 run is an eager PyTorch loop with random weights, not a serving engine. A forward's time depends on the
#   shapes, not the values: read its ratio, not its milliseconds.
#
# </details>
#
# ## One speculative round, written out
#
# The simplest drafter needs no model: **prompt lookup** (vLLM's `ngram` method) copies what followed the latest earlier
# occurrence of the context's last few tokens. Code repeats itself, so a copy is sometimes right. Each round of the loop
# after it:
#
# 1. **drafts** K tokens;
# 2. **verifies** the last committed token and the K drafts in one target forward;
# 3. **accepts** the longest prefix of drafts equal to the target's greedy choices;
# 4. adds the **bonus** token, the target's choice right after that prefix;
# 5. **rolls back** the target's KV cache (its stored keys and values) past the rejected drafts.
#
# The *prefill* is the target's first forward, over the whole prompt. The loop also keeps the taps of every committed
# position, for the EAGLE drafter below. The package's loop is the same.

# %%
def lookup(context, taps, K, max_ngram=3):
    """K drafts copied from the context (token ids): what followed the latest earlier occurrence of its last n tokens,
    n = 3, 2, 1, padded with the last copied token; with no match at all, K copies of the last token. No model:
    ``taps`` (the target's hidden states, read by EAGLE heads below) are ignored."""
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        tail = context[-n:]
        for i in range(len(context) - n - 1, 0, -1):  # latest first; i > 0: as in the package, never the first token
            if context[i:i + n] == tail:
                follow = context[i + n:i + n + K]
                return follow + [follow[-1]] * (K - len(follow))
    return [context[-1]] * K


print("drafts for 'a b c a b':", lookup(list("abcab"), None, 3))  # 'a b' at 0 is never matched; 'b' at 1 is: copy

# %%
from transformers import DynamicCache

from peagle_lab.training import ensure_head

head, head_info = ensure_head("parallel", model, tokenizer, TARGET)  # the shipped P-EAGLE head, used further down
taps_of = lambda out: torch.cat([out.hidden_states[i] for i in head.config.aux_hidden_state_layer_ids], -1)[0]
first_round = {}  # a round's verify pass, kept for the drawing below


def speculate(K, drafter, show=False):
    """Greedy speculative decoding of NEW_TOKENS tokens, K drafts a round: (tokens, tokens committed per round).
    ``drafter(context, taps, K)`` returns K token ids; ``taps`` has a row per position but the last (its hidden
    states come from the next verify pass)."""
    cache = DynamicCache()  # keeps every position (the model's mask applies any sliding window): crop rolls back
    with torch.no_grad():
        out = model(prompt_ids, past_key_values=cache, output_hidden_states=True)      # prefill
        context = prompt_ids[0].tolist() + [int(out.logits[0, -1].argmax())]           # + the first new token
        taps = taps_of(out)
        per_round = []
        while len(context) - prompt_ids.shape[1] < NEW_TOKENS:
            k = min(K, NEW_TOKENS - (len(context) - prompt_ids.shape[1]))  # near the budget: only what can be kept
            drafts = drafter(context, taps, k)                                         # 1. draft
            verify = torch.tensor([[context[-1]] + drafts], device=DEVICE)
            out = model(verify, past_key_values=cache, output_hidden_states=True)    # 2. verify in one pass
            choice = out.logits[0].argmax(-1).tolist()
            a = 0
            while a < k and drafts[a] == choice[a]:                                     # 3. longest agreeing prefix
                a += 1
            new = drafts[:a] + [choice[a]]                                              # 4. bonus token
            if show and not per_round:
                print(f"verify input {tuple(verify.shape)} -> logits {tuple(out.logits.shape)}; accepted {a} of "
                      f"{k}, committed {len(new)}; target cache {cache.get_seq_length()} -> "
                      f"{cache.get_seq_length() - (k - a)} positions")
                first_round.update(inputs=verify[0].tolist(), choices=choice, accepted=a,
                                   start=cache.get_seq_length() - k - 1)
            if a < k:
                cache.crop(a - k)                                                      # 5. roll back k - a drafts
            taps = torch.cat([taps, taps_of(out)[: a + 1]])  # verify rows 0..a: the positions now committed
            context += new
            per_round.append(len(new))
    return context[prompt_ids.shape[1]:][:NEW_TOKENS], per_round


K = 5
tokens_lookup, rounds_lookup = speculate(K, lookup)
print(f"prompt lookup, K={K}: {len(rounds_lookup)} rounds (target forwards after the prefill), acceptance length "
      f"{sum(rounds_lookup) / len(rounds_lookup):.2f}; identical to plain greedy: {tokens_lookup == answer.tolist()}")
print("tokens per round", rounds_lookup)

# %% [markdown]
# **Reading it.** Prompt lookup is lossless and accepts drafts in bursts: AL 1.37. Two rounds committed 6 and 5 tokens
# where the answer repeated earlier text; 30 of 35 committed only the bonus token. The last round's bonus falls past the
# 48-token budget: AL counts it, the output drops it (`reference.md`, "Acceptance length").
#
# ## A learned drafter in the same loop
#
# Copying is right only where the text repeats. An EAGLE head predicts instead, from the taps. It reads them with the
# **EAGLE shift**: drafter position t holds token x_{t+1} with h_t, the taps that predicted it. So with context x_0..x_n
# and x_{n+1} just chosen from h_n, slot 1 (position n) drafts x_{n+2}. P-EAGLE's mask slots 2..K draft x_{n+3},
# x_{n+4}, ... in the same pass. In the diagram, slot 1 (dark green) is the last context position; K-1 mask slots
# follow.

# %%
from peagle_lab.workbook.diagrams import draw_eagle_shift

draw_eagle_shift(n=4, k_fig=4)  # context x_0..x_4, one round of K=4 drafts

# %% [markdown]
# `peagle` below drafts with the shipped P-EAGLE head in one pass; treat the pass as a black box, 02 writes it from
# scratch. Its drafts are ids in a smaller *draft vocabulary*, mapped back to the target's (03).
#
# The drawing shows its first round: the verify pass reads the last committed token and the 5 drafts, and row j's
# greedy choice checks draft j + 1. The next cell checks both drafters against the package and plain decoding.

# %%
def peagle(context, taps, K):
    """P-EAGLE's K drafts: ONE pass of the head over tokens x_1..x_{n+1} with taps h_0..h_n, then K-1 mask slots."""
    logits = head.one_pass_logits(context[1:], taps, K)[-K:]  # the last K rows are drafts 1..K
    return head.to_target_logits(logits.float()).argmax(-1).tolist()  # draft vocabulary -> target ids


tokens, per_round = speculate(K, peagle, show=True)
print(f"P-EAGLE, K={K}: {len(per_round)} rounds, acceptance length {sum(per_round) / len(per_round):.2f}")
print("tokens per round", per_round)

from peagle_lab.workbook.diagrams import draw_verify_round

as_text = lambda ids: [tokenizer.decode([t]) for t in ids]
draw_verify_round(as_text(first_round["inputs"]), as_text(first_round["choices"]), first_round["accepted"],
                  first_round["start"]);

# %%
from peagle_lab.decoding.divergence import first_divergence, lossless_regime
from peagle_lab.decoding.draft_sources import HeadDrafter, PromptLookupDrafter
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.workbook import payoff

runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
plain = plain_generate(runner, prompt_ids[0], NEW_TOKENS)
package = speculative_generate(runner, HeadDrafter(head), prompt_ids[0], k=K, max_new_tokens=NEW_TOKENS)
package_lookup = speculative_generate(runner, PromptLookupDrafter(model.config.vocab_size), prompt_ids[0], k=K,
                                      max_new_tokens=NEW_TOKENS)
print(f"head: {head_info['source']} ({head_info['origin']}; trained for K={head_info['trained_k']}, "
      f"{head_info['num_hidden_layers']} layer, draft vocabulary {head_info['draft_vocab_size']})")
al = package.stats.acceptance_length
head_name = str(head_info["source"]).rstrip("/").split("/")[-1]
for name, rounds, run in [("prompt lookup", rounds_lookup, package_lookup), ("P-EAGLE", per_round, package)]:
    print(f"{name:13s}: acceptance length {sum(rounds) / len(rounds):.2f} by hand, "
          f"{run.stats.acceptance_length:.2f} in the package's loop (this prompt, K={K}, {NEW_TOKENS} new tokens, "
          f"{precision.dtype_name(model.dtype)})")
if K + 1 in step:  # the verification's cost, measured above: a round that commits fewer tokens cannot pay
    cost = step[K + 1] / step[1]
    print(f"prediction: a P-EAGLE round commits {al:.2f} tokens and its verification alone costs {cost:.2f} decoding "
          "steps, " + ("so on these timings speculation cannot pay here" if al < cost else
                       f"so it pays if a drafter pass costs < {al - cost:.2f} steps"))
print(f"wall time, the package's loops on this prompt, one run each (07 reads a committed run of 24 prompts): "
      f"plain {plain.seconds:.2f} s")
for name, run in [("prompt lookup", package_lookup), ("P-EAGLE", package)]:
    speedup = plain.seconds / run.seconds
    print(f"  {name:13s} {run.seconds:.2f} s -> {speedup:.2f}x: {payoff.one_run_verdict(speedup)} on this prompt")
print("hand-written == package's loop, both drafters:",
      tokens == package.tokens[:NEW_TOKENS] and tokens_lookup == package_lookup.tokens[:NEW_TOKENS])
print(f"regime: {lossless_regime(model.dtype, DEVICE)} ({model.dtype} on {DEVICE})")
div = first_divergence(tokens, plain, model.dtype, DEVICE)
print("hand-written P-EAGLE vs plain greedy:", "identical" if div is None else div.message())

# %% [markdown]
# **Reading it.** Both hand-written loops reach the package's acceptance lengths, and every output is plain greedy
# decoding's: P-EAGLE commits 1.47 tokens a round, prompt lookup 1.37. P-EAGLE's first round accepted 3 of 5 drafts;
# rolling back the other 2 shrank the target's cache from 48 positions to 46.
#
# Both are slower than plain decoding here (P-EAGLE 0.78x, prompt lookup 0.73x): verifying 5 drafts costs 1.89 steps,
# more than either commits. One timing each cannot order the two; 07 times 24 prompts.
#
# ### Acceptance length, draft by draft
#
# Let p_j be draft j's acceptance rate over the rounds that reached it by accepting drafts 1..j-1 (`nan` if none did).
# A round always commits its bonus, and commits draft j in a share p1·p2⋯pj of rounds. So
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
# **Reading it.** Draft 1 supplies most of the gain: 80% of the 0.469 extra tokens per round. Draft 5, never reached,
# adds nothing. Where most drafts are accepted, as on list requests, rounds commit several tokens and speculation
# beats plain decoding overall, though not on every request (06).
#
# ### Exercise: change K
#
# The next cell reruns the hand-written loop with P-EAGLE at `K_TRY` = 1, then 10. Predict the rounds, the acceptance
# length, and whether the tokens change.
#
# <details><summary>Answer</summary>
#
# - K = 1 takes 33 rounds against K = 5's 32: most K = 5 rounds commit 1 or 2 tokens anyway.
# - K = 10 takes the same 32. The reason is the design, not a printed comparison: a slot sees only earlier slots, so
#   K = 10's first 5 drafts are K = 5's, and no K = 5 round accepted a 4th draft.
# - The tokens never change.
#
# </details>

# %%
tries = {}  # K -> the acceptance length of each round
for K_TRY in (1, 10):  # the two values of the exercise; edit to try others
    tokens_try, rounds_try = speculate(K_TRY, peagle)
    tries[K_TRY] = rounds_try
    print(f"K={K_TRY}: {len(rounds_try)} rounds, acceptance length {sum(rounds_try) / len(rounds_try):.2f}, "
          f"max per round {max(rounds_try)}; identical to plain greedy: {tokens_try == plain.tokens}")
print(f"(K={K}, above: {len(per_round)} rounds, acceptance length {sum(per_round) / len(per_round):.2f})")

# %% [markdown]
# ### Exercise: write the acceptance rule yourself
#
# Write `my_accept` (steps 3 and 4): return the accepted drafts, then the bonus token. `choice[j]` is the target's
# greedy token after the first j drafts, for j = 0..K. The next cell checks your rule against the package's
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

# %% jupyter={"source_hidden": true} tags=["nbval-ignore-output"]
# Bookkeeping: this chapter's acceptance lengths as rows of 12's acceptance ledger.
from peagle_lab.workbook import ledger

book = ledger.Logbook("00", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(model.dtype))
book.add("the hand-written round's prompt", head_name, prompt_set="one code request (prime check)", prompts=1,
         new_tokens=NEW_TOKENS, k=K, stats=package.stats)
for k_try, rounds_try in tries.items():
    book.add(f"exercise, the hand-written round at K={k_try}", head_name, prompt_set="one code request (prime check)",
             prompts=1, new_tokens=NEW_TOKENS, k=k_try, rounds=len(rounds_try),
             acceptance_length=round(sum(rounds_try) / len(rounds_try), 4))

# %% [markdown]
# ## The course
#
# | notebook | question it answers |
# |---|---|
# | `01_hidden_states` | What does the drafter read? |
# | `02_mask_tokens` | How does one pass draft K tokens? The drafter from scratch. |
# | `03_training_data` | What does a head train on? The target's answers, the draft vocabulary, the features. |
# | `04_train_head` | How is a head trained? COD sampling, the forward and the loop by hand, the whole path. |
# | `05_scale_and_acceptance` | How far does training go, and why is acceptance below the paper's? |
# | `06_parallel_vs_sequential` | What does a round cost each way, and when does parallel drafting pay? |
# | `07_what_it_takes` | How fast are the shipped heads on open prompts, and what acceptance would pay here? |
# | `08_vllm_deploy` | How do you serve a head with vLLM, and does vLLM accept what our loop accepts? |
# | `09_explorer` | Is the output still the target's? Drafts token by token, bfloat16 near-ties, speculative sampling. |
# | `10_your_own_model` | How do you train a head for your own model? Its chat template, its taps, the recipe. |
# | `11_past_one_machine` | What do several processes, many requests at once and a sharded target change? |
# | `12_results` | Every result side by side: each host's runs, every acceptance length, the verdicts. |
#
# `reference.md`, beside the notebooks, collects the glossary, the measurement rules, the heads, the prompt sets, run
# times and common questions.

# %% [markdown]
# ## What we saw
#
# **In one sentence:** A speculative round drafts, verifies the drafts in one target pass, keeps the agreeing prefix
# plus a bonus token and rolls back the rest; its output is the target's own, and it pays only when a round commits more
# tokens than its verification costs.
#
# - A round is five steps: draft, verify, accept, bonus, roll back. Written by hand, it matches the package's loop with
#   prompt lookup (AL 1.37) and with the shipped P-EAGLE head (AL 1.47).
# - Every speculative output here is identical to plain greedy decoding (float32, CPU).
# - Verifying K=5 drafts costs 1.89 steps, more than the 1.47 tokens a P-EAGLE round commits: it ran at 0.78x here.
# - Draft 1 supplied 80% of the extra tokens. On this prompt K=10 gave the same AL as K=5: a larger K did not rescue
#   weak early drafts.
#
# Next: `01_hidden_states`, the features every EAGLE-3 and P-EAGLE drafter reads.
