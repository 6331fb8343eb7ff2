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
# # 07 · Explorer, and the results across hosts
#
# **Goal:** see, token by token, which tokens the drafter supplied and which the target added, and how K, the head,
# the drafting mode and the kind of prompt move the acceptance length; then read the committed speed-ups of every
# host side by side.
#
# Live runs first (the explorer, a fixed run, an exercise, speculative sampling from scratch), then the committed
# results across hosts; the acceptance ledger is an appendix.
#
# **How it works.** Each round the drafter proposes K tokens; the target verifies them in one pass, keeps the longest
# prefix it agrees with and adds one token of its own. A token's colour gives its source: **slot j** (from 1), a draft
# accepted as the j-th of its round; **grey**, the target's own (each round's *bonus*, and the first, from the
# prefill). The **acceptance length** is the mean tokens per round; the bars give each slot's acceptance rate once the
# slots before it were accepted. *Parallel* drafting (P-EAGLE) takes one drafter pass, *sequential* (EAGLE-3) K.

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, settings

# %%
from IPython.display import HTML, Markdown, display

from peagle_lab import precision
from peagle_lab.drafter.heads import SHIPPED
from peagle_lab.workbook import ledger, report, viz
from peagle_lab.workbook.explorer import (DEFAULT_PROMPT, GenerationSettings, available_heads, explorer, get_head,
                                          run_generation)

K = 4
MAX_NEW = settings.pick(64, 12)
model, tokenizer = models.load_target(TARGET, device=DEVICE)
HEADS = available_heads(model)
print("heads on offer:", HEADS, "| K:", K, "| max new tokens:", MAX_NEW)
# this chapter's rows in the acceptance ledger (the appendix): a head is named as shipped, or by kind and target
book = ledger.Logbook("07", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(model.dtype))


def ledger_head(name):
    return SHIPPED[name].name if name in SHIPPED and models.is_default_target(TARGET) else f"{name} ({TARGET})"

# %% [markdown]
# ## The explorer
#
# Type a prompt, choose K, the head and the drafting mode, and press **Generate**. Things to try: raise K and watch
# the deep slots' bars fall; run one head in both modes and compare the times; raise the temperature and watch fewer
# drafts pass (the loop then accepts by speculative sampling, written from scratch below). The widget needs a live
# kernel; the fixed run below draws the same view without it.

# %%
ex = explorer(model, tokenizer, k=K, max_new_tokens=MAX_NEW)
# what a static copy cannot draw, in words: the widget's controls and their starting values
print(f"The explorer (needs a live kernel): a prompt box (starting with {ex.prompt.value[:60]!r}); K slider "
      f"{ex.k.min}..{ex.k.max}, at {ex.k.value}; max-tokens slider at {ex.max_new.value}; head {HEADS}; "
      f"drafting mode parallel (P-EAGLE) or sequential (EAGLE-3); temperature {ex.temperature.min}..{ex.temperature.max}"
      f", at {ex.temperature.value}; a Generate button. Output: the coloured text, the summary and the per-slot bars, "
      f"as the fixed run below prints them.")
ex

# %% [markdown]
# ## One fixed run (no clicking needed)
#
# The same loop without widgets: the first head on offer, greedy, in its trained mode, on the explorer's default
# prompt (00's prime check), timed against plain decoding in the same run. Besides the acceptance length, the summary
# gives **tokens per forward** (the prefill counted), a little lower.

# %% tags=["nbval-ignore-output"]
head_name = HEADS[0]
run = run_generation(model, tokenizer, get_head(head_name, model),
                     GenerationSettings(prompt=DEFAULT_PROMPT, k=K, max_new_tokens=MAX_NEW), head_name=head_name)
