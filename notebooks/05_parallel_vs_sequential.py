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
# # 05 · Parallel vs sequential drafting: measure it
#
# What this notebook shows:
#
# 1. why one P-EAGLE round costs about **one** drafter pass while an EAGLE-3 round costs **K** passes;
# 2. the per-round drafting latency of both, for K = 1, 2, ..., measured on this machine;
# 3. end-to-end greedy decoding on HumanEval prompts: plain decoding, P-EAGLE and EAGLE-3 over a K sweep,
#    transformers' `generate` and its prompt-lookup decoding; speed-ups, acceptance lengths, the ideal
#    speed-up the measured costs allow, and a check that every output equals plain greedy decoding;
# 4. where the time of one round goes, and what one verification costs against one decode step;
# 5. the committed results of every host (`data/results/<host>/<dtype>/`), with the hardware they ran on;
# 6. what it takes: the break-even picture, speed-up against acceptance length.
#
# Everything here is `peagle_lab.bench`; the same run from a shell is `peagle-lab bench` (see the end).

# %%
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

import torch
from peagle_lab import models, settings

# %% [markdown]
# ## Why parallel drafting is cheaper
#
# A speculative round is *draft K tokens, verify them in one target pass, keep the accepted prefix + 1*. Its
# time is `t_draft(K) + t_verify(K)` and it yields on average the **acceptance length** AL tokens, while plain
# decoding yields one token per `t_step`. So the best speed-up a method can reach is
#
# $$\text{ideal speed-up} = \frac{AL \cdot t_\text{step}}{t_\text{draft}(K) + t_\text{verify}(K)}.$$
#
# - **EAGLE-3 (sequential)**: draft token j+1 needs draft token j, so a round is K drafter forward passes,
#   each reading all the drafter's weights (one decoder layer, and an LM head as wide as the vocabulary).
#   `t_draft` grows linearly with K.
# - **P-EAGLE (parallel)**: slots 2..K hold a mask token and the shared `mask_hidden`, so all K drafts come
#   out of **one** forward pass over (new context slots + K-1 mask slots). At batch 1 a forward pass is
#   bound by reading weights and by per-call overhead, not by arithmetic: 9 positions cost about what 2
#   cost. `t_draft` stays nearly flat in K, and the ratio sequential/parallel grows with K, towards K if a pass cost
#   the same at any width (below: how close it gets on this machine).
#
# A flat `t_draft` changes the best K: deep slots are accepted less often, but when they cost almost
# nothing, a long draft still pays. The vLLM blog reports P-EAGLE at its best at K=7, EAGLE-3 at K=3.

# %%
import json
from pathlib import Path

from IPython.display import Image, Markdown, display

from peagle_lab import bench, precision
from peagle_lab.workbook import report
from peagle_lab.hardware import describe
from peagle_lab.prompts import chat_ids, humaneval_prompts

# PEAGLE_DTYPE=auto|float32|bfloat16 (default auto: bf16 on CUDA and on CPUs with native bf16 units)
DTYPE = precision.resolve_dtype(None, DEVICE)
print("dtype:", precision.describe_choice(DTYPE, DEVICE), "| host:", precision.host_slug(DEVICE))
model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=DTYPE)
print(describe(DEVICE))

# %% [markdown]
# ## The heads
#
# The heads for this target (`peagle_lab.drafter.heads.head_for_target`): for the embedded target the shipped ones
# (`data/heads/`), a P-EAGLE head trained for parallel drafting and an EAGLE-3-style head trained for sequential
# drafting, on the same data and budget. For a target they do not fit, the heads trained here for it
# (`$PEAGLE_RESULTS/heads/<target>/`), made on the spot when there are none yet: small and briefly trained, so
# their drafting *cost* is real and their acceptance low.

# %%
from peagle_lab.training import ensure_head

