"""What tensor parallelism does to a speculative round: the target's decode step and verification of K+1 tokens,
whole (TP=1) and sharded over ``tp`` processes (:mod:`.tp_shard`, gloo, one thread per rank), against the drafter,
replicated on every rank: one P-EAGLE pass over K slots (parallel drafting) and K single-slot passes (sequential,
EAGLE-3's way). The drafter's share of a round, draft / (draft + verify), is what sharding the target moves.

All ranks run in processes of their own (``torch.multiprocessing``); TP=1 runs on rank 0 while the others wait, and
the two sizes alternate within every repeat. A sharded call is timed from a barrier to its end on the slowest rank.
"""

from __future__ import annotations

import copy
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from ..errors import PeagleError
from ..flags import flag_field, flag_of
from ..hardware import usable_cores
from ..precision import host_slug
from ..timer import summarize, time_once
from ..decoding.target_runner import TargetRunner
from .drafting import round_fns
from .inputs import describe_head, target_runner
from .record import SCHEMA, finish_environment, rounded
from .tp_shard import check_tp_size, shard_model, split_sizes

CALLS = ("decode", "verify", "parallel_draft", "sequential_draft")
RESULTS_FILE = "tensor_parallel.json"


@dataclass
class TensorParallelConfig:
    """One run's settings; its fields are the flags of ``peagle-lab bench-tensor-parallel``."""

    tp: int = flag_field(2, "ranks the target is sharded over (processes, one thread each)")
    k: int = flag_field(7, "draft tokens per round: verification covers K+1 tokens", flag="--K")
    head: str = flag_field("parallel", "the P-EAGLE head: 'parallel' (shipped) or a head directory")
    prompt_tokens: int = flag_field(100, "prompt length: the first N tokens of HumanEval 0 in the chat template")
    repeats: int = flag_field(15, "timed repeats (the median is reported)")
    warmup: int = flag_field(2, "untimed repeats first")
    out: str = flag_field("", "results folder (default: data/results/<host>/tensor-parallel)")
    overwrite: bool = flag_field(False, "replace this host's earlier results")
    target: str | None = flag_field(None, "target HF id or path (default: the embedded model)", cli=False)

    def check(self, config) -> None:
        """Refuse what cannot run here, before any process starts (one line each, with the fix)."""
        if self.tp < 2:
            raise PeagleError(f"--tp {self.tp} has nothing to compare with TP=1. Fix: --tp 2.")
        check_tp_size(self.tp, config, usable_cores())
        for name, low in (("k", 1), ("prompt_tokens", 8), ("repeats", 1), ("warmup", 0)):
            if getattr(self, name) < low:
                flag = flag_of(TensorParallelConfig, name)
                raise PeagleError(f"{flag} {getattr(self, name)} is below {low}. Fix: {flag} {max(low, 1)} or more.")


def spawn(fn, world: int, *args):
    """Run ``fn(rank, world, *args)`` in ``world`` processes of one gloo group (one thread each); return what rank 0's
    call returned."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    with tempfile.TemporaryDirectory(prefix="peagle-tp-") as tmp:
        mp.spawn(_rank_main, args=(world, str(Path(tmp) / "store"), queue, fn, args), nprocs=world, join=True)
        return queue.get()


def _rank_main(rank, world, store, queue, fn, args):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        out = fn(rank, world, *args)
        if rank == 0:
            queue.put(out)
    finally:
        dist.destroy_process_group()


def shard_gap(model, prompt: list[int], rank: int, world: int) -> float:
    """The largest |logit| difference between ``model`` whole and its shard on this rank (``model`` becomes the
    shard), over a prefill of ``prompt[:-2]``, a decode step with the cache and a pass over the last token."""
    whole = TargetRunner(copy.deepcopy(model))
    shard = TargetRunner(shard_model(model, rank, world))
    gap = 0.0
    for ids in (prompt[:-2], prompt[-2:-1], prompt[-1:]):
        a, _ = whole.forward(ids)
        b, _ = shard.forward(ids)
        gap = max(gap, float((a - b).abs().max()))
    return gap


def _pass_fns(head, model, prompt, k) -> dict:
    """The four timed calls on ``model`` (whole or a shard): decode step, verification of K+1, the two draftings."""
    draft_fn, verify_fn = round_fns(head, target_runner(model, head), prompt, 1)
    return {"decode": verify_fn(0), "verify": verify_fn(k), "parallel_draft": draft_fn("parallel", k),
            "sequential_draft": draft_fn("sequential", k)}


def _sharded_time(fn) -> float:
    """Seconds of one collective call: from a barrier to its end on the slowest rank."""
    dist.barrier()
    t = torch.tensor([time_once(fn)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _all_reduce_ms(hidden: int, repeats: int) -> float:
    """Median ms of one all-reduce of a decode step's hidden state (what each layer pays twice when sharded)."""
    buf = torch.zeros(1, 1, hidden)
    return summarize([_sharded_time(lambda: dist.all_reduce(buf)) * 1e3 for _ in range(max(repeats, 5))])["median"]