print(f"head: {head_name} | mode: {run.mode} | prompt: {run.prompt!r}")
display(HTML(run.html(tokenizer)))
print(run.summary())
print(f"so: {run.stats.acceptance_length:.2f} tokens per round of a possible {K + 1}; speculation ran at "
      f"{run.speedup:.2f}x plain decoding's speed, so here it {'paid' if run.speedup > 1 else 'did not pay'}; "
      f"lossless against plain greedy: {'yes' if run.lossless else 'NO'}")
report.record(f"acceptance_length_k{K}_{head_name}", round(run.stats.acceptance_length, 3))
# the explorer's default prompt is 00's prime check: the ledger names it as 00 does
book.add("fixed run", ledger_head(head_name), prompt_set="one chat prompt (prime check)", prompts=1,
         new_tokens=len(run.tokens), k=K, rounds=run.stats.rounds, acceptance_length=round(run.stats.acceptance_length, 4));

# %% tags=["nbval-ignore-output"]
fig = viz.plot_per_position_acceptance(
    run.stats.conditional_acceptance,
    title=f"{head_name} head, {run.mode} drafting, K={K}: acceptance length {run.stats.acceptance_length:.2f}")
print("saved", settings.display_path(viz.save_figure(fig, "07_explorer_per_position")))

# %% tags=["nbval-check-output"]
print("every token has a source:", len(run.sources) == len(run.tokens))
print("the first token comes from the target:", run.sources[0] == viz.TARGET)
print("lossless (identical, or in a near-tie regime a near-tie divergence; see the regime above):", run.lossless)

# %% [markdown]
# **Reading it.** The shipped P-EAGLE head at K=4 commits 1.43 tokens per round of a possible 5 and runs slower than
# plain decoding, yet its output is plain greedy's, token for token; most tokens are grey or slot 1.
#
# <details><summary>The careful reading</summary>
#
# The last line of the run sums it up; in the saved outputs the run is live on `cpu-epyc-avx512bf16-2c` in float32. The
# prompt is 00's prime check (same text, same chat template), so the greedy answer is 00's too, but K (4 against 5) and
# the budget (64 tokens against 48) differ: the ledger (appendix) lists both runs under one prompt set, and their
# acceptance lengths are different samples, not a disagreement.
#
# </details>

# %% [markdown]
# ### Exercise: which kind of prompt gets more drafts accepted?
#
# The cell runs the same head on a code prompt and an open-ended chat prompt, same K and token budget. Predict which
# has the higher acceptance length, and why. Then try your own prompts in `PROMPTS`.
#
# <details><summary>Answer</summary>
#
# Intuition says code: keywords, indentation and closing brackets are easy to guess, open prose has many plausible
# continuations. But one prompt of each kind, a few dozen rounds, cannot rank kinds of text. The committed 24-prompt
# runs ("Results across hosts", AL at each head's best K) do not settle it either. Where that K is the same on both
# suites (`cpu-epyc-avx2-2c`, float32), code against chat: P-EAGLE 1.51 and 1.55 (K=4), EAGLE-3 1.61 and 1.60 (K=3).
# On `cpu-epyc-avx512bf16-2c` the best K differs between the suites, so by the ledger's rule those figures do not
# compare. The training mix is about half code (03), so code is not new to these heads.
#
# </details>

# %% tags=["nbval-ignore-output"]
PROMPTS = {
    "code": "Write a Python function `is_prime(n)` that returns True when n is a prime number.",
    "chat": "Describe a quiet morning in a small fishing village.",
}
for kind, text in PROMPTS.items():
    r = run_generation(model, tokenizer, get_head(head_name, model),
                       GenerationSettings(prompt=text, k=K, max_new_tokens=MAX_NEW, baseline=False), head_name=head_name)
    print(f"{kind:5s}: acceptance length {r.stats.acceptance_length:.2f} over {r.stats.rounds} rounds; per slot "
          + " ".join("-" if x != x else f"{x:.2f}" for x in r.stats.conditional_acceptance)
          + " (accepted/reached: " + " ".join(f"{a}/{n}" for a, n in zip(r.stats.accepted_at, r.stats.attempted_at))
          + ")")
    book.add(f"exercise, {kind} prompt", ledger_head(head_name), prompt_set=f"one {kind} prompt", prompts=1,
             new_tokens=len(r.tokens), k=K, rounds=r.stats.rounds, acceptance_length=round(r.stats.acceptance_length, 4))

