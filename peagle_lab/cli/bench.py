"""``peagle-lab bench``: drafting cost and end-to-end speed-ups from a shell (JSON, CSV, PNG, README). Its flags
are the fields of :class:`.config.BenchConfig`, plus the target options every command shares."""

from __future__ import annotations

import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

from .. import lock, validate
from ..errors import PeagleError
from ..flags import add_config_flags, given_config_flags
from ..models import target_name
from ..precision import dtype_name
from ..settings import is_ci, results_dir, seed_everything
from ..target_args import add_target_options, check_target_options, load_cli_target
from ..bench.config import BenchConfig
from ..bench.inputs import load_head_or_fresh
from ..bench.readme import format_table
from ..bench.suite import run_benchmark


def register_cli(sub):
    p = sub.add_parser("bench", help="benchmark drafting cost and end-to-end speed-ups (JSON, CSV, PNG)",
                       description="Drafting cost (parallel vs sequential per K) and end-to-end greedy decoding per "
                                   "prompt suite (code: HumanEval; chat: held-out chat, reasoning and code questions "
                                   "of the prompt mix; offmix: prompts written apart from the mix): plain, P-EAGLE, EAGLE-3, an oracle at the paper's acceptance, "
                                   "transformers greedy and prompt-lookup.")
    add_config_flags(p, BenchConfig)
    add_target_options(p)
    p.set_defaults(func=run_cli)


def config_from_args(args) -> BenchConfig:
    """The run's :class:`BenchConfig`: the flags given, the dataclass defaults for the rest (the quick sizes also
    under ``PEAGLE_CI=1``), and the target options."""
    given = given_config_flags(args, BenchConfig)
    if is_ci():
        given["quick"] = True
    return BenchConfig(**given, target=args.target, device=args.device, threads=args.threads, dtype=args.dtype)


def check_cli(args) -> BenchConfig:
    """Every argument, the environment, the heads given as folders (config against weights) and the results
    folder (writable, not another host's or dtype's, not overwritten without --overwrite), before the target
    loads: the run's config, its ``out`` the results folder."""
    from ..drafter.heads import check_head_spec
    from ..bench.files import check_results_dir
    from ..bench.suites import suite_records

    device, dtype = check_target_options(args)
    cfg = config_from_args(args)
    if args.n_prompts is not None:  # no more than a suite holds
        for suite in cfg.suites:
            suite_records(suite, cfg.n_prompts)
    for role, spec in (("parallel", cfg.parallel_head), ("sequential", cfg.sequential_head)):
        if spec in ("none", "fresh"):
            continue
        path = check_head_spec(spec)  # a hub id is fetched, a directory checked against its config
        if not path.exists() and not cfg.allow_fresh:
            raise PeagleError(f"No {role} head at {path}. Fix: pass --{role}-head DIR, train one (`peagle-lab "
                              "train`), or add --allow-fresh to time an untrained head.")
    name = cfg.name or f"{Path(str(cfg.target or target_name())).name}-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = Path(cfg.out) if cfg.out else results_dir() / "bench" / name
    validate.writable(out_dir, "--out", folder=True)
    check_results_dir(out_dir, device, dtype, cfg.overwrite)
    cfg.out = str(out_dir)
    return cfg


def run_cli(args):
    cfg = check_cli(args)
    with lock.hold(cfg.out):
        return _run_locked(cfg)


def _run_locked(cfg: BenchConfig):
    seed_everything(0)
    t0 = time.perf_counter()

    def progress(msg):
        print(f"[bench {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    model, tok, _ = load_cli_target(cfg)
    heads = {role: _load_head(cfg, role, model, tok, progress) for role in ("parallel", "sequential")}
    assistant = None
    if cfg.assistant:
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(cfg.assistant, dtype=next(model.parameters()).dtype)
        assistant.to(next(model.parameters()).device).eval()
    command = ("peagle-lab bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
               if len(sys.argv) > 1 and sys.argv[1] == "bench" else None)
    res = run_benchmark(model, tok, cfg, heads["parallel"], heads["sequential"], assistant=assistant,
                        progress=progress, command=command)
    _print_results(res)
    print(f"results: {cfg.out} ({time.perf_counter() - t0:.0f} s)")
    if any(not e["all_lossless"] for e in (res.get("suites") or {}).values()):
        return 2
    return 0


def _load_head(cfg: BenchConfig, role: str, model, tok, progress):
    """The ``role`` (parallel / sequential) head ``cfg`` names (None for ``none``), its source and dtype said
    through ``progress``."""
    spec = getattr(cfg, f"{role}_head")
    if spec == "none":
        return None
    head, desc = load_head_or_fresh(spec, model, mode=role, tokenizer=tok,
                                    allow_fresh=cfg.allow_fresh or spec == "fresh")
    if desc.get("note"):
        progress(desc["note"])
    head._bench_source = desc["source"]
    run_dtype = dtype_name(next(head.parameters()).dtype)
    stored = getattr(head, "stored_dtype", run_dtype)
    progress(f"{role} head: {desc['source']} ({desc['num_hidden_layers']} layer(s), trained K={desc['trained_k']}"
             + (f"; stored in {stored}, converted to {run_dtype})" if stored != run_dtype else ")"))
    return head


def _print_results(res: dict) -> None:
    """The machine, the drafting-cost table and each suite's end-to-end table with its notes."""
    env = (res.get("end_to_end") or res.get("drafting_cost"))["env"]
    print(f"hardware: {env['hardware']}; load {env['loadavg_start']} -> {env['loadavg_end']}")
    if res.get("drafting_cost"):
        print(format_table(res["drafting_cost"]["rows"], ["k", "parallel_ms", "sequential_ms", "ratio_seq_over_par",
                                                          "verify_ms", "verify_ratio"]))
    for suite, e in (res.get("suites") or {}).items():
        print(f"suite {suite}: {e['config']['n_prompts']} {e['config']['prompts']} prompts")
        print(format_table(e["methods"], ["method", "tokens_per_s", "speedup", "acceptance_length", "decode_speedup",
                                          "ideal_speedup", "efficiency", "lossless_note"]))
        for note in e["notes"]:
            print("NOTE:", note)
