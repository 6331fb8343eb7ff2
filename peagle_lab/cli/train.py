"""``peagle-lab train``: the command's options (:func:`register_cli`) and the run it drives (:func:`_run_cli`:
settings, data, features, training, optional evaluation, the training record)."""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
import time
import typing
from dataclasses import asdict
from pathlib import Path

import torch

from .. import lock, validate
from ..flags import add_config_flags, given_config_flags
from ..distill.data import read_distilled, select_split
from ..drafter import PEagleDrafter
from ..errors import PeagleError
from ..training.lineage import cumulative, head_config, history_of, seen_before, summary
from ..models import target_name
from ..precision import dtype_name
from ..prompts import humaneval_prompts
from ..settings import display_path, seed_everything
from ..training.config import TrainConfig, check_config_fits_target
from ..training.evaluate import EvalSettings, evaluate_head
from ..environment import environment
from ..training.records import final_accuracy, write_training_record
from ..training.sequences import OnlineFeatures, check_data_target, extract_missing, prepare_sequences
from ..features.taps import check_tap_layers, default_tap_layers
from ..training.state import STATE_FILE, check_resume_config, read_state
from ..training.stream import shard_sequences
from ..training.trainer import Trainer, TrainerOptions, check_target_settings, precision_probe


def register_cli(sub):
    from ..target_args import add_target_options

    p = sub.add_parser("train", help="train a P-EAGLE (parallel) or EAGLE-3 (sequential) drafter head")
    p.add_argument("--data", required=True, help="distilled sequences (JSONL from `peagle-lab distill`)")
    p.add_argument("--num-sequences", type=int, default=None, help="use the first N sequences (default: all)")
    p.add_argument("--records", default=None, metavar="START:END",
                   help="only these records of the split, in prompt order (default all; before --num-sequences): "
                        "fresh slices of a growing distilled file for successive --init-from runs")
    p.add_argument("--split", choices=["train", "val", "all"], default="train",
                   help="prompts of the scale mix to train on (default train: the held-out 5%% never trained on)")
    p.add_argument("--probe-precision", action="store_true",
                   help="first measure training tokens/s in float32 and in bf16 autocast (recorded), then train")
    p.add_argument("--features", default=None,
                   help="feature shard directory (extracted there when missing); default: online, cached in memory")
    p.add_argument("--online-batch-tokens", type=int, default=0, metavar="N",
                   help="online features: padded tokens per target forward (0: one sequence per forward)")
    p.add_argument("--stream", action="store_true",
                   help="read the --features shards as training goes (shuffled by shard and within a window of "
                        "sequences), never all in memory; sequences no complete part holds are extracted into a new part first")
    p.add_argument("--out", required=True, help="head directory to write (config.json + model.safetensors)")
    p.add_argument("--state-dir", default=None, help="training state + log (default: OUT/checkpoint)")
    p.add_argument("--resume", action="store_true", help="continue from the state in --state-dir")
    p.add_argument("--overwrite", action="store_true", help="replace a head or training state already in --out")
    add_config_flags(p, TrainConfig)
    add_target_options(p)
    p.add_argument("--eval-prompts", type=int, default=0,
                   help="prompts of the code suite (HumanEval) to evaluate on afterwards")
    p.add_argument("--eval-val-prompts", type=int, default=0,
                   help="prompts of the chat suite (held-out split of the scale mix: chat, reasoning and code "
                        "questions in turn, as `peagle-lab bench --suite chat`) to evaluate on afterwards")
    p.add_argument("--eval-max-new-tokens", type=int, default=128)
    p.add_argument("--eval-ks", default="1,2,3,4,5,6,7,8")
    p.add_argument("--note", default=None, help="free text recorded in training.json / TRAINING.md")
    p.set_defaults(func=_run_cli)