# %% [markdown]
# ## Speculative sampling from scratch
#
# Above temperature 0 the target draws its token from a distribution p, and the drafter drew its draft x from its own
# distribution q. The output must still follow p exactly. The rule (Leviathan et al.; Chen et al., 2023): accept x
# with probability min(1, p(x)/q(x)); on a rejection, draw from the residual max(0, p - q), normalised. An accepted
# token y comes out with probability min(p(y), q(y)); the residual adds exactly the p(y) - q(y) that q under-supplies.
# Below: a six-token vocabulary with seeded p and q, the rule in a few lines, many draws, and what came out beside p.

# %%
import matplotlib.pyplot as plt

VOCAB = ["the", "a", "cat", "dog", "sat", "ran"]
g = torch.Generator().manual_seed(0)
target_logits = 1.5 * torch.randn(len(VOCAB), generator=g)   # the target's logits at one position, temperature 1
p = target_logits.softmax(-1)                                 # the target's distribution
q = (1.5 * torch.randn(len(VOCAB), generator=g)).softmax(-1)  # the drafter's: another guess


def speculative_accept(x, p, q, gen):
    """A draft x drawn from q in; out: (the token emitted, whether x was accepted). The token follows p."""
    u = float(torch.rand((), generator=gen))
    if u < min(1.0, float(p[x]) / float(q[x])):  # accept x with probability min(1, p(x)/q(x))
        return x, True
    residual = (p - q).clamp_min(0)  # the mass q under-supplies
    return int(torch.multinomial(residual / residual.sum(), 1, generator=gen)), False


N_DRAWS = settings.pick(20_000, 4_000)
gen = torch.Generator().manual_seed(0)
counts, accepted = torch.zeros(len(VOCAB)), 0
for _ in range(N_DRAWS):
    x = int(torch.multinomial(q, 1, generator=gen))  # the drafter proposes x ~ q
    token, ok = speculative_accept(x, p, q, gen)
    counts[token] += 1
    accepted += ok
emitted = counts / N_DRAWS
tv, tv_q = 0.5 * float((emitted - p).abs().sum()), 0.5 * float((q - p).abs().sum())
print("token    p      q      emitted")
for w, pi, qi, ei in zip(VOCAB, p.tolist(), q.tolist(), emitted.tolist()):
    print(f"{w:6s}  {pi:.3f}  {qi:.3f}  {ei:.3f}")
print(f"total variation distance from p: emitted {tv:.4f} ({N_DRAWS} draws); the drafts themselves (q) {tv_q:.3f}")
print(f"drafts accepted: {accepted / N_DRAWS:.3f} of draws; the rule's rate, the sum of min(p, q) = 1 - TV(p, q): "
      f"{1 - tv_q:.3f}")
assert tv < 0.05, f"the emitted tokens do not follow p (TV {tv:.3f})"

fig, ax = plt.subplots(figsize=(7, 2.6))
for shift, values, label in ((-0.27, p, "p (target)"), (0.0, q, "q (drafter)"), (0.27, emitted, "emitted")):
    ax.bar([i + shift for i in range(len(VOCAB))], values.tolist(), width=0.27, label=label)
ax.set_xticks(range(len(VOCAB)), VOCAB)
ax.set_ylabel("probability")
ax.legend()
plt.show()

# %%
from peagle_lab.decoding.sampling import Sampling, accept_sampling

