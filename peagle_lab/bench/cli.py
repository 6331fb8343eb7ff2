"""``peagle-lab bench``: drafting cost and end-to-end speed-ups from a shell (JSON, CSV, PNG, README)."""

from __future__ import annotations

import shlex
import sys
import time
from datetime import datetime
from pathlib import Path

from .. import lock
from ..precision import dtype_name
from ..target_args import add_target_options, check_target_options, load_cli_target
from ..errors import PeagleError
from ..models import target_name
from ..settings import is_ci, results_dir, seed_everything
from .inputs import load_head_or_fresh
from .readme import format_table
from .suite import run_benchmark


def parse_ks(text: str) -> list[int]:
    """``"1-8"``, ``"1,2,4"`` or ``"1-3,6"`` -> sorted unique ints."""
    out = set()
    try:
        for part in str(text).split(","):
            part = part.strip()
            if not part:
                continue
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            else:
                out.add(int(part))
    except ValueError as exc:
        raise PeagleError(f"Cannot read K list {text!r}: use e.g. '1-8' or '1,2,4'.") from exc
    if not out or min(out) < 1:
        raise PeagleError(f"K list {text!r} must hold integers >= 1.")
    return sorted(out)


def parse_ks_or_none(text: str) -> list[int]:
    """:func:`parse_ks`, or ``[]`` for ``"none"``."""
    return [] if str(text).strip().lower() == "none" else parse_ks(text)