def config_from_args(args) -> TrainConfig:
    """The run's :class:`TrainConfig`: the flags given, the dataclass defaults for the rest, except three that
    depend on other flags: --layers and --draft-vocab-size default to the --init-from head's (set ones are
    checked against it), --draft-vocab-size 0 is the full target vocabulary, and --schedule defaults to time when
    --time-budget is given."""
    given = given_config_flags(args, TrainConfig)
    if given.get("init_from"):
        src = head_config(given["init_from"])
        given.setdefault("layers", src.num_hidden_layers)
        given.setdefault("draft_vocab_size", src.draft_vocab_size)
    if "draft_vocab_size" in given:
        given["draft_vocab_size"] = given["draft_vocab_size"] or None
    given.setdefault("schedule", "time" if given.get("time_budget_s") else "steps")
    return TrainConfig(**given, target=args.target or target_name())


def check_cli(args):
    """Every argument, the environment, the output folders, the head --init-from continues, the saved state of
    --resume and every distilled record (token ids within the target's vocabulary, read from its config.json),
    before the target's weights load: ``(config, meta, records, held_out)``."""
    from ..drafter.checkpoint import check_head_dir
    from ..target_args import TargetPeek, check_target_options

    cfg = config_from_args(args)
    check_target_options(args)
    validate.positive_int(args.online_batch_tokens, "online_batch_tokens", "--online-batch-tokens", 0)
    if args.num_sequences is not None:
        validate.positive_int(args.num_sequences, "num_sequences", "--num-sequences")
    for name in ("eval_prompts", "eval_val_prompts"):
        validate.positive_int(getattr(args, name), name, "--" + name.replace("_", "-"), 0)
    validate.max_new_tokens(args.eval_max_new_tokens)
    eval_ks(args)
    out, state = _check_paths(args)
    if not args.resume and not args.overwrite:  # never replace work silently
        if (out / "config.json").exists():
            raise PeagleError(f"{out} already holds a head. Fix: --resume to continue its training state, "
                              "--overwrite to replace it, or another --out.")
        if (state / STATE_FILE).exists():
            raise PeagleError(f"{state} already holds a training state. Fix: --resume to continue it, --overwrite "
                              "to start afresh over it, or another --out / --state-dir.")
    if args.resume and (state / STATE_FILE).exists():
        check_resume_config(read_state(state / STATE_FILE).get("config") or {}, asdict(cfg), state / STATE_FILE)
    if args.stream and not args.features:
        raise PeagleError("--stream reads feature shards. Fix: add --features DIR (extract them first with "
                          "`peagle-lab extract --distilled DATA --split train --out DIR/part-train`).")
    peek = TargetPeek(args.target)
    if cfg.init_from:
        check_head_dir(cfg.init_from)
    else:
        check_target_settings(cfg, peek.vocab_size, peek.tokenizer)
    if cfg.tap_layers and peek.num_layers:
        check_tap_layers(cfg.tap_layers, peek.num_layers, "--tap-layers")
    meta, records = read_distilled(args.data, peek.vocab_size)
    records, held_out = select_split(records, args.split)
    if args.records is not None:
        records = records[validate.record_range(args.records)]
    records = records[: args.num_sequences]
    if not records:
        raise PeagleError(f"{args.data} holds no records of the split {args.split!r}. Fix: --split all, or distill "
                          "prompts of that split first.")
    return cfg, meta, records, held_out


def _check_paths(args) -> tuple[Path, Path]:
    """``(--out, --state-dir)``: writable, and neither holds nor lies in an input (--data, --features,
    --init-from)."""
    out = Path(args.out)
    state = Path(args.state_dir) if args.state_dir else out / "checkpoint"
    validate.writable(out, "--out", folder=True)
    validate.writable(state, "--state-dir", folder=True)
    if args.features:
        validate.writable(args.features, "--features", folder=True)
    inputs = [(args.data, "--data"), (args.features, "--features"), (getattr(args, "init_from", None), "--init-from")]
    for path, flag in ((out, "--out"), (state, "--state-dir")):
        for source, source_flag in inputs:
            if source:
                validate.disjoint(source, path, source_flag, flag)
    return out, state


def eval_ks(args) -> list[int]:
    """The K values of --eval-ks (1..64 each)."""

    return [validate.num_speculative_tokens(k) for k in validate.int_list(args.eval_ks, "--eval-ks", "1,2,4,8")]