N_SAME, same = settings.pick(2_000, 500), 0
for i in range(N_SAME):  # the same draws for both rules: one seed per draw, the generator rewound in between
    gen = torch.Generator().manual_seed(i)
    x = int(torch.multinomial(q, 1, generator=gen))
    state = gen.get_state()
    mine, _ = speculative_accept(x, p, q, gen)
    gen.set_state(state)
    a, tok = accept_sampling(torch.tensor([x]), q[None], target_logits.expand(2, -1), Sampling(temperature=1.0), gen)
    same += mine == (x if a == 1 else tok)  # a == 1: the draft was accepted
print(f"the package's accept_sampling (the loop's rule above temperature 0) emits the same token on {same} of "
      f"{N_SAME} draws")
assert same == N_SAME

# %% [markdown]
# **Reading it.** Every token began as a draft from q, far from p, yet the emitted column sits on p within sampling
# noise: a q far from p costs speed (drafts pass at the rate sum of min(p, q)), never the output's distribution. The
# package's rule agrees on the same draws.

# %% [markdown]
# ## Results across hosts
#
# 05's full-size benchmark runs on two 2-core CPU hosts, one without native bf16 and one with bf16 units: one table
# per suite (`code`: HumanEval; `chat`: the prompt mix's held-out split), one row per host and dtype. The columns:
#
# - `prompts`: prompts x new tokens; `verify_k7`: verifying 8 tokens in one target pass, in decode steps;
# - `P-EAGLE`, `EAGLE-3`, `lookup`: the best end-to-end speed-up over plain decoding (head, or untrained prompt
#   lookup), with its K and acceptance length;
# - `faster than plain`: on how many prompts each head at that K (P-EAGLE / EAGLE-3) beats plain decoding, timed
#   side by side on the same prompt;
# - `paired`: per prompt, P-EAGLE's speed-up minus EAGLE-3's, lowest to highest;
# - `oracle`: the paper's acceptance replayed on the same draws, charged one parallel pass / K sequential passes.
#
# The verdict lines read these by the paired rule (the appendix below), a sign test over the prompts: *shown faster* (or
# *slower*) where a fair coin would split the prompts so unevenly less than 5% of the time, else *not shown*, whatever
# the average.
#
# <details><summary>Where these runs come from, and what the columns leave out</summary>
#
# The runs are committed under `data/results/<host>/<dtype>/` with their commands: the embedded SmolLM2-135M target
# and the shipped heads, batch 1, on `cpu-epyc-avx2-2c` (no native bf16) and `cpu-epyc-avx512bf16-2c` (bf16 units).
#
# - `verify_k7` is timed in isolation by the drafting-cost benchmark, not a loop round (05's round timer, drafting
#   included, is another run).
# - The speed-up is tokens per second against plain decoding in the same run, the prefill included, at the K where
#   it is highest (05's decode speed-ups leave the prefill out, so they sit a little further from 1).
# - `N/24 diverge, margin <= m` (where shown): outputs that differ from plain greedy's, so that speed-up timed slightly
#   different text; `m` is the largest top-1 minus top-2 logit margin at a divergence, a near-tie in bf16 (05
#   explains the scale).
# - The oracle's acceptance is the paper's HumanEval figure (AL 3.94 at K=7) on `code` and its lower MT-Bench figure
#   (3.70) on `chat`.
#
# </details>

# %% tags=["nbval-ignore-output"]
from peagle_lab import bench
from peagle_lab.bench.files import result_suites
from peagle_lab.workbook import across_hosts, payoff
from peagle_lab.workbook.notebook import committed_label

HOST = precision.host_slug(DEVICE)
committed = [c for c in bench.committed_results(settings.data_dir() / "results") if result_suites(c["results"])]
print(committed_label("The tables below") + f"; this machine is {HOST}"
      + ("" if any(c["host"] == HOST for c in committed) else ", which has no committed run"))
for suite, rows in across_hosts.suite_tables(committed, HOST).items():
    display(Markdown(f"**`{suite}` suite**\n\n" + bench.format_table(rows, list(rows[0]))))