par_head, par_info = ensure_head("parallel", model, tokenizer, TARGET)
seq_head, seq_info = ensure_head("sequential", model, tokenizer, TARGET)
par_head._bench_source, seq_head._bench_source = par_info["source"], seq_info["source"]
for role, info in (("P-EAGLE (parallel)", par_info), ("EAGLE-3 (sequential)", seq_info)):
    print(f"{role:22s} {info['source']}: {info.get('num_hidden_layers')} layer(s), "
          f"trained K={info.get('trained_k')}, draft vocab {info.get('draft_vocab_size')}")

# %% [markdown]
# ## One round, both ways
#
# The same head drafts K=4 tokens after a prompt, once in parallel and once sequentially. We count its forward
# passes and the slots each pass carries. (The drafter first takes the prompt's slots once; here only the
# round itself, with 2 newly committed slots, is counted.)

# %% tags=["nbval-check-output"]
from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.sampling import Sampling
from peagle_lab.decoding.slots import Slots
from peagle_lab.decoding.target_runner import TargetRunner

prompt = chat_ids(tokenizer, humaneval_prompts(1)[0])
runner = TargetRunner(model, par_head.config.aux_hidden_state_layer_ids)
with torch.no_grad():
    logits, taps = runner.forward(prompt)
slots = Slots.after_prefill(prompt, int(logits[-1].argmax()), taps)

def one_round(mode, k=4, new_slots=2):
    drafter = HeadDrafter(par_head, mode)
    drafter.propose(slots, 1, Sampling())  # the drafter takes the prompt once
    passes = []
    hook = par_head.register_forward_hook(lambda mod, args, out: passes.append(args[0].shape[1]))
    try:
        drafts, _ = drafter.propose(slots.tail(new_slots), k, Sampling())
    finally:
        hook.remove()
    return drafts, passes

for mode in ("parallel", "sequential"):
    drafts, passes = one_round(mode)
    print(f"{mode:10s}: {len(passes)} drafter pass(es), slots per pass {passes} "
          f"-> drafts of shape {tuple(drafts.shape)}")

# %% [markdown]
# ## Drafting cost per round
#
# `bench.drafting_cost` times exactly that call (`HeadDrafter.propose`, what the speculative loop calls) for
# each K, parallel and sequential interleaved within every repeat (alternating which goes first), after a
# warm-up; it also times the target verifying K+1 tokens and one plain decode step, for scale. Medians over
# the repeats; the bars are the interquartile range. Timer: CUDA events on a GPU, `perf_counter` on a CPU.

# %%
DRAFT_KS = settings.pick(list(range(1, 11)), [1, 2, 4, 8])
DRAFT_REPEATS = settings.pick(10, 5)

dc = bench.drafting_cost(par_head, runner, bench.BenchConfig(prompts=[prompt], draft_ks=DRAFT_KS,
                                                             draft_repeats=DRAFT_REPEATS))
print("hardware:", dc["env"]["hardware"], "| timer:", dc["env"]["timer"],
      "| load:", dc["env"]["loadavg_start"], "->", dc["env"]["loadavg_end"])
display(Markdown(bench.format_table(dc["rows"], ["k", "parallel_ms", "parallel_iqr_ms", "sequential_ms",
                                                 "sequential_iqr_ms", "ratio_seq_over_par", "verify_ms",
                                                 "verify_ratio"])))
print(f"one target decode step: {dc['target_step_ms']:.1f} ms; verify_ratio = verify(K+1) / one decode step")

# %%
bench.plot_drafting_cost(dc);

# %% [markdown]
# Read the left panel against the dashed grey line: verification grows slowly with K (that is what makes
# speculation work at all), sequential drafting grows by one drafter pass per draft token, parallel drafting
# hardly grows. The right panel is the ratio; its ceiling is K (the dotted line), reached when a pass costs the
# same at any width. What keeps it below K is the extra positions the one parallel pass carries (attention,
# MLP and the wide LM head over K-1 more rows).
#
# ## End to end
#
# Greedy decoding at batch 1 on HumanEval prompts (chat template applied), all methods on the same prompts
# and output length, interleaved per prompt in a rotating order so a slowdown of the machine hits all of
# them. The baseline is our own KV-cached greedy loop (`speculative.plain_generate`), run in the same sweep;
# transformers' `model.generate` greedy is a second reference, and its prompt-lookup decoding a
# model-free speculative baseline. Assisted generation with a small draft LM needs such a model offline:
# there is none for the embedded target, and the results say so.

