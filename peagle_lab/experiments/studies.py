"""Three equal-budget studies, each a question users ask, answered by short training runs of the recipe runner
(:func:`peagle_lab.experiments.recipe.run_recipe`) with two seeds per setting, so that every difference is read against the
run-to-run noise:

- ``mask``: which stand-in the parallel slots 2..K get (learned ``mask_hidden`` and mask embedding, as P-EAGLE,
  against zeros, a copy of the context hidden state, a frozen random vector, a frozen existing token embedding);
- ``storage``: the target's taps stored in bfloat16 (half the disk); its float32 counterpart is the mask study's
  ``learned (P-EAGLE)`` runs (same sequences, settings and seeds);
- ``soft-targets``: ``--loss ce`` (the target's greedy token) against ``--loss kl`` (its top-32 logits restricted
  to the draft vocabulary, as EAGLE-3, SpecForge and speculators train), float32, also scored by per-depth
  accuracy on distilled sequences of the held-out prompts;
- ``deep-slots``: what feeds the deep slots: COD's retention (depth d trains on max(0.7^d, 0.2) of the anchors,
  as speculators) against every anchor at every depth, and the acceptance-aligned ``--loss lk`` against ``--loss
  ce``, float32, also scored by per-depth accuracy on distilled sequences of the held-out prompts;
- ``self-distill``: the same prompts (functions of the Python standard library) answered by people (the library's
  source) against answered by the target itself (:func:`peagle_lab.distill.data.distill`), scored on held-out
  prompts of the same kind answered by the target at inference, as they are when serving.

Every run has the same budget in optimizer steps (tokens seen), not in seconds, so a loaded machine changes the
time a study takes and not its result. ``peagle-lab study NAME --out DIR`` runs one (resumable: finished runs are
kept in ``DIR/runs.jsonl``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..distill.data import DistillSettings, distill, read_distilled, select_split
from ..errors import PeagleError
from ..workbook.human_answers import human_records, stdlib_tasks
from ..prompts import load_scale_records
from ..training import prepare_sequences

SEEDS = (0, 1)
MASK_VARIANTS = {
    "learned (P-EAGLE)": dict(mask_hidden="learned", mask_embedding="learned"),
    "zeros": dict(mask_hidden="zeros"),
    "copy of h_context": dict(mask_hidden="context"),
    "random": dict(mask_hidden="random"),
    "frozen mask embedding": dict(mask_embedding="frozen"),
}
# the float32 arm of the storage question is the mask study's "learned (P-EAGLE)": the same sequences, settings and
# seeds with float32 taps (training is deterministic on one thread), so it is not trained twice
STORAGE_VARIANTS = {"bfloat16 taps": dict(data="bfloat16")}
SELF_DISTILL_VARIANTS = {"target's own answers": dict(data="target"), "human answers": dict(data="human")}
# hard labels (the default) against the reference trainers' soft targets: the target's top-k logits restricted to
# the draft vocabulary; float32 training so that the two objectives differ in nothing else
SOFT_TOPK = 32
SOFT_TARGET_VARIANTS = {"ce (greedy labels)": dict(loss="ce", autocast="float32"),
                        f"kl (top-{SOFT_TOPK} soft targets)": dict(loss="kl", topk_logits=SOFT_TOPK,
                                                                    autocast="float32")}
# what feeds the deep slots: the default (COD 0.7 / 0.2, greedy labels) against keeping every anchor at every
# depth, and against the acceptance-aligned loss; float32 so that the settings differ in nothing else
DEEP_SLOT_VARIANTS = {"ce, COD 0.7 / 0.2 (default)": dict(loss="ce", autocast="float32"),
                      "ce, every anchor at every depth": dict(loss="ce", cod_ratio=1.0, cod_min_ratio=1.0,
                                                              autocast="float32"),
                      "lk, COD 0.7 / 0.2": dict(loss="lk", autocast="float32")}
HELD_OUT_SEQUENCES = 40  # distilled val-split sequences scored for per-depth accuracy (soft-targets study)
# equal-token budget: 160 steps x 512 tokens (about 82k tokens, minutes per run on one CPU core)
BASE = dict(schedule="steps", steps=160, time_budget_s=None, draft_vocab_size=4096, lr=3e-3, warmup_steps=16)
STUDIES = ("mask", "storage", "self-distill", "soft-targets", "deep-slots")
# the studies also scored by per-depth accuracy on distilled sequences of held-out prompts
HELD_OUT_STUDIES = ("soft-targets", "deep-slots")


def with_seeds(variants: dict, seeds=SEEDS, seed_major: bool = False) -> dict:
    """Every variant once per seed: ``"name (seed s)"``; ``seed_major``: every variant of the first seed first
    (a study cut short then still compares every variant)."""
    if seed_major:
        return {f"{name} (seed {s})": dict(change, seed=s) for s in seeds for name, change in variants.items()}
    return {f"{name} (seed {s})": dict(change, seed=s) for name, change in variants.items() for s in seeds}


def _bf16_copy(seqs: list[dict]) -> list[dict]:
    # what a bfloat16 shard gives back: the float32 taps rounded to bfloat16 (read back as float32)
    return [dict(s, taps=s["taps"].to(torch.bfloat16).to(torch.float32)) for s in seqs]


@dataclass(frozen=True)
class StudyData:
    """Where a study's sequences and held-out prompts come from: ``distilled`` (the distilled file whose train split
    the mask, storage and soft-targets studies train on), how many training sequences (``num_sequences``) and
    held-out prompts (``val_prompts``) it takes, and ``features_dir`` (a feature cache for the soft-targets study's
    sequences, see :func:`peagle_lab.training.prepare_sequences`; None: online, in memory)."""

    distilled: str
    num_sequences: int
    val_prompts: int
    features_dir: str | None = None


def study_inputs(name: str, model, tokenizer, sources: StudyData, work_dir, progress: bool = True,
                 target: str = "") -> tuple[dict, list, dict]:
    """``(data sets, held-out prompts, variants)`` of study ``name``, from ``sources``; the self-distill study
    writes the target's answers under ``work_dir``."""
    if name not in STUDIES:
        raise PeagleError(f"unknown study {name!r}. Fix: one of {list(STUDIES)}.")
    n, val_prompts = sources.num_sequences, sources.val_prompts
    if name in HELD_OUT_STUDIES:
        _, records = read_distilled(sources.distilled)
        records, _ = select_split(records, "train")
        seqs = prepare_sequences(model, records[:n], progress=progress, topk=SOFT_TOPK if name == "soft-targets"
                                 else 0, features_dir=sources.features_dir)
        if sources.features_dir is not None:  # the cache stores bf16 taps: train on them as float32
            seqs = [dict(s, taps=s["taps"].float()) for s in seqs]
        variants = SOFT_TARGET_VARIANTS if name == "soft-targets" else DEEP_SLOT_VARIANTS
        return {"float32": seqs}, load_scale_records("val")[:val_prompts], with_seeds(variants, seed_major=True)
    if name in ("mask", "storage"):
        _, records = read_distilled(sources.distilled)
        records, _ = select_split(records, "train")
        seqs = prepare_sequences(model, records[:n], progress=progress)  # float32 taps, online
        data = {"float32": seqs} if name == "mask" else {"bfloat16": _bf16_copy(seqs)}
        return data, load_scale_records("val")[:val_prompts], with_seeds(
            MASK_VARIANTS if name == "mask" else STORAGE_VARIANTS)
    tasks = stdlib_tasks()
    train = [t for t in tasks if t["split"] == "train"][:n]
    val = [t["prompt"] for t in tasks if t["split"] == "val"][:val_prompts]
    answers = distill(model, tokenizer, [t["prompt"] for t in train], work_dir / "stdlib-target.jsonl",
                      DistillSettings(max_new_tokens=160, batch_size=16, target=target), progress=progress)
    human = human_records(tokenizer, train, max_answer_tokens=160)
    data = {"target": prepare_sequences(model, answers, progress=progress),
            "human": prepare_sequences(model, human, progress=progress)}
    return data, val, with_seeds(SELF_DISTILL_VARIANTS)


