"""Held-out per-depth accuracy of a trained head: on sequences it never trained on, how often its greedy draft at
depth ``d`` equals the target's greedy token, with every anchor at every depth (no COD subsampling), computed by
the training objective's own forward (:class:`~peagle_lab.training.objective.DraftTrainer`), which equals the
one-pass inference draft. A label outside the draft vocabulary counts as a miss, as acceptance counts it."""

from __future__ import annotations

import copy

import torch

from ..drafter import PEagleDrafter
from ..training.elements import plan_row
from ..training.objective import DraftTrainer


@torch.no_grad()
def depth_accuracy(head: PEagleDrafter, sequences: list[dict], num_depths: int | None = None) -> dict:
    """``{"accuracy": [per depth], "elements": [per depth]}`` of ``head`` on ``sequences`` (from
    :func:`~peagle_lab.training.prepare_sequences`), one sequence at a time; ``num_depths`` defaults to the head's
    trained K. The accuracy of depth ``d`` pools every anchor ``a`` with ``a + d + 1`` inside its sequence."""
    cfg = head.config
    depths = num_depths or cfg.num_speculative_tokens
    variant = cfg.extra.get("mask_hidden_variant", "learned")
    src = copy.deepcopy(head).float()  # the caller's head stays as it is (dtype included)
    trainer = DraftTrainer(copy.deepcopy(src), cfg.mode, mask_hidden=variant).eval()
    trainer.load_head(src)
    n, correct = [0] * depths, [0] * depths
    for seq in sequences:
        if len(seq["input_ids"]) < 2:
            continue
        plan = plan_row([seq], depths, ratio=1.0, min_ratio=1.0)  # every anchor at every depth
        _, metrics = trainer(plan)
        for d, m in enumerate(metrics):
            n[d] += m["n"]
            correct[d] += m["correct"]
    return dict(accuracy=[round(c / k, 4) if k else None for c, k in zip(correct, n)], elements=n)


def register_cli(sub):
    p = sub.add_parser("depth-accuracy", help="held-out per-depth accuracy of trained heads (does it fall with "
                                              "depth, and from where?)")
    p.add_argument("heads", nargs="+", help="head directories (config.json + model.safetensors)")
    p.add_argument("--data", required=True, help="distilled sequences; their --split records are scored")
    p.add_argument("--split", choices=["train", "val", "all"], default="val",
                   help="records scored (default val: the mix's held-out prompts, never trained on)")
    p.add_argument("--sequences", type=int, default=60, help="the first N records of the split (default 60)")
    p.add_argument("--out", default=None, help="JSON to write (one entry per head, with the host)")
    from ..target_args import add_target_options

    add_target_options(p)
    p.set_defaults(func=_run_cli)


def _run_cli(args):
    from .. import validate
    from ..atomic import write_json
    from ..drafter.checkpoint import check_head_dir
    from ..environment import environment
    from ..errors import PeagleError
    from ..settings import display_path
    from ..target_args import TargetPeek, load_cli_target
    from ..distill.data import read_distilled, select_split
    from ..training.sequences import prepare_sequences

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
