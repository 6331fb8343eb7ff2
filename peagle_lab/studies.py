"""Three equal-budget studies, each a question users ask, answered by short training runs of the recipe runner
(:func:`peagle_lab.recipe.run_recipe`) with two seeds per setting, so that every difference is read against the
run-to-run noise:

- ``mask``: which stand-in the parallel slots 2..K get (learned ``mask_hidden`` and mask embedding, as P-EAGLE,
  against zeros, a copy of the context hidden state, a frozen random vector, a frozen existing token embedding);
- ``storage``: the target's taps stored in bfloat16 (half the disk) against float32, the same sequences;
- ``self-distill``: the same prompts (functions of the Python standard library) answered by people (the library's
  source) against answered by the target itself (:func:`peagle_lab.data.distill`), scored on held-out prompts
  of the same kind answered by the target at inference, as they are when serving.

Every run has the same budget in optimizer steps (tokens seen), not in seconds, so a loaded machine changes the
time a study takes and not its result. ``peagle-lab study NAME --out DIR`` runs one (resumable: finished runs are
kept in ``DIR/runs.jsonl``).
"""

from __future__ import annotations

import torch

from .data import distill, read_distilled, select_split
from .errors import PeagleError
from .human_answers import human_records, python_version, stdlib_tasks
from .prompts import load_scale_records
from .recipe import recipe_markdown, run_recipe
from .target_args import add_target_options, load_cli_target
from .training import machine_info, prepare_sequences

SEEDS = (0, 1)
MASK_VARIANTS = {
    "learned (P-EAGLE)": dict(mask_hidden="learned", mask_embedding="learned"),
    "zeros": dict(mask_hidden="zeros"),
    "copy of h_context": dict(mask_hidden="context"),
    "random": dict(mask_hidden="random"),
    "frozen mask embedding": dict(mask_embedding="frozen"),
}
STORAGE_VARIANTS = {"float32 taps": dict(data="float32"), "bfloat16 taps": dict(data="bfloat16")}
SELF_DISTILL_VARIANTS = {"target's own answers": dict(data="target"), "human answers": dict(data="human")}
# equal-token budget: 160 steps x 512 tokens (about 82k tokens, minutes per run on one CPU core)
BASE = dict(schedule="steps", steps=160, time_budget_s=None, draft_vocab_size=4096, lr=3e-3, warmup_steps=16)
STUDIES = ("mask", "storage", "self-distill")


def with_seeds(variants: dict, seeds=SEEDS) -> dict:
    """Every variant once per seed: ``"name (seed s)"``."""
    return {f"{name} (seed {s})": dict(change, seed=s) for name, change in variants.items() for s in seeds}


def _bf16_copy(seqs: list[dict]) -> list[dict]:
    # what a bfloat16 shard gives back: the float32 taps rounded to bfloat16 (read back as float32)
    return [dict(s, taps=s["taps"].to(torch.bfloat16).to(torch.float32)) for s in seqs]


def study_inputs(name: str, model, tokenizer, num_sequences: int, distilled: str, work_dir, val_prompts: int,
                 progress: bool = True) -> tuple[dict, list, dict]:
    """``(data sets, held-out prompts, variants)`` of study ``name``."""
    if name not in STUDIES:
        raise PeagleError(f"unknown study {name!r}. Fix: one of {list(STUDIES)}.")
    if name in ("mask", "storage"):
        _, records = read_distilled(distilled)
        records, _ = select_split(records, "train")
        seqs = prepare_sequences(model, records[:num_sequences], progress=progress)  # float32 taps, online
        data = {"float32": seqs} if name == "mask" else {"float32": seqs, "bfloat16": _bf16_copy(seqs)}
        return data, load_scale_records("val")[:val_prompts], with_seeds(
            MASK_VARIANTS if name == "mask" else STORAGE_VARIANTS)
    tasks = stdlib_tasks()
    train = [t for t in tasks if t["split"] == "train"][:num_sequences]
    val = [t["prompt"] for t in tasks if t["split"] == "val"][:val_prompts]
    answers = distill(model, tokenizer, [t["prompt"] for t in train], work_dir / "stdlib-target.jsonl",
                      max_new_tokens=160, batch_size=16, progress=progress)
    human = human_records(tokenizer, train, max_answer_tokens=160)
    data = {"target": prepare_sequences(model, answers, progress=progress),
            "human": prepare_sequences(model, human, progress=progress)}
    return data, val, with_seeds(SELF_DISTILL_VARIANTS)


def register_cli(sub):
    p = sub.add_parser("study", help="an equal-budget study with two seeds per setting: mask stand-ins, bf16 vs "
                                     "fp32 storage, self-distilled vs human answers")
    p.add_argument("name", choices=STUDIES)
    p.add_argument("--out", required=True, help="results directory (runs.jsonl, RECIPE.md); resumes")
    p.add_argument("--data", default="data/distill/smollm2-135m-scale.jsonl",
                   help="distilled sequences for the mask and storage studies (their train split)")
    p.add_argument("--num-sequences", type=int, default=400)
    p.add_argument("--steps", type=int, default=BASE["steps"], help="optimizer steps per run (equal budget)")
    p.add_argument("-K", type=int, default=7, help="draft length scored (default 7)")
    p.add_argument("--val-prompts", type=int, default=16, help="held-out prompts scored")
    p.add_argument("--max-new-tokens", type=int, default=64)
    add_target_options(p)
    p.set_defaults(func=_run_cli)


def _run_cli(args):
    from pathlib import Path

    model, tok, _ = load_cli_target(args)
    out = Path(args.out)
    data, val, variants = study_inputs(args.name, model, tok, args.num_sequences, args.data, out, args.val_prompts)
    machine = dict(machine_info(model), python=python_version(), study=args.name,
                   sequences={k: len(v) for k, v in data.items()},
                   tokens={k: sum(len(s["input_ids"]) for s in v) for k, v in data.items()})
    runs = run_recipe(model, tok, data, val, out, k=args.K, max_new_tokens=args.max_new_tokens, variants=variants,
                      base=dict(BASE, steps=args.steps), machine=machine)
    print(recipe_markdown(runs))