# ------------------------------------------------------------------------------------------ reading a study
def committed(name: str) -> tuple[str | None, list[dict]]:
    """``(host, runs)`` of study ``name`` committed under ``<data>/recipe/<host>/<name>/`` (the last host in
    name order that has it; ``(None, [])`` when none has)."""
    from .recipe import read_runs
    from ..settings import data_dir

    hosts = sorted(p.parent.parent.name for p in (data_dir() / "recipe").glob(f"*/{name}/runs.jsonl"))
    return (hosts[-1], read_runs(data_dir() / "recipe" / hosts[-1] / name)) if hosts else (None, [])


def summarize(runs: list[dict]) -> list[dict]:
    """One row per setting (its seeds pooled): mean held-out acceptance length, the seeds' spread, tokens seen,
    mean per-position acceptance of slots 1-3, in the order the settings ran."""
    from .recipe import seed_groups

    rows = []
    for group in seed_groups(runs).values():
        als = [r["acceptance_length"] for r in group]
        pos = [[p for p in (r["per_position"][j] for r in group) if p is not None] for j in range(3)]
        rows.append(dict(setting=group[0]["name"].rsplit(" (seed", 1)[0], seeds=len(group),
                         acceptance_length=round(sum(als) / len(als), 4), seed_spread=round(max(als) - min(als), 4),
                         tokens_seen=round(sum(r["tokens_seen"] for r in group) / len(group)),
                         slots_1_3=[round(sum(p) / len(p), 3) if p else None for p in pos],
                         heldout_acc=[_mean_or_none([r["heldout_acc"][d] for r in group if r.get("heldout_acc")])
                                      for d in range(2)]))
    return rows