# %%
N_PROMPTS = settings.pick(3, 2)
MAX_NEW = settings.pick(48, 24)
PAR_KS = settings.pick([1, 2, 4, 7], [1, 2, 4])
SEQ_KS = settings.pick([1, 2, 3, 4], [1, 2])

E2E = bench.BenchConfig(ks_parallel=PAR_KS, ks_sequential=SEQ_KS, n_prompts=N_PROMPTS, max_new_tokens=MAX_NEW,
                        pld_ks=[10], oracle_ks=[], repeats=1)
e2e = bench.end_to_end(model, tokenizer, E2E, parallel_head=par_head, sequential_head=seq_head)
print("hardware:", e2e["env"]["hardware"], "| load:", e2e["env"]["loadavg_start"], "->", e2e["env"]["loadavg_end"])
display(Markdown(bench.format_table(e2e["methods"], [
    "method", "tokens_per_s", "speedup", "speedup_iqr", "acceptance_length", "decode_speedup", "ideal_speedup",
    "efficiency", "lossless_note"])))
for note in e2e["notes"]:
    print("note:", note)

# %% [markdown]
# ## Lossless, in two regimes
#
# Losslessness is the fact that matters most, and what it means depends on the dtype:
#
# - **fp32**: every speculative output equals plain greedy decoding token for token, on every prompt.
# - **bf16**: plain decoding computes one token per pass, verification K+1 tokens per pass, through
#   differently blocked kernels; every layer rounds to 8 significant bits, so the two paths' logits differ by
#   a few units in the last place (ulps). Where the plain run's top-2 logits are that close, the two may pick
#   different tokens. Each divergence is reported with the plain run's top-1 minus top-2 margin there; it
#   counts as a near-tie when the margin is within `BF16_TIE_ULPS` ulps of the top logit (a test shows that
#   an off-by-one acceptance rule diverges far outside it).

# %%
from peagle_lab.decoding.divergence import BF16_TIE_ULPS

print("regime:", e2e["lossless_regime"], f"(near-tie bound: {BF16_TIE_ULPS} bf16 ulps of the top logit)"
      if e2e["lossless_regime"] != "exact" else "(token for token)")
print({fam: all(m["lossless"] for m in e2e["methods"] if m["family"] == fam) for fam in ("p-eagle", "eagle3")})
divs = [(x["method"], x["prompt"], x["divergence"]) for x in e2e["runs"] if x["divergence"]]
for method, p, d in divs:
    print(f"{method:18s} prompt {p}: first differs at token {d['position']}, plain margin {d['margin']:.3f} "
          f"(bound {d['bound']:.3f}) -> {'near-tie' if d['near_tie'] else 'NOT a near-tie'}")
print(f"{len(divs)} divergent outputs of {len(e2e['runs'])}; assisted generation:",
      e2e["assisted_generation"].split(":")[0])

# %% [markdown]
# ### "Speculative decoding changed my greedy output" (question 9)
#
# The committed bf16 run (`data/results/cpu-epyc-avx512bf16-2c/bfloat16`) diverged on HumanEval prompt 1 with
# P-EAGLE at K=3, at a margin of 0. The cell reruns that prompt with the same head, in bf16 and in fp32 (a fresh fp32 copy of the
# target), and at the first differing token prints what the plain run's logits say.

# %% tags=["nbval-ignore-output"]
from peagle_lab.decoding.divergence import first_divergence
from peagle_lab.decoding.speculative import plain_generate, speculative_generate

committed_bf16 = json.loads((settings.data_dir() / "results" / "cpu-epyc-avx512bf16-2c" / "bfloat16"
                             / "end_to_end.json").read_text())