across_hosts.print_verdicts(committed, payoff.verdict_word)  # the paired rule: the sign test of 05's `order`

# %% [markdown]
# **Reading it.** Speculation pays where the acceptance length clears a round's cost: with bf16 units, where
# verification is cheap (`verify_k7` 1.07), both heads are shown faster than plain decoding (1.14x to 1.31x on
# average); in float32 they lose (0.67x to 0.82x), four of the six shown slower. At the paper's acceptance one
# parallel pass per round is shown faster than seven sequential passes on both suites (1.56x against 1.39x on chat,
# 1.59x against 1.46x on code).
#
# <details><summary>The careful reading</summary>
#
# A round's cost is counted in decode steps (05's formula).
#
# - **Cheap verification** (`cpu-epyc-avx512bf16-2c`, bfloat16): both heads are faster than plain decoding on 19 to
#   23 of 24 prompts: by the paired rule all four are shown faster (their bf16 divergences count in those timings,
#   every one at a margin of at most 0.125 logits for the heads, 0.25 for prompt lookup: the table's `margin`).
# - **High acceptance** is another way: untrained prompt lookup reaches 1.33x on code (`cpu-epyc-avx2-2c`, float32, AL
#   2.64; faster on 22 of 24 prompts, shown faster, 05). It drafts up to 10 tokens only where it finds a match, so
#   `verify_k7` is not its round cost; that the answers copy the prompt is a plausible reading, not shown here.
# - **Float32**: the trained heads have neither (`verify_k7` 1.88 and 2.06, AL 1.31 to 1.61). Each is faster than
#   plain decoding on at most 4 of 24 prompts; the two on the 5-prompt run cannot be shown either way (p = 0.0625 at
#   best), the other four are shown slower.
# - **Which head**: neither is shown faster than the other in any run.
# - **At the paper's acceptance** (`cpu-epyc-avx2-2c`, float32, same draws): chat uses the paper's MT-Bench
#   acceptance, and parallel is faster there on every prompt; on code (its HumanEval acceptance) on 22 of 24 prompts.
#   Both are shown faster.
#
# </details>

# %% [markdown]
# ## Appendix: the acceptance ledger
#
# The acceptance lengths the course recorded for the two shipped heads, one row each with what was decoded
# (`prompt_set`, `prompts`, `new_tokens`), `k`, `dtype` and `rounds` (`-`: not recorded). Rows compare only where
# these agree. Under the table: each head's lowest and highest row, and which settings differ between them; indented,
# the rows of its most-recorded prompt set, host and dtype.
#
# <details><summary>What the ledger holds</summary>
#
# Every live run; each committed bench run's best-K row; 04's held-out comparison at K=3 and K=7; 06's serving sweep
# at each concurrency. The studies of 02 and 03, 04's learning curves and recipe
# runs, other heads, 05's oracle rows, the committed runs' other K and 05's break-even points stay in their chapters.
# `rounds` is the sample behind a row.
#
# </details>

# %% tags=["nbval-ignore-output"]
from collections import Counter

rows = ledger.course_rows(settings.data_dir(), SHIPPED, settings.REPO_ROOT)
display(Markdown(ledger.markdown(rows)))
SETTINGS = ("host", "prompt_set", "prompts", "new_tokens", "k", "dtype")


def setting(r):
    return r["prompt_set"], r["host"], r["dtype"]