def register_cli(sub):
    p = sub.add_parser("bench", help="benchmark drafting cost and end-to-end speed-ups (JSON, CSV, PNG)",
                       description="Drafting cost (parallel vs sequential per K) and end-to-end greedy decoding per "
                                   "prompt suite (code: HumanEval; chat: held-out chat, reasoning and code questions "
                                   "of the prompt mix): plain, P-EAGLE, EAGLE-3, an oracle at the paper's acceptance, "
                                   "transformers greedy and prompt-lookup.")
    p.add_argument("--parallel-head", default="parallel",
                   help="P-EAGLE head: 'parallel' (the head for this target: shipped if it fits, else the one trained "
                        "here under $PEAGLE_RESULTS/heads/<target>/), a directory, or 'fresh' (untrained, timing only)")
    p.add_argument("--sequential-head", default="sequential",
                   help="EAGLE-3 head: 'sequential' (the head for this target, as above), a directory, 'fresh', or 'none'")
    p.add_argument("--allow-fresh", action="store_true",
                   help="use an untrained head when no head fits the target (otherwise that is an error)")
    p.add_argument("--ks-parallel", type=parse_ks, default=None, help="K sweep for P-EAGLE (full: 1-8)")
    p.add_argument("--ks-sequential", type=parse_ks, default=None, help="K sweep for EAGLE-3 (full: 1-5)")
    p.add_argument("--draft-ks", type=parse_ks, default=None, help="K values for the drafting cost (full: 1-10)")
    p.add_argument("--pld-ks", type=parse_ks, default=None, help="prompt_lookup_num_tokens values (default: 10)")
    p.add_argument("--suite", choices=["code", "chat", "all"], default="code",
                   help="prompt suite(s) end to end: code (HumanEval), chat (held-out split of the prompt mix) or "
                        "all (both, results per suite; default code)")
    p.add_argument("-n", "--n-prompts", type=int, default=None, help="prompts per suite (full: 24)")
    p.add_argument("--oracle-ks", type=parse_ks_or_none, default=None,
                   help="K values of the oracle drafter (true greedy continuation at set per-position acceptance, "
                        "charged one parallel head pass per round; full: 3,5,7; 'none': no oracle)")
    p.add_argument("--oracle-accept", default="paper",
                   help="the oracle's conditional per-position acceptance: 'paper' (the P-EAGLE blog's acceptance "
                        "length at K=7 for the suite: HumanEval 3.94, MT-Bench 3.70), a preset (blog-humaneval, "
                        "blog-mtbench, vllm-pr32628) or a list such as 0.8,0.7,0.6 (the last rate repeats)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="new tokens per prompt (full: 96)")
    p.add_argument("--repeats", type=int, default=None, help="passes over the prompts end to end (default 1)")
    p.add_argument("--draft-repeats", type=int, default=None, help="timed repeats per K for drafting cost (full: 15)")
    p.add_argument("--quick", "--ci", action="store_true", dest="quick", help="CI sizes (2 prompts, 24 tokens, few K)")
    p.add_argument("--skip-drafting", action="store_true", help="no drafting-cost sweep")
    p.add_argument("--skip-e2e", action="store_true", help="no end-to-end sweep")
    p.add_argument("--assistant", default=None,
                   help="small draft LM (HF id/path) for transformers' assisted generation")
    add_target_options(p)
    p.add_argument("--out", default=None, help="results folder (default results/bench/<name>)")
    p.add_argument("--name", default=None, help="run name under results/bench/ (default: target-date-time)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out")
    p.set_defaults(func=run_cli)


def check_cli(args) -> Path:
    """Every argument, the environment, the heads given as folders (config against weights) and the results
    folder (writable, not another host's or dtype's, not overwritten without --overwrite), before the target
    loads: the results folder."""
    from .. import validate
    from ..drafter.checkpoint import check_head_dir
    from ..drafter.heads import SHIPPED
    from ..prompts import chat_records, humaneval_prompts
    from .files import check_results_dir
    from .oracle import oracle_rates
    from .suites import suite_list

    device, dtype = check_target_options(args)
    for name, flag in (("n_prompts", "-n/--n-prompts"), ("max_new_tokens", "--max-new-tokens"),
                       ("repeats", "--repeats"), ("draft_repeats", "--draft-repeats")):
        if getattr(args, name) is not None:
            validate.positive_int(getattr(args, name), name, flag)
    if args.n_prompts is not None:  # no more than a suite holds
        for suite in suite_list(args.suite):
            humaneval_prompts(args.n_prompts) if suite == "code" else chat_records(args.n_prompts)
    oracle_rates(args.oracle_accept)
    if args.skip_drafting and args.skip_e2e:
        raise PeagleError("--skip-drafting and --skip-e2e together leave nothing to measure. Fix: drop one of them.")
    for role, spec in (("parallel", args.parallel_head), ("sequential", args.sequential_head)):
        if spec in ("none", "fresh"):
            continue
        path = SHIPPED.get(spec, Path(spec))
        if path.exists():
            check_head_dir(path)
        elif not args.allow_fresh:
            raise PeagleError(f"No {role} head at {path}. Fix: pass --{role}-head DIR, train one (`peagle-lab "
                              "train`), or add --allow-fresh to time an untrained head.")
    if args.parallel_head == "none":
        raise PeagleError("The benchmark needs a parallel head (--parallel-head); 'none' is only for the "
                          "sequential one.")
    name = args.name or f"{Path(str(args.target or target_name())).name}-{datetime.now():%Y%m%d-%H%M%S}"
    out_dir = Path(args.out) if args.out else results_dir() / "bench" / name
    validate.writable(out_dir, "--out", folder=True)
    check_results_dir(out_dir, device, dtype, args.overwrite)
    return out_dir


def run_cli(args):
    out_dir = check_cli(args)
    with lock.hold(out_dir):
        return _run_locked(args, out_dir)


def _run_locked(args, out_dir: Path):
    seed_everything(0)
    t0 = time.perf_counter()

    def progress(msg):
        print(f"[bench {time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    args.quick = args.quick or is_ci()
    model, tok, _ = load_cli_target(args)
    heads = {}
    for role, spec in (("parallel", args.parallel_head), ("sequential", args.sequential_head)):
        if spec == "none":
            heads[role] = None
            continue
        head, desc = load_head_or_fresh(spec, model, mode=role, tokenizer=tok,
                                        allow_fresh=args.allow_fresh or spec == "fresh")
        if desc.get("note"):
            progress(desc["note"])
        head._bench_source = desc["source"]
        heads[role] = head
        run_dtype = dtype_name(next(head.parameters()).dtype)
        stored = getattr(head, "stored_dtype", run_dtype)
        progress(f"{role} head: {desc['source']} ({desc['num_hidden_layers']} layer(s), trained K={desc['trained_k']}"
                 + (f"; stored in {stored}, converted to {run_dtype})" if stored != run_dtype else ")"))
    assistant = None
    if args.assistant:
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(args.assistant, dtype=next(model.parameters()).dtype)
        assistant.to(next(model.parameters()).device).eval()
    res = run_benchmark(model, tok, heads["parallel"], heads["sequential"], out_dir=out_dir,
                        ks_parallel=args.ks_parallel, ks_sequential=args.ks_sequential, draft_ks=args.draft_ks,
                        n_prompts=args.n_prompts, max_new_tokens=args.max_new_tokens, repeats=args.repeats,
                        draft_repeats=args.draft_repeats, pld_ks=args.pld_ks, quick=args.quick,
                        drafting=not args.skip_drafting, e2e=not args.skip_e2e, assistant=assistant,
                        plots=not args.no_plots, progress=progress, overwrite=args.overwrite, suite=args.suite,
                        oracle_ks=args.oracle_ks, oracle_accept=args.oracle_accept,
                        command="peagle-lab bench " + " ".join(shlex.quote(a) for a in sys.argv[2:])
                        if len(sys.argv) > 1 and sys.argv[1] == "bench" else None)
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
    print(f"results: {out_dir} ({time.perf_counter() - t0:.0f} s)")
    if any(not e["all_lossless"] for e in (res.get("suites") or {}).values()):
        return 2
    return 0
