"""The experiment commands: ``peagle-lab recipe`` and ``curve`` (:mod:`peagle_lab.experiments.recipe`),
``depth-accuracy`` (:mod:`peagle_lab.experiments.heldout`), ``study`` (:mod:`peagle_lab.experiments.studies`) and
``compare-heads`` (:mod:`peagle_lab.experiments.compare`)."""

from __future__ import annotations

from pathlib import Path

import torch

from .. import models, validate
from ..atomic import write_json
from ..distill.data import read_distilled, select_split
from ..drafter import PEagleDrafter
from ..drafter.checkpoint import check_head_dir
from ..environment import environment
from ..errors import PeagleError
from ..experiments import compare
from ..experiments.heldout import depth_accuracy
from ..experiments.recipe import VARIANTS, RecipePlan, Scoring, learning_curve, recipe_markdown, run_recipe, \
    scored_prompts
from ..experiments.studies import BASE, HELD_OUT_SEQUENCES, HELD_OUT_STUDIES, STUDIES, StudyData, study_inputs
from ..settings import display_path
from ..target_args import TargetPeek, add_target_options, load_cli_target
from ..training import prepare_sequences


def register_cli(sub):
    """recipe, curve, depth-accuracy, study and compare-heads, in the order ``--help`` lists them."""
    _register_recipe(sub)
    _register_depth_accuracy(sub)
    _register_study(sub)
    _register_compare_heads(sub)


def _train_sequences(args, model):
    _, records = read_distilled(args.data)
    records, _ = select_split(records, "train")
    return prepare_sequences(model, records[: args.num_sequences], features_dir=args.features)


def _register_recipe(sub):
    p = sub.add_parser("recipe", help="equal-budget training runs, one setting changed each, scored on held-out")
    p.add_argument("--data", required=True, help="distilled sequences (their train split is used)")
    p.add_argument("--features", default=None, help="feature shard directory (default: online, in memory)")
    p.add_argument("--num-sequences", type=int, default=None)
    p.add_argument("--out", required=True, help="results directory (runs.jsonl, RECIPE.md); resumes")
    p.add_argument("--budget", type=float, default=240.0, help="training seconds per run")
    p.add_argument("--only", default=None, help="comma-separated run names (default: all of recipe.VARIANTS)")
    _eval_options(p)
    add_target_options(p)
    p.set_defaults(func=_run_recipe_cli)

    c = sub.add_parser("curve", help="held-out acceptance length of training snapshots (tokens-N directories)")
    c.add_argument("snapshots", nargs="+", help="snapshot directories (e.g. HEAD/checkpoint/snapshots/tokens-*)")
    c.add_argument("--out", required=True, help="curve JSON to write (resumes: points already there are kept)")
    _eval_options(c)
    add_target_options(c)
    c.set_defaults(func=_run_curve_cli)


def _eval_options(p):
    p.add_argument("-K", type=int, default=7, help="draft length scored (default 7)")
    p.add_argument("--val-prompts", type=int, default=12, help="held-out prompts scored")
    p.add_argument("--suite", choices=["val", "chat", "code"], default="val",
                   help="held-out prompts scored: val (the first N of the mix's val split, as the committed runs), "
                        "chat (the bench's chat suite: its val split, chat, reasoning and code in turn) or code "
                        "(HumanEval, evaluation only)")
    p.add_argument("--max-new-tokens", type=int, default=64)


def scoring_from_args(args) -> Scoring:
    """The :class:`Scoring` of the ``-K``, ``--val-prompts``, ``--suite`` and ``--max-new-tokens`` options."""
    return Scoring(scored_prompts(args.suite, args.val_prompts), k=args.K, max_new_tokens=args.max_new_tokens,
                   suite=args.suite)


def _run_recipe_cli(args):
    variants = VARIANTS
    if args.only:
        names = [n.strip() for n in args.only.split(",")]
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            raise PeagleError(f"unknown recipe run(s) {unknown}. Fix: --only any of {list(VARIANTS)}.")
        variants = {n: VARIANTS[n] for n in names}
    model, tok, _ = load_cli_target(args)
    seqs = _train_sequences(args, model)
    runs = run_recipe(model, tok, seqs, scoring_from_args(args), args.out,
                      RecipePlan(budget_s=args.budget, variants=variants), machine=environment(model=model))
    print(recipe_markdown(runs))


def _run_curve_cli(args):
    model, tok, _ = load_cli_target(args)
    points = learning_curve(model, tok, args.snapshots, scoring_from_args(args), args.out)
    for p in points:
        print(f"{p['mode']:10s} {p['tokens_seen']:>10,} tokens  AL {p['acceptance_length']:.3f}")


def _register_depth_accuracy(sub):
    p = sub.add_parser("depth-accuracy", help="held-out per-depth accuracy of trained heads (does it fall with "
                                              "depth, and from where?)")
    p.add_argument("heads", nargs="+", help="head directories (config.json + model.safetensors)")
    p.add_argument("--data", required=True, help="distilled sequences; their --split records are scored")
    p.add_argument("--split", choices=["train", "val", "all"], default="val",
                   help="records scored (default val: the mix's held-out prompts, never trained on)")
    p.add_argument("--sequences", type=int, default=60, help="the first N records of the split (default 60)")
    p.add_argument("--out", default=None, help="JSON to write (one entry per head, with the host)")
    add_target_options(p)
    p.set_defaults(func=_run_depth_accuracy)


