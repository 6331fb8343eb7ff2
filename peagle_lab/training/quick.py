"""A small head for a target that has none, made on the spot through the same code as every head: distil a few
prompts (:func:`peagle_lab.distill.data.distilled_records`), train briefly (:class:`.trainer.Trainer`), save it where
:func:`peagle_lab.drafter.heads.head_for_target` finds it (``$PEAGLE_RESULTS/heads/<target>/<kind>``). Sizes come from
the environment (``PEAGLE_CI=1``: tiny). The notebooks call :func:`ensure_head` so that each runs on its own,
on any target. Such a head is a demonstration (:data:`ON_THE_SPOT`); ``scripts/gpu_heads.sh`` makes heads worth
timing for a target and installs them in the same place."""

from __future__ import annotations

from dataclasses import dataclass

from ..atomic import atomic_directory
from ..settings import pick


# what a head made on the spot is, said wherever one is made
ON_THE_SPOT = ("an on-the-spot head that shows the mechanics, not a speed-up (expect an acceptance length near "
               "1). A head worth timing: `PEAGLE_TARGET=<this target> bash "
               "scripts/gpu_heads.sh` on a GPU")


@dataclass(frozen=True)
class QuickSizes:
    """How much a head made on the spot gets: distilled prompts (answered in up to 160 new tokens, as the notebooks
    distil them: they share the file), optimizer steps, tokens per step."""

    prompts: int = 64
    steps: int = 60
    batch_tokens: int = 1024

    @classmethod
    def from_env(cls) -> "QuickSizes":
        """The full sizes, or tiny ones under ``PEAGLE_CI=1``."""
        return cls(prompts=pick(64, 8), steps=pick(60, 4), batch_tokens=pick(1024, 256))


def draft_vocab_size_for(model, wanted: int) -> int:
    """``wanted`` draft ids, or the whole vocabulary of a target with fewer."""
    return min(int(wanted), int(model.config.vocab_size))


def reduced_draft_vocab_size(model, wanted: int = 4096) -> int:
    """A draft vocabulary smaller than the target's (``wanted``, at most half the vocabulary): the layout with
    ``d2t`` that vLLM serves from the published heads."""
    return max(1, min(int(wanted), int(model.config.vocab_size) // 2))


def train_quick_head(kind: str, model, tokenizer, target, sizes: QuickSizes | None = None, progress: bool = False):
    """Distil ``sizes.prompts`` prompts with ``model`` and train a 1-layer ``kind`` head on them; save it to
    :func:`peagle_lab.drafter.heads.trained_head_dir` (written beside it, then renamed: a half-trained head is never
    found there). Returns the head directory."""
    from ..distill.data import distilled_records
    from ..drafter.heads import trained_head_dir
    from .config import TrainConfig
    from .sequences import prepare_sequences
    from .trainer import Trainer, TrainerOptions

    sizes = sizes or QuickSizes.from_env()
    records = distilled_records(model, tokenizer, sizes.prompts, str(target), progress=progress)
    seqs = prepare_sequences(model, records, progress=progress)
    cfg = TrainConfig(mode=kind, num_depths=8, layers=1, draft_vocab_size=reduced_draft_vocab_size(model),
                      steps=sizes.steps, warmup_steps=max(1, sizes.steps // 10), lr=2e-3,
                      batch_tokens=sizes.batch_tokens, row_tokens=512, save_every=0, seed=0, target=str(target))
    final = trained_head_dir(target, kind)
    with atomic_directory(final) as staging:
        Trainer(cfg, model, seqs, tokenizer, TrainerOptions(out_dir=staging, progress=progress, verbose=False)).train()
    return final


def ensure_head(kind: str, model, tokenizer, target, sizes: QuickSizes | None = None):
    """``(head, info)`` of :func:`peagle_lab.drafter.heads.head_for_target`; when that has only an untrained head for this
    target, say so in one line, train a small one here (:func:`train_quick_head`) and return that."""
    import time

    from ..drafter.heads import UNTRAINED_NOTE, head_for_target

    head, info = head_for_target(kind, model, tokenizer=tokenizer, target=target)
    if info["origin"] != "fresh":
        if info["note"]:
            print(info["note"])
        head._bench_source = info["source"]  # a benchmark's results name the head they ran
        return head, info
    del head  # the untrained head is not kept beside the trainer (an 8B target's head is 1.6 GB in bf16)
    sizes = sizes or QuickSizes.from_env()
    print(info["note"].replace(UNTRAINED_NOTE, f"training a small {kind} head here ({sizes.prompts} distilled "
                                               f"prompts, {sizes.steps} steps, {sizes.steps * sizes.batch_tokens:,} "
                                               f"tokens): {ON_THE_SPOT}"))
    t0 = time.perf_counter()
    train_quick_head(kind, model, tokenizer, target, sizes)
    head, info = head_for_target(kind, model, tokenizer=tokenizer, target=target, allow_fresh=False)
    print(f"trained in {time.perf_counter() - t0:.0f} s: {info['source']}")
    head._bench_source = info["source"]
    return head, info


def ensure_heads(kinds, model, tokenizer, target, sizes: QuickSizes | None = None) -> dict:
    """``{kind: (head, info)}`` of :func:`ensure_head` for each of ``kinds``, with every missing head trained
    before any head is kept: one trainer at a time and no head beside it (a notebook's peak on a 24 GiB GPU,
    :mod:`peagle_lab.workbook.memory_plan`)."""
    from ..drafter.heads import head_for_target
    from ..memory import release

    for kind in kinds:
        head, info = head_for_target(kind, model, tokenizer=tokenizer, target=target)
        missing = info["origin"] == "fresh"
        del head
        if missing:
            ensure_head(kind, model, tokenizer, target, sizes)  # trains and saves it; the head is dropped here
        release()
    return {kind: ensure_head(kind, model, tokenizer, target, sizes) for kind in kinds}
