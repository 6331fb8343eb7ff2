"""The training recipe, by experiment: short equal-budget runs judged by held-out acceptance length, and the
learning curve (acceptance length against training tokens seen) from a long run's snapshots.

Every run trains a P-EAGLE head for the same wall-clock budget on the same sequences (the train split of the
scale mix), changing one setting from the baseline, and is scored by greedy speculative decoding of the held-out
prompts (split ``val``: never trained on) at ``K``. Training accuracy is logged but does not decide. Results go
to ``runs.jsonl`` (one line per finished run, rewritten atomically, so an interrupted sweep keeps what it
finished and resumes at the next run) and ``RECIPE.md``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..atomic import write_json, write_text
from ..drafter import PEagleDrafter
from ..errors import PeagleError
from ..hardware import load_average
from ..prompts import load_scale_records
from ..training import EvalSettings, TrainConfig, evaluate_head, train_head
from .heldout import depth_accuracy

# the shipped heads' recipe: small steps (512 tokens) so that short runs still take hundreds of steps
BASELINE = dict(layers=1, draft_vocab_size=8192, lr=3e-3, num_depths=8, freeze_lm_head=False, batch_tokens=512,
                row_tokens=512)
VARIANTS = {  # the order they run in: the most telling first, the slowest last
    "baseline": {},
    "2 layers": dict(layers=2),
    "frozen lm_head + norm": dict(freeze_lm_head=True),
    "draft vocab 16k": dict(draft_vocab_size=16384),
    "lr 6e-3": dict(lr=6e-3),
    "baseline (seed 1)": dict(seed=1),  # run-to-run noise
    "draft vocab 4k": dict(draft_vocab_size=4096),
    "lr 1.5e-3": dict(lr=1.5e-3),
    "10 depths": dict(num_depths=10),
    "4 layers": dict(layers=4),
}
RUNS_FILE, TABLE_FILE, CURVE_FILE = "runs.jsonl", "RECIPE.md", "curve.json"


def read_runs(out_dir) -> list[dict]:
    path = Path(out_dir) / RUNS_FILE
    if not path.exists():
        return []
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except json.JSONDecodeError as e:
        raise PeagleError(f"{path} is damaged ({e}). Fix: delete its last line (or the file) and run again.") from e


@dataclass(frozen=True)
class Scoring:
    """What every recipe run and curve point is scored by: greedy acceptance length at ``k`` on the held-out
    ``prompts``, ``max_new_tokens`` each; ``suite`` names the prompt set in the records (``val``: the first of the
    mix's val split; ``chat`` / ``code``: the bench's suites)."""

    prompts: list
    k: int = 7
    max_new_tokens: int = 64
    suite: str = "val"

    def evaluate(self, model, tokenizer, head, reference: dict, progress: bool) -> dict:
        """:func:`evaluate_head` at ``k`` (``reference``: plain greedy outputs shared across heads)."""
        return evaluate_head(model, tokenizer, head, self.prompts,
                             EvalSettings(ks=(self.k,), max_new_tokens=self.max_new_tokens), reference=reference,
                             progress=progress)


@dataclass(frozen=True)
class RecipePlan:
    """The runs of a recipe sweep: ``variants`` (name -> the settings it changes; default :data:`VARIANTS`), each
    trained for ``budget_s`` seconds on the baseline settings overridden by ``base``, the budget included
    (``schedule="steps", steps=N`` for an equal-token budget instead of equal time). ``held_out``: sequences never
    trained on (prepared like the training ones); each run then also records its per-depth accuracy on them
    (:func:`peagle_lab.training.depth_accuracy`)."""

    budget_s: float = 240.0
    variants: dict | None = None
    base: dict | None = None
    held_out: list | None = None


def run_recipe(model, tokenizer, sequences, scoring: Scoring, out_dir, plan: RecipePlan | None = None,
               machine: dict | None = None, progress: bool = True) -> list[dict]:
    """Train and score (``scoring``) every run of ``plan`` (:class:`RecipePlan`; its defaults when ``None``) not
    yet in ``out_dir/runs.jsonl``; returns all runs. ``machine``: the environment, recorded with each run.

    ``sequences``: the training sequences, or ``{data name: sequences}`` when the variants compare training sets
    (a variant's ``data`` key names its set; the first set is the default).
    """

    out_dir = Path(out_dir)
    plan = plan or RecipePlan()
    variants = VARIANTS if plan.variants is None else plan.variants
    base = dict(BASELINE, **(plan.base or {}))
    data_sets = sequences if isinstance(sequences, dict) else {"default": sequences}
    held_out = plan.held_out
    k = scoring.k
    runs = read_runs(out_dir)
    done = {r["name"] for r in runs}
    reference: dict = {}  # plain greedy outputs, shared by every run's evaluation
    for name, change in variants.items():
        if name in done:
            continue
        settings = dict(base, **change)
        data = settings.pop("data", next(iter(data_sets)))
        if data not in data_sets:
            raise PeagleError(f"run {name!r} asks for training data {data!r}; there are {list(data_sets)}.")
        cfg = TrainConfig(**dict(dict(mode="parallel", steps=10**9, time_budget_s=plan.budget_s, schedule="time",
                                      save_every=0, warmup_steps=20), **settings))
        res = train_head(cfg, model, data_sets[data], tokenizer, progress=progress, verbose=False)
        head = res.head.to(next(model.parameters()).dtype)
        ev = scoring.evaluate(model, tokenizer, head, reference, progress)
        held = depth_accuracy(res.head, held_out) if held_out else None
        acc = [r["acc"] for r in res.log[-10:]]
        runs.append(dict(
            name=name, change=change, settings=settings, data=data, budget_s=cfg.time_budget_s,
            schedule=cfg.schedule, steps=res.steps_done, seconds=round(res.train_time_s, 1),
            tokens_seen=res.info["tokens_seen"], tokens_per_s=res.info["tokens_per_s"],
            autocast=res.info["autocast"], draft_vocab_coverage=round(res.info["draft_vocab_coverage"], 4),
            train_acc_depth0=_mean([a[0] for a in acc]), train_acc_depth1=_mean([a[1] for a in acc if len(a) > 1]),
            k=k, acceptance_length=ev["acceptance_length"][k], per_position=ev["per_position_acceptance"][k],
            val_prompts=len(scoring.prompts), suite=scoring.suite, max_new_tokens=scoring.max_new_tokens,
            divergences=len(ev["divergences"]),
            load_average_1m=(load_average() or [None])[0], machine=machine,
            **(dict(heldout_acc=held["accuracy"], heldout_elements=held["elements"],
                    heldout_sequences=len(held_out)) if held else {})))
        write_text(out_dir / RUNS_FILE, "".join(json.dumps(r) + "\n" for r in runs))
        write_text(out_dir / TABLE_FILE, recipe_markdown(runs))
    return runs


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def _without_seed(change: dict) -> str:
    return json.dumps({k: v for k, v in change.items() if k != "seed"}, sort_keys=True)


def seed_groups(runs: list[dict]) -> dict[str, list[dict]]:
    """Runs that differ only in their seed, grouped (key: the change without the seed)."""
    groups: dict[str, list[dict]] = {}
    for r in runs:
        groups.setdefault(_without_seed(r["change"]), []).append(r)
    return groups


def noise(runs: list[dict]) -> float | None:
    """Run-to-run spread in acceptance length between seeds of one setting (the largest over the settings run
    with several seeds): differences below it are not evidence."""
    spreads = [max(r["acceptance_length"] for r in g) - min(r["acceptance_length"] for r in g)
               for g in seed_groups(runs).values() if len(g) >= 2]
    return round(max(spreads), 4) if spreads else None


def recipe_markdown(runs: list[dict]) -> str:
    if not runs:
        return "# Recipe experiments\n\nNo runs yet.\n"
    r0 = runs[0]
    m = r0.get("machine") or {}
    budget = (f"{r0['steps']} optimizer steps ({r0['tokens_seen']:,} tokens)" if r0.get("schedule") == "steps"
              else f"{r0['budget_s']:.0f} s")
    lines = ["# Recipe experiments (P-EAGLE head, embedded target)", "",
             f"Each run: {budget} of training on the train split, scored by greedy acceptance length "
             f"at K={r0['k']} on {r0['val_prompts']} held-out prompts x {r0['max_new_tokens']} new tokens. "
             f"Host {m.get('host')}, {m.get('torch_threads')} thread(s), training precision {r0['autocast']}. "
             f"Baseline: {json.dumps(BASELINE)}.", "",
             "| run | change | steps | tokens seen | tokens/s | draft vocab coverage | train acc d0 / d1 | held-out AL "
             "| per position |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        pp = ", ".join("-" if x is None else f"{x:.2f}" for x in r["per_position"][:4])
        lines.append(f"| {r['name']} | {json.dumps(r['change']) if r['change'] else '-'} | {r['steps']} | "
                     f"{r['tokens_seen']:,} | {r['tokens_per_s']:.0f} | {r['draft_vocab_coverage']:.3f} | "
                     f"{r['train_acc_depth0']} / "
                     f"{r['train_acc_depth1']} | {r['acceptance_length']:.3f} | {pp} |")
    n = noise(runs)
    if n is not None:
        lines += ["", f"Run-to-run noise (the largest spread between seeds of one setting): {n:.3f} in acceptance "
                      "length."]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ the curve
def learning_curve(model, tokenizer, snapshot_dirs, scoring: Scoring, out_path, progress: bool = True,
                   extra_points: list[dict] | None = None) -> list[dict]:
    """Held-out acceptance length (``scoring``) of each snapshot (``tokens-N`` directories, N = training tokens
    seen), resumable: points already in ``out_path`` are kept."""

    out_path = Path(out_path)
    points = json.loads(out_path.read_text())["points"] if out_path.exists() else []
    have = {(p["run"], p["snapshot"]) for p in points}
    reference: dict = {}
    k = scoring.k
    dev, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    for d in sorted(Path(s) for s in snapshot_dirs):
        owner = d.parent.parent  # HEAD/checkpoint/snapshots/tokens-N, or STATE_DIR/snapshots/tokens-N
        run = owner.parent.name if owner.name == "checkpoint" else owner.name
        if (run, d.name) in have:
            continue
        head = PEagleDrafter.from_pretrained(d, target=model, device=dev, dtype=dtype)
        ev = scoring.evaluate(model, tokenizer, head, reference, progress)
        points.append(dict(snapshot=d.name, run=run, mode=head.config.mode,
                           tokens_seen=int(d.name.split("-")[1]), acceptance_length=ev["acceptance_length"][k],
                           per_position=ev["per_position_acceptance"][k]))
        points.sort(key=lambda p: (p["mode"], p["tokens_seen"]))
        write_json(out_path, dict(k=k, val_prompts=len(scoring.prompts), max_new_tokens=scoring.max_new_tokens,
                                  points=points + (extra_points or [])), indent=1)
    return points


def extrapolate(points: list[dict], target_al: float) -> float | None:
    """Tokens at which a log-linear fit ``AL = a + b ln(tokens)`` through ``points`` reaches ``target_al``
    (``None`` when the curve is not rising). A rough budget, stated as such."""
    pts = [(math.log(p["tokens_seen"]), p["acceptance_length"]) for p in points if p["tokens_seen"] > 0]
    if len(pts) < 3:
        return None
    n = len(pts)
    mx, my = sum(x for x, _ in pts) / n, sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    b = sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else 0.0
    if b <= 0:
        return None
    return math.exp(mx + (target_al - my) / b)


# ------------------------------------------------------------------------------------------ scoring
def scored_prompts(suite: str, n: int) -> list:
    """The held-out prompts a recipe run or curve point is scored on (see ``--suite``)."""
    from ..prompts import chat_records, humaneval_prompts

    if suite == "code":
        return humaneval_prompts(n)
    return chat_records(n) if suite == "chat" else load_scale_records("val")[:n]
