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
# # 10 · Your own model: the recipe on a new target, and past one machine
#
# **Goal:** take the recipe that trained SmolLM2's heads to a model of your own, and to several processes.
#
# You will see what serving a head in the wrong chat template costs, and write the rule that picks its **taps**: the
# hidden states of three target layers, which the head reads (01). Then you will run the whole recipe on a tiny
# Qwen3, in one process and in two, and read what serving many requests at once, or one target over several
# processes, does to speculation. Nothing here needs a GPU.

# %% tags=["nbval-ignore-output"]
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
from peagle_lab.workbook.notebook import start

TARGET, DEVICE, CI = start(seed=0)

from peagle_lab import models, precision, settings
from peagle_lab.drafter import PEagleConfig

model, tokenizer = models.load_target(TARGET, device=DEVICE, dtype=precision.course_dtype(DEVICE))
print(f"this run's target: {type(model).__name__}, {model.config.num_hidden_layers} layers; the chat template below "
      "is its tokenizer's")

# %% [markdown]
# ## 1 · Your own model and its chat template (question 1)
#
# Nothing in the recipe is specific to SmolLM2: the taps, the head's shape and the chat template come from the target.
# The next cells use a tiny Qwen3 with random weights (`peagle-lab make-tiny-target`).


# %% tags=["nbval-check-output"]
from peagle_lab.settings import results_dir
from peagle_lab.tiny_target import make_tiny_target

tiny_dir = make_tiny_target(results_dir() / "nb10" / "tiny-qwen3")  # kept when already built
tiny, tiny_tok = models.load_target(str(tiny_dir), device=DEVICE, dtype=precision.course_dtype(DEVICE))
tc = tiny.config
print(f"{type(tiny).__name__}: {tc.num_hidden_layers} layers, hidden {tc.hidden_size}, {tc.num_attention_heads} "
      f"query / {tc.num_key_value_heads} KV heads, head dim {tc.head_dim}, vocabulary {tc.vocab_size:,}, tied "
      f"embeddings {tc.tie_word_embeddings}")

# %% tags=["smollm2-fact", "nbval-check-output"]
from peagle_lab.prompts import chat_ids

QUESTION = "Write a function that reverses a list."
for name, tok in (("tiny Qwen3", tiny_tok), ("this run's target", tokenizer)):
    ids = chat_ids(tok, QUESTION)
    print(f"--- {name}: {len(ids)} prompt tokens ---\n{tok.decode(ids)}")

# %% [markdown]
# Each tokenizer brings its own template: SmolLM2's adds a default system message.
#
# ### A template mismatch
#
# A head learns what the target says after the prompt layout it was trained on. The next cell serves SmolLM2's
# P-EAGLE head on held-out prompts in three layouts: as trained, bare text, and another system message.

# %% tags=["nbval-ignore-output"]
from peagle_lab.prompts import OTHER_SYSTEM, load_scale_records
from peagle_lab.training import EvalSettings, ensure_head, evaluate_head

head, head_info = ensure_head("parallel", model, tokenizer, TARGET)  # the shipped P-EAGLE head (made if missing)
tmpl_prompts = [r["prompt"] for r in load_scale_records("val") if not r.get("history")][: settings.pick(2, 1)]
TK, TMPL_NEW = 4, settings.pick(40, 16)
tmpl = {t: evaluate_head(model, tokenizer, head, tmpl_prompts,
                         EvalSettings(ks=(TK,), max_new_tokens=TMPL_NEW, template=t), progress=False)
        for t in ("chat", "plain", "system")}
layout = {"chat": "chat template (as trained)", "plain": "no template (bare text)",
          "system": f"chat template, system message {OTHER_SYSTEM[:24]!r}..."}
print(f"{len(tmpl_prompts)} held-out prompt(s), at most {TMPL_NEW} new tokens each, K={TK}")
for t, ev in tmpl.items():
    al, rounds = ev["acceptance_length"][TK], ev["rounds"][TK]
    print(f"{layout[t]:58s} AL {al:.2f} over {rounds} rounds ({round((al - 1) * rounds)} drafts accepted), "
          f"answers {ev['new_tokens']} tokens")