def _run_cli(args):
    cfg, meta, records, held_out = check_cli(args)
    out = Path(args.out)
    state = Path(args.state_dir) if args.state_dir else out / "checkpoint"
    with lock.hold(out, state):
        _train_locked(args, cfg, meta, records, held_out)


@dataclasses.dataclass
class _TrainingData:
    """The training sequences with their features, and what the record says of them."""

    seqs: typing.Any  # a list of sequences, or the stream of :func:`.stream.shard_sequences`
    lengths: list[int]
    prompt_lens: list[int]
    seconds: float  # to compute or read the features

    @property
    def tokens(self) -> int:
        return sum(self.lengths)


def _train_locked(args, cfg, meta, records, held_out):
    from ..target_args import load_cli_target

    seed_everything(cfg.seed)
    model, tok, target = load_cli_target(args)
    check_data_target(meta, model, args.data)
    check_config_fits_target(cfg, model, target)
    data = _training_data(args, cfg, model, records)
    probe = precision_probe(cfg, model, data.seqs, tok) if args.probe_precision else None
    if probe:
        print(f"[train] tokens/s: float32 {probe['float32']}, bf16 autocast {probe['bfloat16']}")
    trainer = Trainer(cfg, model, data.seqs, tok, TrainerOptions(out_dir=args.out, state_dir=args.state_dir,
                                                                 resume=args.resume, overwrite=args.overwrite))
    print(f"[train] {len(data.seqs)} sequences ({data.tokens:,} tokens; {held_out} records of other splits left "
          f"out), features in {data.seconds:.0f} s; loss {cfg.loss}; autocast {trainer.autocast}; draft vocabulary {trainer.draft_ids.numel()} ids, coverage {trainer.coverage:.4f}; "
          f"mask token id {trainer.mask_token_id}")
    repeated = _records_seen_before(args, cfg, len(records))
    res = trainer.train()
    if not trainer.is_main:
        return
    record = _training_record(args, meta, held_out, data, trainer, res, probe)
    record["data"]["seen_before"] = repeated
    if args.eval_prompts or args.eval_val_prompts:
        _evaluate_saved_head(args, model, tok, record)
    write_training_record(args.out, record)
    print(f"[train] head and TRAINING.md written to {args.out}")


def _records_seen_before(args, cfg, sequences: int) -> list[dict]:
    """The --init-from heads that already trained on records of this run (same file, split, overlapping range),
    said aloud: continuing on them is a further epoch, not fresh data."""
    if not cfg.init_from:
        return []
    this = dict(data=display_path(args.data), split=args.split, records=args.records, sequences=sequences)
    repeated = seen_before(history_of(cfg.init_from), this)
    for r in repeated:
        print(f"[train] records {r['records']} of {this['data']} (split {args.split}) were already trained on by "
              f"{r['head']}: this run is a further epoch over them, not fresh data")
    return repeated


def _training_data(args, cfg, model, records) -> _TrainingData:
    """The training sequences: streamed from the --features shards (``--stream``), else in memory (read from the
    shards, extracted into them first where missing, or computed online)."""
    t0 = time.perf_counter()
    if args.features is None and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        # several processes: each extracts its shard of the features once (bf16 shards on disk) and reads the
        # others', instead of every process computing all of them and keeping them in fp32
        args.features = str(Path(args.state_dir or args.out) / "features")
    topk = cfg.topk_logits if cfg.loss == "kl" else 0
    if args.stream:  # read from the shards as training goes, never all in memory
        L = model.config.num_hidden_layers
        taps = check_tap_layers(cfg.tap_layers or default_tap_layers(L), L)
        extract_missing(model, [list(r["input_ids"])[:cfg.max_seq_len] for r in records], args.features, taps,
                        topk=topk)
        seqs = shard_sequences(args.features, records, cfg.max_seq_len, taps, topk)
        lengths, prompt_lens = seqs.lengths, seqs.prompt_lens
    else:
        # online: batched target forwards; a bf16 target's taps are kept in bf16 (the same values, half the memory)
        dtype = next(model.parameters()).dtype
        seqs = prepare_sequences(model, records, cfg.tap_layers, args.features, max_seq_len=cfg.max_seq_len,
                                 topk=topk, online=OnlineFeatures(dtype if dtype == torch.bfloat16 else torch.float32,
                                                                  args.online_batch_tokens))
        lengths, prompt_lens = [len(s["input_ids"]) for s in seqs], [s["prompt_len"] for s in seqs]
    return _TrainingData(seqs, lengths, prompt_lens, time.perf_counter() - t0)