def _run_depth_accuracy(args):
    validate.positive_int(args.sequences, "sequences", "--sequences")
    for h in args.heads:
        check_head_dir(h)
    if args.out:
        validate.writable(args.out, "--out", folder=False)
    _, records = read_distilled(args.data, TargetPeek(args.target).vocab_size)
    records, _ = select_split(records, args.split)
    if not records:
        raise PeagleError(f"{args.data} holds no records of the split {args.split!r}. Fix: another --split.")
    model, _, _ = load_cli_target(args)
    seqs = prepare_sequences(model, records[: args.sequences])
    rows = []
    for h in args.heads:
        head = PEagleDrafter.from_pretrained(h, target=model, device=next(model.parameters()).device)
        acc = depth_accuracy(head, seqs)
        rows.append(dict(head=display_path(h), layers=head.config.num_hidden_layers, mode=head.config.mode, **acc))
        print(f"{display_path(h)} ({head.config.num_hidden_layers} layer(s)): "
              + " ".join(f"{a:.3f}" if a is not None else "-" for a in acc["accuracy"]))
    if args.out:
        write_json(args.out, dict(data=display_path(args.data), split=args.split, sequences=len(seqs),
                                  tokens=sum(len(s["input_ids"]) for s in seqs), heads=rows,
                                  machine=environment(model=model)))


def _register_study(sub):
    p = sub.add_parser("study", help="an equal-budget study with two seeds per setting: mask stand-ins, bf16 vs "
                                     "fp32 storage, self-distilled vs human answers, soft targets, what feeds the deep slots")
    p.add_argument("name", choices=STUDIES)
    p.add_argument("--out", required=True, help="results directory (runs.jsonl, RECIPE.md); resumes")
    p.add_argument("--data", default="data/distill/smollm2-135m-scale.jsonl",
                   help="distilled sequences for the mask and storage studies (their train split)")
    p.add_argument("--num-sequences", type=int, default=400)
    p.add_argument("--steps", type=int, default=BASE["steps"], help="optimizer steps per run (equal budget)")
    p.add_argument("-K", type=int, default=7, help="draft length scored (default 7)")
    p.add_argument("--val-prompts", type=int, default=16, help="held-out prompts scored")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--features", default=None,
                   help="feature cache directory for the soft-targets and deep-slots studies (default: online, "
                        "in memory)")
    add_target_options(p)
    p.set_defaults(func=_run_study)


def _run_study(args):
    model, tok, target = load_cli_target(args)
    out = Path(args.out)
    sources = StudyData(args.data, args.num_sequences, args.val_prompts, args.features)
    data, val, variants = study_inputs(args.name, model, tok, sources, out, target=target)
    machine = dict(environment(model=model), study=args.name,
                   sequences={k: len(v) for k, v in data.items()},
                   tokens={k: sum(len(s["input_ids"]) for s in v) for k, v in data.items()})
    held_out = None
    if args.name in HELD_OUT_STUDIES:  # per-depth accuracy on distilled sequences of the held-out prompts
        _, records = read_distilled(args.data)
        records, _ = select_split(records, "val")
        held_out = prepare_sequences(model, records[:HELD_OUT_SEQUENCES], progress=False)
        machine["held_out_sequences"] = len(held_out)
    runs = run_recipe(model, tok, data, Scoring(val, k=args.K, max_new_tokens=args.max_new_tokens), out,
                      RecipePlan(variants=variants, base=dict(BASE, steps=args.steps), held_out=held_out),
                      machine=machine)
    print(recipe_markdown(runs))


def _register_compare_heads(sub):
    p = sub.add_parser("compare-heads", help="heads compared on held-out prompts none of them trained on (greedy, "
                                             "bf16 target, 8 prompts x 64 tokens, K=3 and K=7) into a JSON table")
    p.add_argument("out", metavar="OUT", help="table to write (rows already there, on the same prompts, are kept; a row of the "
                               "same name is replaced)")
    p.add_argument("heads", nargs="+", metavar="NAME=HEAD_DIR", help="a row's name and its head directory")
    p.add_argument("--prompts", choices=["heldout", "offmix"], default="heldout",
                   help="heldout: 8 held-out prompts of the mix (default); offmix: the first 16 prompts written apart "
                        "from the mix, in other styles")
    p.set_defaults(func=_run_compare_heads)


def head_pairs(pairs: list[str]) -> list[tuple[str, str]]:
    """``NAME=HEAD_DIR`` arguments as ``(name, directory)``: each with a name and a directory, no name twice."""
    heads = []
    for pair in pairs:
        name, eq, path = pair.partition("=")
        if not eq or not name.strip() or not path.strip():
            raise PeagleError(f"{pair!r}: expected NAME=HEAD_DIR. Fix: e.g. "
                              "'shipped P-EAGLE=data/heads/smollm2-135m-peagle'.")
        if name in {n for n, _ in heads}:
            raise PeagleError(f"the name {name!r} is given twice. Fix: one NAME per row of the table.")
        heads.append((name, path))
    return heads


def _run_compare_heads(args):
    heads = head_pairs(args.heads)
    for _, path in heads:
        check_head_dir(path)
    validate.writable(args.out, "OUT", folder=False)
    prompts = compare.suite_prompts(args.prompts)
    compare.start_table(args.out, prompts, [n for n, _ in heads])  # a table of other prompts is refused now
    torch.set_num_threads(1)
    model, tok = models.load_target(dtype=getattr(torch, compare.DTYPE))[:2]
    compare.compare_heads(model, tok, heads, args.out, prompts)