def _measure(rank: int, world: int, cfg: TensorParallelConfig) -> dict:
    """Every rank's part of the run; rank 0 returns the samples (ms) per TP size and call, and the logits gap."""
    from ..drafter.heads import check_head_spec, load_head
    from ..settings import display_path
    from ..models import load_target
    from ..prompts import chat_ids, humaneval_prompts

    model, tok = load_target(cfg.target, device="cpu", dtype=torch.float32)
    head = load_head(cfg.head, model, dtype=torch.float32)
    head._bench_source = display_path(check_head_spec(cfg.head))
    prompt = chat_ids(tok, humaneval_prompts(1)[0])[:cfg.prompt_tokens]
    whole = copy.deepcopy(model) if rank == 0 else None
    gap = shard_gap(model, prompt, rank, world)  # model is now this rank's shard
    fns = {world: _pass_fns(head, model, prompt, cfg.k)}
    if rank == 0:
        fns[1] = _pass_fns(head, whole, prompt, cfg.k)
    samples = {size: {c: [] for c in CALLS} for size in (1, world)}
    for r in range(cfg.warmup + cfg.repeats):
        for size in ((1, world) if r % 2 == 0 else (world, 1)):
            for call in CALLS:
                if size == 1 and rank == 0:
                    s = time_once(fns[1][call])
                elif size == world:
                    s = _sharded_time(fns[world][call])
                else:
                    continue
                if r >= cfg.warmup:
                    samples[size][call].append(s * 1e3)
            dist.barrier()
    return {"samples": samples, "logits_max_abs_diff": gap, "prompt_tokens": len(prompt),
            "all_reduce_ms": _all_reduce_ms(model.config.hidden_size, cfg.repeats),
            "head": describe_head(head), "target": _shape(model.config, world)}


def _shape(config, world: int) -> dict:
    return {"layers": config.num_hidden_layers, "hidden": config.hidden_size,
            "query_heads": config.num_attention_heads, "kv_heads": config.num_key_value_heads,
            "intermediate": config.intermediate_size, "kv_heads_per_rank": split_sizes(config.num_key_value_heads,
                                                                                        world)}


def _row(size: int, samples: dict) -> dict:
    med = {c: summarize(samples[c])["median"] for c in CALLS}
    row = {"tp": size, **{f"{c}_ms": rounded(med[c], 3) for c in CALLS},
           **{f"{c}_iqr_ms": rounded(summarize(samples[c])["iqr"], 3) for c in CALLS}}
    for mode in ("parallel", "sequential"):
        draft = med[f"{mode}_draft"]
        row[f"{mode}_draft_share"] = rounded(draft / (draft + med["verify"]), 4)
    return row


def run_tensor_parallel(cfg: TensorParallelConfig, env: dict) -> dict:
    """Run the measurement over ``cfg.tp`` processes; the results record (``env``: the environment at the start,
    completed here)."""
    got = spawn(_measure, cfg.tp, cfg)
    rows = [_row(size, got["samples"][size]) for size in (1, cfg.tp)]
    env.update(threads_per_rank=1, ranks=cfg.tp, backend="gloo")
    return {
        "schema": SCHEMA, "kind": "tensor_parallel", "env": finish_environment(env),
        "config": {**{k: v for k, v in asdict(cfg).items() if k not in ("out", "overwrite")},
                   "prompt_tokens": got["prompt_tokens"], "head": got["head"], "target_shape": got["target"],
                   "drafter": "replicated on every rank", "timing": "median of repeats, TP sizes interleaved"},
        "rows": rows,
        "speedup_of_tp": {c: rounded(rows[0][f"{c}_ms"] / rows[1][f"{c}_ms"], 3) for c in CALLS},
        "logits_max_abs_diff": rounded(got["logits_max_abs_diff"], 8),
        "all_reduce_ms": rounded(got["all_reduce_ms"], 3),
        "all_reduces_per_pass": 2 * got["target"]["layers"],
        "raw_ms": {str(size): {c: [rounded(x, 3) for x in v] for c, v in s.items()}
                   for size, s in got["samples"].items()},
    }


def results_path(out: str | None) -> Path:
    """The results file: under ``out``, else ``data/results/<this host>/tensor-parallel/``."""
    from ..settings import data_dir

    folder = Path(out) if out else data_dir() / "results" / host_slug("cpu") / "tensor-parallel"
    return folder / RESULTS_FILE


def check_results_file(path: Path, overwrite: bool) -> None:
    """Refuse to replace another host's results (ever) or this host's (without ``overwrite``)."""
    if not path.exists():
        return
    try:
        theirs = (json.loads(path.read_text()).get("env") or {}).get("host")
    except ValueError:
        theirs = None
    mine = host_slug("cpu")
    if theirs and theirs != mine:
        raise PeagleError(f"{path} holds results of host {theirs}, this is {mine}: one host's results never "
                          f"overwrite another's. Fix: --out data/results/{mine}/tensor-parallel.")
    if not overwrite:
        raise PeagleError(f"{path} already holds tensor-parallel results. Fix: --overwrite to replace them, or "
                          "another --out.")
