"""``peagle-lab generate``: one chat prompt through the speculative loop, with statistics and ``--check``."""

from __future__ import annotations

import json
import sys

from .. import validate
from ..bench.lossless import lossless_note, regime_label
from ..decoding.divergence import first_divergence, is_lossless, lossless_regime
from ..decoding.draft_sources import HeadDrafter
from ..drafter.heads import check_head_spec, head_for_target
from ..jsonsafe import json_safe
from ..precision import dtype_name
from ..prompts import chat_ids
from ..decoding.sampling import make_generator, Sampling
from ..decoding.speculative import plain_generate, speculative_generate
from ..target_args import TargetPeek, add_target_options, check_target_options, load_cli_target
from ..decoding.target_runner import TargetRunner


def register_cli(sub):
    p = sub.add_parser("generate", help="generate with a P-EAGLE / EAGLE-3 head and print statistics")
    p.add_argument("prompt", help="user message (the target's chat template is applied)")
    p.add_argument("--head", default="parallel",
                   help="head directory or Hugging Face hub id (vLLM's eagle3 layout: ours, speculators', the published "
                        "P-EAGLE heads), or 'parallel' / 'sequential': the head for this target (the shipped one if it "
                        "fits, else the published one when cached, else the one trained here, else an untrained one, "
                        "labelled) (default: parallel)")
    p.add_argument("-k", "--num-speculative-tokens", type=int, default=None, dest="k",
                   help="K drafts per round (default: what the head was trained for)")
    p.add_argument("--mode", choices=["parallel", "sequential"], default=None,
                   help="drafting mode (default: the head's own)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    add_target_options(p)
    p.add_argument("--check", action="store_true", help="also run plain greedy and compare token for token")
    p.add_argument("--json", action="store_true", help="print statistics as JSON only")
    p.set_defaults(func=run)


def check_args(args) -> None:
    """Every argument, the environment, the head (config against weights) and the prompt (tokenized, against the
    target's context, read from its config.json), before the target loads."""
    if args.k is not None:
        validate.num_speculative_tokens(args.k)
    validate.max_new_tokens(args.max_new_tokens)
    validate.temperature(args.temperature)
    validate.top_p(args.top_p)
    validate.seed(args.seed)
    validate.text(args.prompt, "The prompt", "pass a non-empty prompt")
    check_target_options(args)
    head = check_head_spec(args.head)  # a missing head is named by load_head
    peek = TargetPeek(args.target)
    if head.exists():  # and a head given by directory or hub id fits the target, before the target loads
        check_head_spec(args.head, peek.text_config)
    validate.max_new_tokens(args.max_new_tokens, peek.context)
    validate.prompt_length(len(chat_ids(peek.tokenizer, args.prompt)), args.max_new_tokens, peek.context)


def run(args):
    check_args(args)
    model, tok, target = load_cli_target(args)
    head, info = head_for_target(args.head, model, tokenizer=tok, target=target, announce=True)
    if info["note"]:
        print(f"[peagle-lab] {info['note']}", file=sys.stderr)
    k = args.k if args.k is not None else head.config.num_speculative_tokens
    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    prompt = chat_ids(tok, args.prompt)
    validate.prompt_length(len(prompt), args.max_new_tokens, getattr(model.config, "max_position_embeddings", None))
    sampling = Sampling(args.temperature, args.top_p)
    gen = make_generator(runner.device, args.seed)  # on the target's device: a CPU generator cannot draw on CUDA
    drafter = HeadDrafter(head, args.mode)
    for note in drafter.notes(k):
        print(f"[peagle-lab] {note}", file=sys.stderr)
    res = speculative_generate(runner, drafter, prompt, k, args.max_new_tokens, eos_ids=tok.eos_token_id,
                               sampling=sampling, gen=gen)
    report = {"head": info["source"], "mode": args.mode or head.config.mode, "dtype": dtype_name(model.dtype),
              "tokens_per_s": round(res.tokens_per_s, 2),
              "seconds": round(res.seconds, 3), **res.stats.as_dict()}
    if args.check:
        if not sampling.greedy:
            print("--check compares greedy outputs: ignored with temperature > 0")
        else:
            base = plain_generate(runner, prompt, args.max_new_tokens, eos_ids=tok.eos_token_id)
            div = first_divergence(res.tokens, base, model.dtype, runner.device)
            regime = lossless_regime(model.dtype, runner.device)
            report["identical_to_plain_greedy"] = base.tokens == res.tokens
            report["lossless_regime"] = regime
            report["divergence"] = div.as_dict() if div else None
            report["lossless"] = is_lossless([div], regime)
            report["lossless_note"] = lossless_note(regime, 1, [div.as_dict()] if div else [],
                                                     regime_label(model.dtype, runner.device))
            report["plain_tokens_per_s"] = round(base.tokens_per_s, 2)
            report["speedup_vs_plain"] = round(base.seconds / res.seconds, 3)
    if not args.json:
        print(tok.decode(res.tokens, skip_special_tokens=True))
        print("-" * 60)
    # strict JSON: a slot never reached has no acceptance rate (NaN in the statistics) -> null
    print(json.dumps(json_safe(report), indent=None if args.json else 2, allow_nan=False))
    if args.check and sampling.greedy and not report["lossless"]:
        return 1
    return 0