for head in dict.fromkeys(r["head"] for r in rows):
    mine = sorted((r for r in rows if r["head"] == head), key=lambda r: r["acceptance_length"])
    lo, hi = mine[0], mine[-1]
    print(f"{head}: {len(mine)} rows, {lo['acceptance_length']:.2f} ({lo['chapter']}, {lo['what']}) to "
          f"{hi['acceptance_length']:.2f} ({hi['chapter']}, {hi['what']}); these two differ in "
          + (", ".join(c for c in SETTINGS if lo[c] != hi[c]) or "none of the settings"))
    top = Counter(setting(r) for r in mine).most_common(1)[0][0]  # the head's most-recorded prompt set, host, dtype
    same = [r for r in mine if setting(r) == top]
    if len(same) > 1:
        print(f"  {top[0]} alone ({top[1]}, {top[2]}): {len(same)} rows from chapters "
              f"{', '.join(sorted({r['chapter'] for r in same}))}, {same[0]['acceptance_length']:.2f} to "
              f"{same[-1]['acceptance_length']:.2f}, over " + "; ".join(
                  f"{name} " + ", ".join(str(v) for v in sorted({r[c] for r in same} - {None}))
                  for c, name in (("prompts", "prompts"), ("new_tokens", "new tokens"), ("k", "K"))))
bench05 = [r["acceptance_length"] for r in rows if r["chapter"] == "05" and "(committed)" in r["what"]]
print(f"05's {len(bench05)} committed benchmark rows: {min(bench05):.2f} to {max(bench05):.2f}")

# %% [markdown]
# **Reading it.** Each head's lowest and highest rows (the unindented lines) differ in the prompts and in several
# other settings at once, so no one setting explains the spread; P-EAGLE's lowest, 1.00, is 04's run without the chat
# template. 05's committed benchmark rows, hundreds of rounds each, all sit between 1.31 and 1.64.
#
# <details><summary>The careful reading</summary>
#
# Two figures compare only where every setting agrees, and fixing the prompt set, host and dtype is not enough (the
# indented lines). The P-EAGLE head's HumanEval rows in float32 (04, 05, 06) decode different numbers of prompts and
# tokens at different K, so they are different samples of HumanEval, not disagreements. Likewise the prime-check
# rows: 00's (K=1, 5 and 10, 48 new tokens) and 07's fixed run (K=4, 64) share the prompt, not K or the budget.
# `float32 (not recorded: serve-sweep's CPU setting)` marks the serving sweep's rows: its file does not record the
# dtype, and float32 is what serve-sweep gives vLLM on a CPU, 06's "vLLM in float32".
#
# </details>
#
# ## Appendix: how the course measures
#
# Every chapter reads its figures by the same rules; here they are in one place.
#
# | rule | what it says | where it is built |
# |---|---|---|
# | acceptance length | AL = 1 + accepted drafts / rounds, the bonus token included, over every round of a run. A round drafts at most the tokens left in the budget, but its bonus token may fall one past it (or past the end of the answer) and is then cut from the output: so AL x rounds can exceed a run's new tokens (less the prefill's one) by one | 00; the loop in 02 |
# | per-slot rate | p_j = P(draft j accepted \| drafts 1..j-1 accepted), printed with the rounds that reached slot j where the results file records it, e.g. `0.85 (412)`; a rate over a dozen rounds is a dozen events, not a property of the head. Slot j is depth j - 1 | 00; 04, 05 |
# | round, in decode steps | round = (t_draft + t_verify) / t_step, each a median per round of the same run; ideal = AL / round; `decode_speedup` is the measured tokens/s after the prefill against plain decoding's, end to end (`speedup`) includes the prefill, which every method pays alike | 05 |
# | paired rule | two methods are timed side by side on each prompt, their order rotated; one is *shown faster* when a two-sided exact sign test over the prompts gives p < 0.05 (`payoff.sign_test`), otherwise the course says "faster on N of M prompts", whatever the average | 05, written out |
# | seed spread | for acceptance lengths: the largest gap between two training seeds of one setting in the committed studies (0.052); a smaller gap between two heads is read as a tie | 02, 03 |
# | lossless | fp32 on a CPU: identical to plain greedy, token for token. bf16, or fp32 on a GPU: identical, or diverging where plain greedy's top two logits are within a few ulps, units in the last place, of the top logit (a near-tie: kernels that sum in another order may swap them), reported with the margin; a divergence at a margin of logits would be a bug. Sampling: the emitted tokens follow the target's distribution (tested statistically) | 00; 05; sampling above |
# | ledger | every acceptance length the course recorded for the two shipped heads, with its prompts, new tokens, K, dtype and host; two rows compare only where these agree | the appendix above; 00 lines up the committed runs |
# | oracle | a drafter that replays a published acceptance on the same draws, charged one parallel pass or K sequential passes: what drafting costs, apart from how well a head drafts | 05 |
# | committed, live | committed: a full-size run read from `data/`, measured once, quoted with its host and dtype; live: run in this execution on a few prompts, its timings moving between runs, its acceptance repeating in fp32 | every chapter |
# | hosts | a host is named by its CPU (`cpu-epyc-avx2-2c`: 2 cores, AVX2 only; `cpu-epyc-avx512bf16-2c`: native bf16 units); each host's results sit in a folder of their own, and a figure is compared only with figures of its host and dtype | every chapter |