for run in committed_bf16["runs"]:
    if run["method"] == "p-eagle K=3" and run["prompt"] == 1 and run["divergence"]:
        d = run["divergence"]
        print(f"committed run (SmolLM2-135M, cpu-epyc-avx512bf16-2c): first difference at token {d['position']}, plain margin {d['margin']:.3f} "
              f"(bound {d['bound']:.3f}, {'a near-tie' if d['near_tie'] else 'NOT a near-tie'})")
q9_ids = chat_ids(tokenizer, humaneval_prompts(2)[1])
Q9_K, Q9_NEW = 3, settings.pick(64, 24)
fp32_model = model if DTYPE == torch.float32 else models.load_target(TARGET, device=DEVICE, dtype=torch.float32)[0]
if DTYPE == torch.bfloat16:
    bf16_model = model
else:  # this run is fp32: a bf16 copy for the comparison
    import copy

    bf16_model = copy.deepcopy(fp32_model).to(torch.bfloat16)
for dtype, m in ((torch.bfloat16, bf16_model), (torch.float32, fp32_model)):
    head, _ = bench.load_head_or_fresh("parallel", m, mode="parallel")
    r = TargetRunner(m, head.config.aux_hidden_state_layer_ids)
    plain = plain_generate(r, q9_ids, Q9_NEW, eos_ids=tokenizer.eos_token_id)
    spec = speculative_generate(r, HeadDrafter(head), q9_ids, Q9_K, Q9_NEW, eos_ids=tokenizer.eos_token_id)
    div = first_divergence(spec.tokens, plain, dtype, DEVICE)  # fp32 on a GPU: near-tie rule, see divergence.tie_bound
    name = precision.dtype_name(dtype)
    if div is None:
        print(f"{name:8s}: identical to plain greedy, {len(plain.tokens)} tokens; smallest top-2 margin on the way "
              f"{min(plain.margins):.3f}")
        continue
    p = div.position
    print(f"{name:8s}: first difference at token {p} after {tokenizer.decode(plain.tokens[max(0, p - 6):p])!r}: "
          f"plain picks {tokenizer.decode([div.plain])!r}, speculative {tokenizer.decode([div.got])!r}")
    print(f"          plain top-1 logit {plain.top_logits[p]:.3f}, margin to the second {div.margin:.3f}; near-tie bound "
          f"{div.bound:.3f} ({name} on {torch.device(DEVICE).type}, divergence.tie_bound): "
          + ("a near-tie" if div.near_tie else "NOT a near-tie"))

# %% [markdown]
# Where bf16 diverges (the committed run, and the live one when it does: how many tokens it runs and the CPU's
# kernels decide that), the plain run's two best logits were within a few bf16 ulps of each other: bf16 keeps 8
# significant bits, so near a logit of 16-32 one ulp is 0.125, and a margin of 0 is an exact tie in bf16.
# Verification computes the same logits over K+1 positions in one pass, through differently blocked matrix
# products, and rounds them differently; at such a margin either token is the greedy choice of a slightly
# different computation. From there the two texts go their own ways, each still a greedy decoding of the
# target. In fp32 the rounding is 2^16 times finer and the outputs agree token for token (the invariant the
# test suite checks on every K and both drafting modes);
# where a bit-exact output matters in bf16, verify in fp32 or decode plain.

# %%
bench.plot_speedup(e2e);
bench.plot_acceptance(e2e);

# %% [markdown]
# Solid lines are measured end to end (`speedup`, prefill included: what a user sees); dashed lines are the
# ideal speed-up from the measured acceptance length and the measured median costs of a round. The ideal
# models the decoding phase, so it is compared with `decode_speedup` (the same ratio with the prefill time
# taken out): **efficiency** = decode_speedup / ideal, what the acceptance step, the cache rollback and the
# Python loop take away. `speedup_iqr` is the spread of the per-prompt speed-ups. Per-position acceptance is
# the conditional rate P(slot j accepted | slots before j accepted). A slot shown as `-` (`nan` in the raw
# statistics, `None` in the JSON) was never reached: in every round some earlier slot was rejected first, so
# the rate has no rounds to count (0 of 0), which is not the same as a rate of 0:

# %%
for m in e2e["methods"]:
    if m["family"] in ("p-eagle", "eagle3"):
        rates = " ".join("  - " if r is None else f"{r:.2f}" for r in m["per_position_acceptance"])
        print(f"{m['method']:14s} AL {m['acceptance_length']:.2f}   per position: {rates}")

# %% tags=["nbval-ignore-output"]
heads = [m for m in e2e["methods"] if m["family"] in ("p-eagle", "eagle3")]
best_head = max(heads, key=lambda m: m["speedup"])
pld = next((m for m in e2e["methods"] if m["family"] == "prompt-lookup"), None)
eff = [m["efficiency"] for m in heads if m.get("efficiency")]
pld_text = (f" Prompt lookup, which needs no training, reaches {pld['acceptance_length']:.2f} tokens per target "
            f"forward and {pld['speedup']:.2f}x: it copies spans of the prompt, and HumanEval answers repeat the "
            "prompt's signature and names." if pld else "")
hf = next((m for m in e2e["methods"] if m["method"] == "hf-greedy"), None)
hf_text = (f" transformers' own `generate` (greedy, `hf-greedy`) runs at {hf['speedup']:.2f}x our plain loop "
           "on the same prompts: the check that the baseline every ratio divides by is not a slow one "
           "(a ratio far from 1 on a few short prompts is timing noise)." if hf else "")
display(Markdown(
    f"**Reading it.** The best head here is {best_head['method']}: acceptance length "
    f"{best_head['acceptance_length']:.2f}, {best_head['speedup']:.2f}x plain decoding end to end.{pld_text} "
    f"The heads' efficiency (measured / ideal) is {min(eff):.2f}-{max(eff):.2f}: the loop delivers what the "
    "measured costs allow, so what limits the speed-up is the acceptance length per unit of round cost, "
    "not the implementation. Deeper K helps P-EAGLE only as far as the deep slots are accepted (per-position "
    f"rates above); it costs EAGLE-3 one more drafter pass per slot.{hf_text}"))

# %% [markdown]
# ## Where a round's time goes
#
# The loop's own timer splits each round into drafting, verification (one target pass over K+1 tokens),
# acceptance + KV-cache rollback, and the rest (Python: list handling, stopping checks, statistics).

# %%
display(Markdown(bench.format_table(e2e["round_profile"], [
    "method", "draft_ms", "verify_ms", "accept_rollback_ms", "python_overhead_ms", "round_ms", "draft_share",
    "verify_share"])))
bench.plot_round_profile(e2e);

# %% [markdown]
# ## Save the run
#
# JSON (with the environment record), CSV and the PNG plots go to `$PEAGLE_RESULTS/bench/nb05/`
# (default `./results`).

# %%
out_dir = settings.results_dir() / "bench" / "nb05"
files = bench.write_results({"drafting_cost": dc, "end_to_end": e2e}, out_dir)
print(settings.display_path(out_dir), sorted(p.name for p in files.values()))
h = bench.headline({"drafting_cost": dc, "end_to_end": e2e})
report.record("drafting_ratio_seq_over_par", h["drafting_ratio_seq_over_par"])
report.record("best", h["best"])
report.record("all_lossless", h["all_lossless"])
report.record("hardware", dc["env"]["hardware"]);

# %% [markdown]
# ## Committed results, every host
#
# `data/results/<host>/<dtype>/` holds full runs of the same code (more prompts, longer outputs, wider K sweeps),
# one folder per host and dtype, each with the command in its README and the environment record (CPU model, ISA
# flags, threads, dtype, versions, load, commit) in every JSON. A run never overwrites another host's folder.
# The run above is a small live replica on the machine at hand.

# %%
from peagle_lab.settings import data_dir

