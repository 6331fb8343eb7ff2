"""``peagle-lab extract``: offline EAGLE-3 features of the training sequences (distilled or prompts only)."""

from __future__ import annotations

import argparse

import dataclasses

from .. import lock, validate
from ..errors import PeagleError
from ..flags import add_config_flags, given_config_flags
from ..features.format import TAPS_DTYPES
from ..features.taps import check_tap_layers
from ..features.writer import ExtractionSettings, extract_features
from ..prompts import chat_ids, load_train_prompts
from ..target_args import TargetPeek, add_target_options, check_target_options, load_cli_target
from ..distill.data import MAX_SEQ_LEN, read_distilled, select_split


def register_cli(sub):
    p = sub.add_parser("extract", help="offline EAGLE-3 features (taps, greedy labels) to resumable shards")
    p.add_argument("--out", required=True, help="output directory (resumed when it holds an interrupted run)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--distilled", default=None,
                     help="JSONL written by `peagle-lab distill` (prompt + target response); default: training "
                          "prompts only, chat-templated")
    src.add_argument("--prompts", type=int, default=None, help="use the first N training prompts (default: all)")
    p.add_argument("--split", choices=["train", "val", "all"], default="all",
                   help="with --distilled: the prompts of this split of the scale mix (default all)")
    p.add_argument("--records", default=None, metavar="START:END",
                   help="with --distilled: only these records of the split, in prompt order (default all); extract "
                        "a large file in slices, one --out DIR/part-NAME each, and train on them as they complete")
    p.add_argument("--tap-layers", nargs="+", default=None, dest="taps", metavar="TAP_LAYERS",
                   help="tap layer ids, e.g. 2 15 27 or 2,15,27 (default: vLLM's 2, L//2, L-3)")
    p.add_argument("--taps", type=lambda text: [text], dest="taps", help=argparse.SUPPRESS)  # train's spelling above
    add_config_flags(p, ExtractionSettings)  # --shard-size, --topk-logits, --batch-tokens: one default each
    p.add_argument("--store-dtype", default="bfloat16", choices=sorted(TAPS_DTYPES), help="taps dtype on disk")
    p.add_argument("--max-seq-len", type=int, default=MAX_SEQ_LEN,
                   help=f"cut --distilled sequences here, as `train --max-seq-len` does (default {MAX_SEQ_LEN})")
    add_target_options(p)
    p.set_defaults(func=_run_cli)


def check_cli(args):
    """Every argument, the environment, the output folder and (with --distilled) every record, its token ids
    within the target's vocabulary (read from its config.json), before the target's weights load: the token id
    sequences to extract, or None for the training prompts (templated once the tokenizer is loaded)."""
    check_target_options(args)
    s = settings_of(args)
    validate.positive_int(s.shard_size, "shard_size", "--shard-size")
    validate.positive_int(args.max_seq_len, "max_seq_len", "--max-seq-len", 2)
    validate.positive_int(s.batch_tokens, "batch_tokens", "--batch-tokens", 0)
    if args.prompts is not None:
        validate.positive_int(args.prompts, "prompts", "--prompts")
    validate.writable(args.out, "--out", folder=True)
    if args.distilled:
        validate.disjoint(args.distilled, args.out, "--distilled", "--out")
    peek = TargetPeek(args.target)
    validate.positive_int(s.topk, "topk", "--topk", 0, peek.vocab_size)
    if args.taps:
        check_tap_layers(_tap_layers(args), peek.num_layers, "--tap-layers")
    rows = validate.record_range(args.records) if args.records is not None else slice(None)
    if not args.distilled:
        if args.records is not None:
            raise PeagleError("--records slices a distilled file. Fix: add --distilled DATA, or drop --records.")
        return None
    _, records = read_distilled(args.distilled, peek.vocab_size)
    records, _ = select_split(records, args.split)
    n = len(records)
    records = records[rows]
    if not records:
        raise PeagleError(f"{args.distilled} holds no records of the split {args.split!r}"
                          + (f" in --records {args.records} (it has {n})" if args.records is not None else "")
                          + (f". Fix: a --records range below {n}." if n and args.records is not None
                             else ". Fix: --split all."))
    # cut as the trainer cuts them (the same --max-seq-len): it finds them in the cache
    return [r["input_ids"][:args.max_seq_len] for r in records]


def _run_cli(args):
    sequences = check_cli(args)
    with lock.hold(args.out):
        model, tok, target = load_cli_target(args)
        if sequences is None:
            sequences = [chat_ids(tok, p) for p in load_train_prompts(args.prompts)]
        taps = _tap_layers(args) if args.taps else None
        extract_features(model, sequences, args.out, dataclasses.replace(
            settings_of(args), tap_layers=taps, taps_dtype=TAPS_DTYPES[args.store_dtype], target=target))


def settings_of(args) -> ExtractionSettings:
    """The extraction's settings from the flags given (:class:`ExtractionSettings`' defaults for the rest)."""
    return ExtractionSettings(**given_config_flags(args, ExtractionSettings))


def _tap_layers(args) -> list[int]:
    """--tap-layers as given: ``2 15 27`` (train's form) or ``2,15,27``."""
    return validate.int_list(",".join(args.taps), "--tap-layers", "2 15 27")