base_al = tmpl["chat"]["acceptance_length"][TK]
print("against the trained layout: " + ", ".join(f"{name} {tmpl[t]['acceptance_length'][TK] - base_al:+.2f}"
                                                 for t, name in (("plain", "no template"),
                                                                 ("system", "another system message"))))
print("every output identical to plain greedy in its layout:", all(ev["lossless"] for ev in tmpl.values()))

# %% [markdown]
# **Reading it.** On these two prompts the head drafted best in its trained layout. On bare text it accepted no
# draft: an acceptance length (AL, tokens committed per round) of 1.00, against 1.52 as trained. But the target's own
# answers changed with the layout (44 tokens on bare text against 80), so the ALs are measured on different text: the
# layout and the text move together here. Another system message gave 1.34, a drop two prompts cannot establish.
#
# Two prompts cannot establish the rule, but the safe practice follows from how a head learns: distil with the
# template you will serve with, your model's own (`peagle-lab distill --target DIR` applies it).
#
# ### Exercise: which layers are tapped?
#
# vLLM's EAGLE-3 taps the residual stream entering layers `2`, `L // 2` and `L - 3` of an L-layer target. Write that
# rule as `my_taps`; the cell lists the layer counts (1 to 64) where yours differs from the package's. Why there,
# and what does the package do instead? The next cell answers.

# %% tags=["nbval-check-output"]
import copy

from peagle_lab.drafter.config import default_tap_layers
from peagle_lab.training import pick_mask_token_id


def my_taps(n_layers):
    """The three layers an EAGLE-3 head taps in a target of ``n_layers`` layers."""
    raise NotImplementedError("write me: vLLM's rule, about two lines")


def check_taps(my_taps):
    """The exercise's check, run on any `my_taps`."""
    wrong = [n for n in range(1, 65) if tuple(my_taps(n)) != tuple(default_tap_layers(n))]
    print(f"your taps and the package's agree at {64 - len(wrong)} of 64 depths" + (
        f"; they differ at {wrong}, e.g. at {wrong[-1]} layers yours are {tuple(my_taps(wrong[-1]))}, the package's "
        f"{default_tap_layers(wrong[-1])}" if wrong else ""))


try:
    check_taps(my_taps)
except NotImplementedError as exc:
    print(f"my_taps is not written yet ({exc}); the answer is the next cell")

for n_layers in (30, tc.num_hidden_layers):  # SmolLM2's depth, the tiny target's
    print(f"{n_layers} layers -> taps {default_tap_layers(n_layers)}")
TINY_MASK = pick_mask_token_id(tiny_tok)
tiny_cfg = PEagleConfig.from_target(copy.deepcopy(tc), mask_token_id=TINY_MASK, num_speculative_tokens=4)
print(f"head for the tiny target: hidden {tiny_cfg.hidden_size}, {tiny_cfg.num_attention_heads} / "
      f"{tiny_cfg.num_key_value_heads} heads, head dim {tiny_cfg.head_dim}, vocabulary {tiny_cfg.vocab_size:,}, "
      f"taps {tiny_cfg.aux_hidden_state_layer_ids}, mask token {TINY_MASK} = "
      f"{tiny_tok.convert_ids_to_tokens(TINY_MASK)!r}")

