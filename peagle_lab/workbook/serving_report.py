"""06's section 7 in print: the serving sweeps' dtype and verdicts, a sweep's single request against our loop, the GPU's
cost of a round at batch 1, the tensor-parallel sizes vLLM accepts, and the target sharded by hand over processes."""

from __future__ import annotations

import json
from pathlib import Path

from ..serving import engine_kwargs


def _recorded_dtype(meta: dict) -> str | None:
    """The engine dtype a sweep's file records, or None."""
    return (meta.get("engine") or {}).get("dtype")


def sweep_dtype(meta: dict) -> str:
    """vLLM's dtype in a sweep: the engine settings it records, else serve-sweep's own (GPU default, or the CPU's)."""
    on_gpu_host = meta.get("environment", {}).get("device") == "cuda"
    return _recorded_dtype(meta) or ("vLLM's GPU default" if on_gpu_host else engine_kwargs(on_gpu=False)["dtype"])


def dtype_label(meta: dict) -> str:
    """:func:`sweep_dtype`, said to be inferred where the file does not record the engine's dtype."""
    return _recorded_dtype(meta) or f"{sweep_dtype(meta)} (not in the file: serve-sweep's setting for this device)"


def repeat_verdict(lo: float, hi: float) -> str:
    """What speculation does at one concurrency, from the lowest and highest speed-up over the repeats."""
    return "pays" if lo > 1 else "costs" if hi < 1 else "breaks even (1 lies within the repeats)"


def print_single_request(doc: dict, results_dir: Path) -> None:
    """Prints the sweep's single request against our own loop's committed bench on the same host and dtype (nothing
    where the sweep has no 1-concurrent point or there is no such bench)."""
    meta = doc["meta"]
    host, dtype = meta.get("host"), sweep_dtype(meta)
    single = min(doc["speedups"], key=lambda r: r["concurrency"])
    bench_path = Path(results_dir) / str(host) / str(dtype) / "end_to_end.json"
    if single["concurrency"] != 1 or not bench_path.exists():
        return
    own = {m["method"]: m for m in json.loads(bench_path.read_text())["methods"]}.get(f"p-eagle K={meta.get('k')}")
    if not own:
        return
    loop_round = own["t_draft_round_ms"] + own["t_verify_round_ms"]
    vllm_step = 1e3 / single["plain_tokens_per_s"]  # ms per token, and per round of AL tokens
    vllm_round = 1e3 * single["acceptance_length"] / single["peagle_tokens_per_s"]
    print(f"  1 concurrent, {host}, {dtype}: vLLM {vllm_step:.0f} ms per plain token, "
          f"{vllm_round:.0f} ms per round (HTTP and prefill included) = {vllm_round / vllm_step:.2f} "
          "plain steps")
    print(f"  our loop, same host and dtype (committed bench, batch 1, K={own['k']}): plain step "
          f"{own['t_step_ms']:.0f} ms, round {loop_round:.0f} ms = {loop_round / own['t_step_ms']:.2f} "
          f"steps; vLLM's round is {'shorter' if vllm_round < own['t_step_ms'] else 'longer'} than our "
          f"loop's plain step")


def print_gpu_costs(gpu: dict) -> None:
    """Prints the GPU's batch-1 cost table: verifying K+1 tokens in decode steps, drafting times, the draft's share."""
    print(f"\nGPU (eager, random weights), batch 1, {gpu['target_params'] / 1e9:.1f}B-parameter shapes, "
          f"{gpu['dtype']}: one decode step {gpu['decode_step_ms']:.1f} ms")
    print(f"{'K':>3s}{'verify K+1 / step':>19s}{'parallel draft ms':>19s}{'K sequential ms':>17s}"
          f"{'draft share P-EAGLE':>21s}{'EAGLE-3':>9s}")
    for r in gpu["rows"]:
        par = r["parallel_ms"] / (r["parallel_ms"] + r["verify_ms"])
        seq = r["sequential_ms"] / (r["sequential_ms"] + r["verify_ms"])
        print(f"{r['k']:>3d}{r['verify_ratio']:>19.3f}{r['parallel_ms']:>19.2f}{r['sequential_ms']:>17.2f}"
              f"{par:>21.0%}{seq:>9.0%}")


def print_tp_sizes(n_heads: int, tp_sizes: list, cpu_count: int | None) -> None:
    """Prints the tensor-parallel sizes vLLM accepts and those that fit one rank per core on ``cpu_count`` cores."""
    tp_fits = [n for n in tp_sizes if n <= (cpu_count or 1)]
    print(f"\ntensor parallelism: {n_heads} attention heads -> sizes vLLM accepts {tp_sizes or 'none above 1'}; "
          f"one rank per core on these {cpu_count} cores: {tp_fits or 'none fits'}")


def print_tensor_parallel(tp: dict) -> None:
    """Prints one sharded-target run: its setting, the table per TP size, how verification and the drafter's share
    moved from the first size to the last, and what the all-reduces cost."""
    env = tp["env"]
    print(f"\n{env['host']}: target split over ranks by KV-head groups and MLP columns (gloo, 1 thread per rank, "
          f"{env['dtype']}, batch 1, K={tp['config']['k']}), medians of {tp['config']['repeats']} interleaved "
          f"repeats, load average {env['loadavg_start'][0]:.1f} -> {env['loadavg_end'][0]:.1f} on "
          f"{env['cpu_count']} cores; one all-reduce {tp['all_reduce_ms']:.3f} ms, "
          f"{tp['all_reduces_per_pass']} per pass")
    print(f"{'TP':>3s}{'decode ms':>11s}{'verify ms':>11s}{'parallel draft ms':>19s}{'K sequential ms':>17s}"
          f"{'draft share P-EAGLE':>21s}{'EAGLE-3':>9s}")
    for r in tp["rows"]:
        print(f"{r['tp']:>3d}{r['decode_ms']:>11.1f}{r['verify_ms']:>11.1f}{r['parallel_draft_ms']:>19.1f}"
              f"{r['sequential_draft_ms']:>17.1f}{r['parallel_draft_share']:>21.1%}"
              f"{r['sequential_draft_share']:>9.1%}")
    one, two = tp["rows"][0], tp["rows"][-1]
    faster = one["verify_ms"] / two["verify_ms"]
    print(f"sharding over {two['tp']} processes makes verification {faster:.2f}x as fast "
          f"({'faster' if faster > 1 else 'slower'}); the drafter's share of a round "
          f"{'grows' if two['sequential_draft_share'] > one['sequential_draft_share'] else 'does not grow'} "
          f"(EAGLE-3 {one['sequential_draft_share']:.1%} -> {two['sequential_draft_share']:.1%}, "
          f"P-EAGLE {one['parallel_draft_share']:.1%} -> {two['parallel_draft_share']:.1%})")
    reduce_ms = tp["all_reduces_per_pass"] * tp["all_reduce_ms"]
    print(f"the all-reduces of one pass: {tp['all_reduces_per_pass']} x {tp['all_reduce_ms']:.3f} = {reduce_ms:.1f} "
          f"ms, against a decode step that rose by {two['decode_ms'] - one['decode_ms']:.1f} ms; EAGLE-3's draft share "
          f"over P-EAGLE's: {one['sequential_draft_share'] / one['parallel_draft_share']:.1f}x at TP={one['tp']}, "
          f"{two['sequential_draft_share'] / two['parallel_draft_share']:.1f}x at TP={two['tp']}")