from peagle_lab.workbook.notebook import committed_label

committed = bench.committed_results(data_dir() / "results")
print(committed_label("The table below"))
display(Markdown(bench.format_table(bench.hosts_table(committed), [
    "host", "dtype", "cpu", "threads", "load", "verify_ratio_k7", "best_p_eagle", "best_eagle3", "prompt_lookup",
    "lossless"])))

# %% [markdown]
# ## What it takes: the break-even picture
#
# A round costs `t_verify(K) + t_draft(K)`, that is `verify_ratio + draft_ratio` decode steps, and yields AL
# tokens; plain decoding yields one token per step. So the decode speed-up is `AL / (verify_ratio +
# draft_ratio)`, a straight line through the origin for each host and dtype, crossing 1 at AL = the round
# cost. The lines below use the K=7 costs measured live and in the committed runs, plus a GPU-like round of
# about 1.05 steps (a large target, memory-bound at batch 1). The points are the heads' measured AL and
# decode speed-up at K=7.

# %%
curves, points = bench.break_even_inputs({"drafting_cost": dc, "end_to_end": e2e}, k=7,
                                         label=f"this machine, {precision.dtype_name(DTYPE)}")
for c in committed:
    if not c["results"].get("end_to_end"):
        continue  # drafting-cost-only runs (thread comparisons) are in the table above
    cv, pt = bench.break_even_inputs(c["results"], k=7, label=c["dir"])
    curves += cv
    points += [p | {"label": f"{c['host']}: {p['label']}"} for p in pt if p["label"].startswith("p-eagle")]
curves.append({"label": "GPU-like", "verify_ratio": 1.05, "draft_ratio": 0.05})
bench.plot_break_even(curves, points, k=7);
for c in curves:
    cost = c["verify_ratio"] + c["draft_ratio"]
    print(f"{c['label']:38s} round = {cost:.2f} steps: break-even AL {cost:.2f}; "
          f"1.5x needs AL {1.5 * cost:.2f}, 2x needs AL {2 * cost:.2f}")

# %%
live = [m for m in e2e["methods"] if m["family"] in ("p-eagle", "eagle3") and m.get("decode_speedup")]
best = max(live, key=lambda m: m["decode_speedup"])
here = next((c for c in curves if c["label"].startswith("this machine")), None)  # None: K=7 not timed live
cost7 = here["verify_ratio"] + here["draft_ratio"] if here else float("nan")
cost_text = (f"a K=7 round costs {cost7:.2f} decode steps, so a head pays only above AL {cost7:.2f}" if here else
             "this run did not time K=7 (see the committed lines for its cost)")
display(Markdown(
    f"**Reading it.** On this machine ({precision.dtype_name(DTYPE)}), {cost_text}. "
    f"The best head run here, {best['method']}, accepts "
    f"{best['acceptance_length']:.2f} tokens per round for a decode speed-up of {best['decode_speedup']:.2f}x. "
    "The lines say what each lever buys: a cheaper verification (bf16 on a CPU with bf16 units, a GPU) "
    "flattens the cost, a better head moves the point right. On a GPU-like cost of about 1.1 steps, "
    "the same AL would give "
    f"{best['acceptance_length'] / 1.1:.2f}x; reaching 2x there needs AL 2.2, which is what a head trained "
    "at scale (notebook 03) has to deliver."))

# %% [markdown]
# ## The same from a shell
#
# ```bash
# peagle-lab bench --quick                       # CI sizes, results/bench/<name>/
# peagle-lab bench --dtype bfloat16 --out data/results/$(python -c "from peagle_lab.precision import host_slug; print(host_slug())")/bfloat16
# peagle-lab bench --parallel-head DIR --sequential-head DIR --ks-parallel 1-10 -n 16 --max-new-tokens 256
# ```
#
# On a GPU the same code times with CUDA events. Take the numbers with their hardware line: on a CPU shared
# with other jobs, timings can move by several times; the ratios measured within one interleaved run are
# the robust part.
