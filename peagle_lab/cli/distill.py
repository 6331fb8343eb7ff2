"""``peagle-lab distill``: the command's options, its checks before the target loads, and the run (the target on
vLLM or transformers regenerating the answers to the training prompts, :func:`peagle_lab.distill.data.distill`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from .. import lock, models, validate
from ..distill.data import MAX_SEQ_LEN, DistillSettings, TargetFiles, check_prompt_set, distill, encode_prompts, \
    read_distilled
from ..distill.engines import ENGINES
from ..errors import PeagleError
from ..features.identity import checkpoint_identities
from ..prompts import load_train_records
from ..target_args import TargetPeek, add_target_options, apply_target_options, check_target_options, \
    load_cli_target


def register_cli(sub):
    p = sub.add_parser("distill", help="self-distillation: the target regenerates responses to training prompts")
    p.add_argument("--prompts", type=int, default=None, help="use the first N training prompts (default: all)")
    p.add_argument("--prompts-file", default=None,
                   help="JSONL with a 'prompt' field per line (default: data/prompts/train.jsonl; "
                        "data/prompts/scale.jsonl is the >= 5,000-prompt mix)")
    p.add_argument("--out", required=True,
                   help="output JSONL (resumed when it exists; records of other prompts in it are kept)")
    p.add_argument("--overwrite", action="store_true",
                   help="drop the records already in --out (it says how many) and distill afresh")
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--batch-size", type=int, default=None,
                   help="prompts per engine call, and per atomic rewrite of --out (default: 16 with transformers, "
                        "256 with vLLM, which batches them itself)")
    p.add_argument("--engine", default="auto", choices=ENGINES,
                   help="what writes the answers: vllm (default where it imports; threads on CPU: "
                        "VLLM_CPU_OMP_THREADS_BIND, e.g. 0 or 0-1) or transformers' generate")
    p.add_argument("--system", default=None, help="system message (default: the chat template's own)")
    add_target_options(p)
    p.set_defaults(func=_run_cli)


def check_cli(args) -> list:
    """Every argument, the environment, the output path and every prompt (tokenized with the target's tokenizer,
    against its context), before the target's weights load: the prompts to distill (``args.engine`` becomes the
    engine chosen)."""
    from ..distill.engines import choose_engine

    if args.batch_size is not None:
        validate.positive_int(args.batch_size, "batch_size", "--batch-size")
    if args.prompts is not None:
        validate.positive_int(args.prompts, "prompts", "--prompts")
    check_target_options(args)
    validate.writable(args.out, "--out", folder=False)
    if Path(args.out).is_file() and not args.overwrite:
        read_distilled(args.out)  # a damaged --out is named now, not after the target loads
    recs = load_train_records(args.prompts_file)
    if not recs:
        raise PeagleError(f"{args.prompts_file or 'the prompts file'} holds no prompts. Fix: pass a JSONL file with "
                          "one {\"prompt\": ...} record per line.")
    prompts = recs[: args.prompts]
    peek = TargetPeek(args.target)
    validate.max_new_tokens(args.max_new_tokens, peek.context)
    encode_prompts(peek.tokenizer, prompts, range(len(prompts)), args.system, args.max_new_tokens, peek.context)
    check_prompt_set(prompts, args.prompts_file or "the training prompts")
    args.engine = choose_engine(args.engine)
    return prompts


def _run_cli(args):
    prompts = check_cli(args)
    with lock.hold(args.out):
        _run_locked(args, prompts)


def _run_locked(args, prompts):
    from ..distill.engines import VllmEngine

    batch_size = args.batch_size
    engine_name = args.engine
    engine = None
    if engine_name == "vllm":
        from ..serving.engine import model_arg

        tdir = model_arg(args.target)
        model, tok, target, dtype = _vllm_side_target(args, tdir)
        eos = tok.eos_token_id
        eos_ids = {int(eos)} if isinstance(eos, int) else {int(e) for e in eos}
        engine = VllmEngine(tdir, eos_ids, MAX_SEQ_LEN + args.max_new_tokens, dtype)
        print(f"[peagle-lab] distill: vLLM {engine.version} engine started in {engine.start_s:.0f} s",
              file=sys.stderr)
    else:
        model, tok, target = load_cli_target(args)
    batch_size = batch_size or (256 if engine_name == "vllm" else 16)
    t0 = time.perf_counter()
    before = _response_tokens(args.out)
    out = distill(model, tok, prompts, args.out, DistillSettings(args.max_new_tokens, batch_size, args.system, target),
                  engine=engine, overwrite=args.overwrite)
    dt = time.perf_counter() - t0
    resp = sum(len(r["input_ids"]) - r["prompt_len"] for r in out)
    total = len(read_distilled(args.out)[1])
    others = f" ({total - len(out)} records of other prompts kept)" if total > len(out) else ""
    new = _response_tokens(args.out) - before
    print(f"{len(out)} sequences, {sum(len(r['input_ids']) for r in out):,} tokens ({resp:,} response tokens, "
          f"{sum(r['finished'] for r in out)} ended with EOS) in {args.out}{others}; {dt:.0f} s, "
          f"{new / dt:.0f} new response tokens/s ({engine_name})")


def _checkpoint_dir(tdir: str) -> Path | None:
    """The local directory of the target vLLM loads: ``tdir`` itself, or a hub id's snapshot in the local
    Hugging Face cache (``None`` when it is not there)."""
    if Path(tdir).is_dir():
        return Path(tdir)
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(tdir, local_files_only=True))
    except (OSError, ValueError):  # not cached here, or not a hub id
        return None


def _vllm_side_target(args, tdir: str):
    """What the vLLM path needs of the target, without its weights where its checkpoint allows:
    ``(TargetFiles or the loaded model, tokenizer, target name, dtype)``. The dtype is the one vLLM runs the target
    in on --device (bf16 on a recent GPU, the CPU's choice on a CPU), and the identities are those of such a copy;
    a target that must load to be fingerprinted loads on the CPU."""
    _, dtype = apply_target_options(args)
    local = _checkpoint_dir(tdir)
    ids = checkpoint_identities(local, dtype) if local is not None else None
    if ids is None:
        print(f"[peagle-lab] distill: no safetensors embedding (*embed_tokens.weight) and final norm found in "
              f"{local or tdir}: loading the target on the CPU to fingerprint it", file=sys.stderr)
        model, tok = models.load_target(args.target, device="cpu", dtype=dtype)
        return model, tok, args.target or models.target_name(), dtype
    peek = TargetPeek(args.target)
    if peek.tokenizer.pad_token_id is None:
        peek.tokenizer.pad_token = peek.tokenizer.eos_token
    name = args.target or models.target_name()
    return TargetFiles(peek.config, *ids, float32=dtype == torch.float32), peek.tokenizer, name, dtype


def _response_tokens(path) -> int:
    """The response tokens ``path`` holds (0 for none, or for a damaged file that --overwrite replaces)."""
    if not Path(path).is_file():
        return 0
    try:
        return sum(len(r["input_ids"]) - r["prompt_len"] for r in read_distilled(path)[1])
    except PeagleError:
        return 0