COMMITTED_STUDIES = ("mask", "storage", "self-distill")


def largest_seed_spread(names=COMMITTED_STUDIES) -> float:
    """The largest gap between the seeds of one setting over the committed studies ``names``: the course's
    yardstick for an acceptance-length gap between heads (a smaller gap is read as a tie). 0.0 when none is
    committed."""
    from .recipe import noise

    return max((n for name in names if (n := noise(committed(name)[1])) is not None), default=0.0)


def _mean_or_none(xs):
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def summary_markdown(runs: list[dict]) -> str:
    """The summary as a table, with the study's largest seed spread (:func:`largest_seed_spread` is the largest over
    every committed study)."""
    from .recipe import noise

    rows = summarize(runs)
    if not rows:
        return "No runs committed for this study yet."
    r0 = runs[0]
    held = any(r["heldout_acc"][0] is not None for r in rows)
    lines = ["| setting | seeds | held-out AL (mean) | seed spread | tokens seen | P(accept) slots 1 / 2 / 3 |"
             + (" held-out acc depth 0 / 1 |" if held else ""), "|---|---|---|---|---|---|" + ("---|" if held else "")]
    for r in rows:
        pp = " / ".join("-" if x is None else f"{x:.2f}" for x in r["slots_1_3"])
        ha = " / ".join("-" if x is None else f"{x:.3f}" for x in r["heldout_acc"])
        lines.append(f"| {r['setting']} | {r['seeds']} | {r['acceptance_length']:.3f} | {r['seed_spread']:.3f} | "
                     f"{r['tokens_seen']:,} | {pp} |" + (f" {ha} |" if held else ""))
    m = r0.get("machine") or {}
    lines += ["", f"K={r0['k']}, {r0['val_prompts']} held-out prompts x {r0['max_new_tokens']} new tokens, "
                  f"{r0['steps']} optimizer steps per run, training precision {r0['autocast']}, host {m.get('host')}; "
                  f"largest seed spread in this study {noise(runs) or 0:.3f}."]
    return "\n".join(lines)


def separated(a: dict, b: dict) -> tuple[float, bool]:
    """The gap in mean AL of summary row ``a`` over ``b``, and whether it exceeds both rows' seed spreads (compared
    at the three decimals printed)."""
    gap = a["acceptance_length"] - b["acceptance_length"]
    return gap, round(abs(gap), 3) > round(max(a["seed_spread"], b["seed_spread"]), 3)


def pairwise_lines(rows: list[dict], noise: float) -> list[str]:
    """Every pair of settings (:func:`summarize` rows), the higher AL first, read by the course's rule: a gap within
    both seed spreads is no order; beyond them but within ``noise`` (the largest spread of any committed study),
    suggestive; beyond that too, firm."""
    firm = round(noise, 3)
    ranked = sorted(rows, key=lambda r: -r["acceptance_length"])
    out = []
    for i, hi in enumerate(ranked):
        for lo in ranked[i + 1:]:
            gap, apart = separated(hi, lo)
            reading = ("within them" if not apart else
                       f"beyond them {'and' if round(abs(gap), 3) > firm else 'but within'} the studies' {noise:.3f}")
            out.append(f"{hi['setting']:>21} over {lo['setting']:<21} by {gap:.3f}, seed spreads "
                       f"{hi['seed_spread']:.3f} and {lo['seed_spread']:.3f}: {reading}")
    return out


def reach_lines(rows: list[dict], runs: list[dict]) -> list[str]:
    """Per setting, slots 1-3's acceptance rates and an upper bound on the rounds per run that reach each slot: all
    rounds (the run's tokens over its AL, at most), times the rate of each slot before."""
    r0, out = runs[0], []
    for r in rows:
        reach = [r0["val_prompts"] * r0["max_new_tokens"] / r["acceptance_length"]]
        for p in r["slots_1_3"][:2]:
            reach.append(reach[-1] * (p or 0.0))
        out.append(f"{r['setting']:<21} slots 1 / 2 / 3 accepted at "
                   f"{' / '.join('-' if p is None else f'{p:.2f}' for p in r['slots_1_3'])}, "
                   f"reached in at most about {' / '.join(f'{x:.0f}' for x in reach)} rounds per run")
    return out