# %% tags=["nbval-check-output"]
# The answer. Below 7 layers the rule stops giving three increasing layers (4 layers: 2, 2, 1), so a shallow target is
# tapped at the inputs of its first, middle and last layer instead (4 layers: 0, 2, 3).
def my_taps(n_layers):
    taps = (2, n_layers // 2, n_layers - 3)
    return taps if taps[0] < taps[1] < taps[2] else (0, n_layers // 2, max(n_layers - 1, 0))


check_taps(my_taps)

# %% [markdown]
# Below 7 layers the package falls back to `(0, L // 2, L - 1)`; vLLM's rule has no fallback. The tiny target's 8
# layers get vLLM's taps.
#
# Next, the whole recipe on the tiny target: distil (the target writes the training answers), extract the taps, train,
# decode speculatively. Whatever the head drafts, the output must match plain greedy.

# %% tags=["nbval-ignore-output"]
from peagle_lab.decoding.divergence import first_divergence, is_lossless, lossless_regime
from peagle_lab.decoding.draft_sources import HeadDrafter, PromptLookupDrafter
from peagle_lab.decoding.speculative import plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.distill.data import DistillSettings, distill
from peagle_lab.prompts import load_train_prompts
from peagle_lab.training import TrainConfig, Trainer, TrainerOptions, prepare_sequences

TINY_DATA = results_dir() / "nb10" / "tiny.jsonl"  # the tiny target's answers (distil resumes a file it wrote)
tiny_records = distill(tiny, tiny_tok, load_train_prompts(settings.pick(8, 4)), TINY_DATA,
                       DistillSettings(max_new_tokens=24, target=str(tiny_dir)), progress=False)
tiny_seqs = prepare_sequences(tiny, tiny_records, progress=False)
tiny_train = TrainConfig(mode="parallel", num_depths=4, layers=1, draft_vocab_size=1024, steps=settings.pick(12, 4),
                         warmup_steps=1, lr=2e-3, batch_tokens=256, row_tokens=256, mask_token_id=TINY_MASK, seed=0,
                         target=str(tiny_dir))
tiny_res = Trainer(tiny_train, tiny, tiny_seqs, tiny_tok, TrainerOptions(progress=False, verbose=False)).train()
print(f"{len(tiny_seqs)} sequences, taps {tuple(tiny_seqs[0]['taps'].shape[1:])} per token; "
      f"{tiny_res.steps_done} steps, loss {tiny_res.log[0]['loss']:.2f} -> {tiny_res.log[-1]['loss']:.2f}")

tiny_head = tiny_res.head.eval()
same_taps = list(tiny_head.config.aux_hidden_state_layer_ids) == list(default_tap_layers(tc.num_hidden_layers))
print("the trained head's taps are the ones from_target chose:", same_taps)
runner = TargetRunner(tiny, tiny_head.config.aux_hidden_state_layer_ids)
ids = chat_ids(tiny_tok, QUESTION)
plain = plain_generate(runner, list(ids), 24, eos_ids=None)
spec = speculative_generate(runner, HeadDrafter(tiny_head, "parallel"), list(ids), 4, 24, eos_ids=None)
div = first_divergence(spec.tokens, plain, tiny.dtype, DEVICE)
lossless = is_lossless([div.as_dict()] if div else [], lossless_regime(tiny.dtype, DEVICE))
print(f"the trained head, K=4: AL {spec.stats.acceptance_length:.2f} over {spec.stats.rounds} rounds; lossless "
      f"against plain greedy: {lossless}")
# a drafter whose drafts this target does accept: prompt lookup copies its repetitive answer, through the same loop
lookup = speculative_generate(runner, PromptLookupDrafter(tiny.config.vocab_size), list(ids), 4, 24, eos_ids=None)
lookup_div = first_divergence(lookup.tokens, plain, tiny.dtype, DEVICE)
lookup_lossless = is_lossless([lookup_div.as_dict()] if lookup_div else [], lossless_regime(tiny.dtype, DEVICE))
print(f"prompt lookup, K=4: AL {lookup.stats.acceptance_length:.2f} over {lookup.stats.rounds} rounds, "
      f"{sum(lookup.stats.accepted)} drafts accepted; lossless against plain greedy: {lookup_lossless}")
assert same_taps and lossless and lookup_lossless

# %% [markdown]
# **Reading it.** The recipe ran unchanged on a second architecture: 8 distilled answers, 12 steps taking the loss from
# 7.36 to 1.89, the taps `from_target` chose, and an output equal to plain greedy.
#
# The head got no draft accepted (AL 1.00 over 23 rounds), so the run checks only rejection and rollback. Prompt
# lookup (00) got 11 drafts accepted on the same target (AL 1.92), also losslessly. Why the head drafts nothing is
# not measured: 12 steps on a random-weight target are a smoke test, far from the recipe of the shipped heads.
#
# ## 2 · Training in several processes
#
# The trainer also runs in several processes (DDP, distributed data parallel, through accelerate). `--batch-tokens`
# is the global batch: each process takes its share of every step's rows, and DDP averages the gradients. So any
# number of processes should follow one process's loss curve. The next cell checks this on this CPU: one process,
# then two (`torchrun` with the gloo CPU backend), on the same data and saved taps (`--features`).


# %% tags=["nbval-ignore-output"]
import os
import subprocess
import sys
from pathlib import Path

from peagle_lab.training.state import read_log

work = results_dir() / "nb10" / "two-processes"  # this chapter's own folder: each run replaces its head there
torchrun = Path(sys.executable).parent / "torchrun"
launchers = {"one process": [sys.executable, "-m", "peagle_lab.cli"],
             "two processes": [str(torchrun), "--standalone", "--nproc_per_node", "2", "-m", "peagle_lab.cli"]}
train = ["train", "--data", str(TINY_DATA), "--target", str(tiny_dir), "--features", str(work / "features"),
         "--device", "cpu", "--mode", "parallel", "-K", "4", "--layers", "1", "--draft-vocab-size", "1024",
         "--steps", str(settings.pick(4, 2)), "--lr", "2e-3", "--warmup-steps", "1", "--batch-tokens", "512",
         "--row-tokens", "256", "--mask-token-id", str(TINY_MASK), "--seed", "0", "--autocast", "float32",
         "--eval-prompts", "0", "--eval-val-prompts", "0", "--overwrite"]
losses = {}
for name, launch in launchers.items():
    out = work / name.replace(" ", "-")
    done = subprocess.run(launch + train + ["--out", str(out)], env=dict(os.environ, OMP_NUM_THREADS="1"),
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    losses[name] = [row["loss"] for row in read_log(out / "checkpoint" / "train_log.jsonl")]
    print(f"{name:13s}: loss at steps 1..{len(losses[name])}: " + "  ".join(f"{x:.4f}" for x in losses[name]))
gap = max(abs(a - b) / a for a, b in zip(*losses.values()))
print(f"largest relative gap between the two runs' losses: {gap:.1e}")
assert gap < 1e-3, "two processes left one process's loss curve"

# %% [markdown]
# **Reading it.** Two processes train as one: both log the same loss at every step, 7.3126 down to 3.5733, to the
# log's 4 decimals. A GPU run uses the same command line (not run here), for example a 7-8B target on 8 GPUs:
#
# ```bash
# peagle-lab extract --distilled DATA --split train --out FEATURES/part-train --max-seq-len 2048   # once
# torchrun --nproc_per_node 8 -m peagle_lab.cli train --data DATA --features FEATURES --out HEAD \
#     --mode parallel -K 8 --layers 1 --draft-vocab-size 32768 --autocast bfloat16 --max-seq-len 2048 \
#     --row-tokens 4096 --batch-tokens 65536 --lr 5e-4 --warmup-steps 200 --time-budget 36000 --steps 1000000
# accelerate launch --multi_gpu --num_processes 8 -m peagle_lab.cli train ...    # the same, through accelerate
# ```
#
# Without `--features`, one process computes the taps online and keeps them in memory. Several processes each extract
# their share once into bf16 shards: 24 KiB per token for an 8B target (01).
#
# ## 3 · Serving past one request: load and tensor parallelism (question 8)
#
# 08 served the head live at 0.61x with 4 prompts batched. Speculation pays when verifying K+1 tokens costs about one
# decode step: when compute sits idle. Three committed runs, each labelled with its host, show what load and sharding
# do to that:
#
# - **Serving sweep** (`peagle-lab serve-sweep`): plain and P-EAGLE servers at 1, 4 and 16 concurrent requests,
#   2 repeats. `throughput` is P-EAGLE's tok/s over plain's, `each repeat` its range. `speculation` pays if every
#   repeat is above 1, costs if every one is below. `latency` is plain's median over P-EAGLE's. `round (plain steps)`
#   is AL / throughput.
# - **GPU cost model** (`gpu-h200`, batch 1, 8B-parameter shapes, random weights): `verify K+1 / step` is
#   verification's cost in decode steps; `draft share`, drafting's share of a round.
# - **Tensor parallelism** splits each layer over processes or GPUs, called ranks. Their count must divide the
#   attention heads; the cell's check of that rule finds that 2 ranks cannot split this target's 9 (vLLM itself was
#   not run with 2). We shard it by hand over 2 CPU processes instead,
#   vLLM-style: each rank keeps whole query-head groups with their KV head, and a share of the MLP. Two all-reduces
#   per layer sum the ranks' parts.

# %% tags=["nbval-ignore-output"]
import json

import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from peagle_lab.bench import format_table
from peagle_lab.serving import sweep as serve_sweep
from peagle_lab.settings import data_dir
from peagle_lab.workbook import ledger
from peagle_lab.workbook.notebook import committed_label

RESULTS = data_dir() / "results"
print(committed_label("The serving sweeps below"))
for path in sorted(RESULTS.glob(f"*/serving/{serve_sweep.RESULTS_JSON}")):
    doc = json.loads(path.read_text())
    meta, env = doc["meta"], doc["meta"]["environment"]
    print(f"{meta['host']}: vLLM in {ledger.serving_dtype(meta)}, head {meta['head']}, K={meta['k']}, "
          f"{meta['max_tokens']} tokens per request, {meta['repeats']} repeats, load average at the start "
          f"{env.get('loadavg_start')}")
    tok_s = {(q["config"], q["concurrency"], q["repeat"]): q["tokens_per_s"] for q in doc["rows"]}
    table = []
    for row in doc["speedups"]:  # one per concurrency, the repeats pooled
        c, al_c = row["concurrency"], row["acceptance_length"]
        plain_tps, peagle_tps = row["plain_tokens_per_s"], row["peagle_tokens_per_s"]
        each = [tok_s["peagle", c, i] / tok_s["plain", c, i] for i in range(meta["repeats"])]  # P-EAGLE / plain
        verdict = "pays" if min(each) > 1 else "costs" if max(each) < 1 else "breaks even (1 lies within the repeats)"
        table.append({"concurrent": c, "plain tok/s": plain_tps, "P-EAGLE tok/s": peagle_tps,
                      "throughput": peagle_tps / plain_tps, "each repeat": f"{min(each):.2f}x-{max(each):.2f}x",
                      "speculation": verdict, "latency": row["latency_speedup"], "AL": al_c,
                      "round (plain steps)": al_c * plain_tps / peagle_tps})  # AL / throughput
    display(Markdown(format_table(table, list(table[0]), floatfmt=".2f")))
    serve_sweep.plot_sweep(doc)
    plt.show()

# %% tags=["nbval-ignore-output"]
# the GPU at batch 1: verifying K+1 tokens in decode steps, and drafting's share of a round (draft / (draft + verify))
gpu = json.loads((RESULTS / "gpu-h200" / "gpu-check" / "timing.json").read_text())["result"]
print(f"GPU (eager, random weights), batch 1, {gpu['target_params'] / 1e9:.1f}B-parameter shapes, {gpu['dtype']}: "
      f"one decode step {gpu['decode_step_ms']:.1f} ms\n{'K':>3s}{'verify K+1 / step':>19s}{'parallel draft ms':>19s}"
      f"{'K sequential ms':>17s}{'draft share P-EAGLE':>21s}{'EAGLE-3':>9s}")
for r in gpu["rows"]:
    par, seq = (ms / (ms + r["verify_ms"]) for ms in (r["parallel_ms"], r["sequential_ms"]))
    print(f"{r['k']:>3d}{r['verify_ms'] / gpu['decode_step_ms']:>19.3f}{r['parallel_ms']:>19.2f}"
          f"{r['sequential_ms']:>17.2f}{par:>21.0%}{seq:>9.0%}")
# tensor parallelism: vLLM shards attention by heads, so its size must divide the target's attention heads
n_heads = model.config.num_attention_heads
tp_sizes = [n for n in range(2, n_heads + 1) if n_heads % n == 0]
print(f"\ntensor parallelism: {n_heads} attention heads -> sizes vLLM accepts {tp_sizes or 'none above 1'}; one rank "
      f"per core on these {os.cpu_count()} cores: {[n for n in tp_sizes if n <= os.cpu_count()] or 'none fits'}")
# the target sharded by hand over processes (peagle-lab bench-tensor-parallel), the drafter copied on each rank
for path in sorted(RESULTS.glob("*/tensor-parallel/tensor_parallel.json")):
    tp = json.loads(path.read_text())
    env, one, two, n_reduce = tp["env"], tp["rows"][0], tp["rows"][-1], tp["all_reduces_per_pass"]
    print(f"\n{env['host']}: the target over {env['ranks']} processes ({env['backend']}, {env['dtype']}, batch 1, "
          f"K={tp['config']['k']}, medians of {tp['config']['repeats']} repeats)")
    for r in (one, two):
        par, seq = (ms / (ms + r["verify_ms"]) for ms in (r["parallel_draft_ms"], r["sequential_draft_ms"]))
        print(f"  TP={r['tp']}: decode {r['decode_ms']:.1f} ms, verify {r['verify_ms']:.1f} ms; draft share P-EAGLE "
              f"{par:.1%}, EAGLE-3 {seq:.1%}")
    print(f"verification {one['verify_ms']:.1f} / {two['verify_ms']:.1f} = {one['verify_ms'] / two['verify_ms']:.2f}x "
          f"as fast; a pass's all-reduces {n_reduce} x {tp['all_reduce_ms']:.3f} = "
          f"{n_reduce * tp['all_reduce_ms']:.1f} ms")

# %% [markdown]
# **Reading it.** Load turns break-even into a loss: 1.00x at 1 concurrent request, 0.28x at 16. Acceptance length
# holds while a round grows to 4.78 plain steps. Batching likely fills the idle compute verification needed;
# utilisation is not measured here.
#
# **GPU:** verifying K+1 tokens costs only 1.146 to 1.181 decode steps for K = 1 to 8. At K=8, drafting is 6% of a
# P-EAGLE round against 31% for EAGLE-3: a cost model, not a measured speed-up.
#
# **Tensor parallelism** (`cpu-epyc-avx2-2c`): 2 processes slowed a decode step most, 51.1 to 152.9 ms, and
# verification less, 100.3 to 181.9 ms: 0.55x as fast. By an estimate (the all-reduces a step makes times their
# measured cost each), the all-reduces account for about 33.5 ms of the decode slowdown; the
# rest is not taken apart here. With verification slower, P-EAGLE's draft share fell, 6.4% to 4.1%. On GPUs, where
# sharding speeds the target up, that share should grow: argued, not measured.
#
# <details><summary>How sure is this?</summary>
#
# - At 1 request a vLLM round costs about 1.29 plain steps; the repeats' spread, 0.87x to 1.14x, makes that rough.
# - Our transformers loop pays about two steps in float32 just to verify 6 or 9 tokens (00's timing cell): compare
#   round costs within one engine only.
# - Beyond the all-reduces, two processes on two cores also share caches and the per-layer Python work.
#
# </details>
#
# ## What we saw
#
# **In one sentence:** The recipe takes its chat template and tap layers from the target, so the same code runs on a
# second architecture and in several processes; serving many requests at once takes away the idle compute
# speculation needs.
#
# - A chat template is the target's own: SmolLM2's adds a default system message, the tiny Qwen3's none. On bare
#   text, SmolLM2's head accepted no draft on either prompt.
# - The taps follow vLLM's rule, `2`, `L // 2`, `L - 3`, with the package's fallback below 7 layers.
# - The whole recipe ran on a second architecture, decoding losslessly against plain greedy.
# - Two processes logged the same loss as one at every step of the tiny target's head.
# - Under load (committed sweep), vLLM's break-even became a loss: 1.00x at 1 request, 0.28x at 16.
# - Over 2 CPU processes (committed run), verification ran 0.55x as fast and the drafter's share fell.
#
# For your model on a GPU (not run in this course): `PEAGLE_TARGET=<HF id or directory> bash scripts/gpu_heads.sh`
# trains and installs both heads (`docs/training.md`).
#
# Next, `11_results`: every result of the course side by side; then the repository's `README.md` and `docs/`.

# %% jupyter={"source_hidden": true} tags=["nbval-ignore-output"]
# Records, after the lesson: the template rows of 11's ledger.
from peagle_lab.workbook import ledger

book = ledger.Logbook("10", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(model.dtype))
head_name = str(head_info["source"]).rstrip("/").split("/")[-1]
for t, ev in tmpl.items():
    book.add(f"template: {layout[t][:40]}", head_name, prompt_set="held-out split of the prompt mix",
             prompts=len(tmpl_prompts), new_tokens=TMPL_NEW, k=TK, rounds=ev["rounds"][TK],
             acceptance_length=ev["acceptance_length"][TK])