def _training_record(args, meta, held_out, data: _TrainingData, trainer, res, probe) -> dict:
    """training.json's record of the run (the evaluations are added to it after)."""
    cfg, feature_s = trainer.cfg, data.seconds
    record = dict(
        command="peagle-lab " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        config=asdict(cfg), mask_token_id=trainer.mask_token_id,
        data=dict(file=display_path(args.data), sequences=len(data.seqs), tokens=data.tokens, split=args.split,
                  records=args.records, left_out=held_out,
                  response_tokens=sum(n - p for n, p in zip(data.lengths, data.prompt_lens)),
                  distill=dict((k, meta.get(k)) for k in ("target", "max_new_tokens", "decoding"))),
        features=dict(source=f"offline shards ({display_path(args.features)}"
                      + (", streamed)" if args.stream else ")") if args.features
                      else "online (target forward once, kept in memory)", seconds=round(feature_s, 1),
                      tokens_per_s=round(data.tokens / max(feature_s, 1e-9), 1)),
        tokens_seen=res.info["tokens_seen"], distinct_tokens=data.tokens,
        epochs=round(res.info["tokens_seen"] / max(data.tokens, 1), 2),
        tokens_per_s=res.info["tokens_per_s"], autocast=res.info["autocast"],
        precision_probe=probe,
        draft_vocab=dict(size=int(trainer.draft_ids.numel()), coverage=round(trainer.coverage, 5)),
        steps_done=res.steps_done, train_time_s=round(res.train_time_s, 1), feature_time_s=round(feature_s, 1),
        stopped_by=res.stopped_by, machine=environment(model=trainer.model),
        final_train_accuracy=final_accuracy(res.log), note=args.note, eval=None)
    if args.init_from:
        record["history"] = history_of(args.init_from)
        record["warm_restart"] = ("weights, draft vocabulary and mask token from the --init-from head; optimizer "
                                  "moments and the lr schedule (with warm-up) start afresh")
        record["cumulative"] = cumulative(record["history"], summary(record, args.out))
    return record


def _evaluate_saved_head(args, model, tok, record: dict) -> None:
    """The --eval-prompts (code suite) and --eval-val-prompts (chat suite) evaluations of the saved head, into
    ``record["eval"]`` and ``record["eval_val"]``."""
    from ..prompts import chat_records

    settings = EvalSettings(ks=tuple(eval_ks(args)), max_new_tokens=args.eval_max_new_tokens)
    # evaluate what ships: the saved (bf16) checkpoint, loaded as users load it
    head = PEagleDrafter.from_pretrained(args.out, target=model, device=next(model.parameters()).device,
                                         dtype=next(model.parameters()).dtype)
    sets = [("eval", "code", humaneval_prompts(args.eval_prompts) if args.eval_prompts else None),
            ("eval_val", "chat", chat_records(args.eval_val_prompts) if args.eval_val_prompts else None)]
    for key, suite, prompts in sets:
        if not prompts:
            continue
        t1 = time.perf_counter()
        record[key] = evaluate_head(model, tok, head, prompts, settings)
        record[key]["wall_s"] = round(time.perf_counter() - t1, 1)
        record[key]["dtype"] = dtype_name(next(model.parameters()).dtype)
        record[key]["suite"] = suite
        record[key]["prompt_set"] = "HumanEval" if suite == "code" else "held-out split of the scale mix"
        print(f"[{key}] acceptance length per K:", record[key]["acceptance_length"])