# %% [markdown]
# ## What we saw
#
# - **The fixed run.** The shipped P-EAGLE head at K=4 commits 1.43 tokens per round of a possible 5 on 00's
#   prime-check prompt, slower than plain decoding, and its output matched plain greedy's.
# - **The exercise.** One code and one chat prompt cannot rank kinds of text; the committed 24-prompt runs do not
#   either.
# - **Speculative sampling.** Accept a draft with probability min(1, p/q), resample a rejection from max(0, p - q):
#   the tokens follow p whatever q; q sets only how many drafts pass.
# - **Across hosts.** With bf16 units both heads are shown faster than plain decoding (1.14x to 1.31x), in float32
#   they lose (0.67x to 0.82x).
# - **The ledger.** A head's acceptance length belongs to its prompts and settings: the shipped heads' run from 1.00
#   to 2.53 across the course.
#
# <details><summary>The figures behind these bullets</summary>
#
# - **The fixed run** is live, in the saved outputs on `cpu-epyc-avx512bf16-2c` in float32.
# - **Across hosts.** Speculation beats plain decoding where the acceptance length clears a round's cost; with bf16
#   units (`cpu-epyc-avx512bf16-2c`, bfloat16) verification is cheap. In float32 prompt lookup on code is faster on
#   average (1.33x). At the paper's acceptance one parallel pass per round is shown faster than seven sequential
#   passes on the same draws (committed, `cpu-epyc-avx2-2c`, float32): on chat (MT-Bench's acceptance; 1.56x against
#   1.39x, faster on every prompt) and on code (1.59x against 1.46x, faster on 22 of 24 prompts). With trained heads
#   the same holds on average on a narrow domain (05's list section: both continued heads at AL 3.6, P-EAGLE 1.75x
#   against EAGLE-3 1.55x in float32), which 16 prompts do not show (faster on 12 of 16, p = 0.077); 05's matched pair,
#   trained alike from one start, shows it on 48 prompts (faster on 37 of 48) while P-EAGLE accepts less.
#
# </details>
#
# What the course showed: a P-EAGLE drafter reads the target's hidden states (`01_hidden_states`), drafts K tokens in
# one pass with mask tokens (`02_mask_tokens`) and learns from the target's own outputs (`03_train_head`). On a CPU
# budget acceptance grows slowly with data (`04_scale_and_acceptance`): too slowly to pay in float32; in bf16 the
# heads are shown faster than plain decoding, modestly (1.14x to 1.31x); on a narrow domain a 15-minute continuation
# buys the acceptance; and two heads trained alike there, from one start on the same answers for the same steps,
# show P-EAGLE's one pass faster than EAGLE-3's K passes prompt by prompt, although it accepts less
# (`05_parallel_vs_sequential`); the same head serves in vLLM (`06_vllm_deploy`).
# The mechanism works and stays lossless; on open prompts a CPU budget bought little acceptance.
# Next: the repository's `README.md` and `docs/`.
