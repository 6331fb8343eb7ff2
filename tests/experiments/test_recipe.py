"""Recipe experiments and the learning curve: equal budgets, held-out scoring, resumable files, the fit."""

import json
import math

import pytest

from peagle_lab.experiments import recipe
from peagle_lab.errors import PeagleError
from peagle_lab.training import TrainConfig, Trainer

from training_inputs import MASK_ID, quiet, tiny_sequences


def test_recipe_runs_every_variant_once_and_resumes(tiny_llama, byte_tokenizer, tmp_path):
    model = tiny_llama(hidden=32, layers=4, vocab=300)
    seqs = tiny_sequences(model, n=4)
    base = dict(draft_vocab_size=None, mask_token_id=MASK_ID, batch_tokens=48, row_tokens=48, autocast="float32",
                num_depths=4)
    variants = {"baseline": {}, "baseline (seed 1)": dict(seed=1), "2 layers": dict(layers=2)}
    plan = recipe.RecipePlan(budget_s=0.4, variants=variants, base=base)
    runs = recipe.run_recipe(model, byte_tokenizer, seqs, recipe.Scoring(["hi", "abc"], k=3, max_new_tokens=6),
                             tmp_path, plan, progress=False)
    assert [r["name"] for r in runs] == list(variants)
    assert all(r["budget_s"] == 0.4 and r["steps"] >= 1 and 1 <= r["acceptance_length"] <= 4 for r in runs)
    assert runs[2]["settings"]["layers"] == 2 and runs[0]["settings"]["layers"] == 1
    again = recipe.run_recipe(model, byte_tokenizer, seqs, recipe.Scoring(["hi"], k=3), tmp_path, plan,
                              progress=False)
    assert again == runs  # nothing re-run
    text = (tmp_path / "RECIPE.md").read_text()
    assert "| 2 layers |" in text and "Run-to-run noise" in text
    (tmp_path / "runs.jsonl").write_text((tmp_path / "runs.jsonl").read_text() + "{broken\n")
    with pytest.raises(PeagleError, match="damaged"):
        recipe.read_runs(tmp_path)


def test_curve_scores_snapshots_and_keeps_earlier_points(tiny_llama, byte_tokenizer, tmp_path):
    model = tiny_llama(hidden=32, layers=4, vocab=300)
    seqs = tiny_sequences(model, n=4)
    cfg = TrainConfig(num_depths=3, layers=1, draft_vocab_size=None, steps=4, batch_tokens=48, row_tokens=48,
                      mask_token_id=MASK_ID, save_every=0, autocast="float32", snapshot_every_tokens=90)
    Trainer(cfg, model, seqs, options=quiet(out_dir=tmp_path / "head")).train()
    snaps = sorted((tmp_path / "head" / "checkpoint" / "snapshots").iterdir())
    out = tmp_path / "curve.json"
    scoring = recipe.Scoring(["hi"], k=3, max_new_tokens=5)
    pts = recipe.learning_curve(model, byte_tokenizer, snaps[:1], scoring, out, progress=False)
    pts = recipe.learning_curve(model, byte_tokenizer, snaps, scoring, out, progress=False)
    assert [p["snapshot"] for p in pts] == [s.name for s in snaps]
    assert json.loads(out.read_text())["points"] == pts and pts[0]["run"] == "head"


def test_extrapolation_inverts_a_log_linear_curve():
    pts = [dict(tokens_seen=t, acceptance_length=1.0 + 0.25 * math.log(t / 1e4)) for t in (1e4, 1e5, 1e6)]
    assert recipe.extrapolate(pts, 2.0) == pytest.approx(1e4 * math.exp(4), rel=1e-6)
    flat = [dict(tokens_seen=t, acceptance_length=1.3) for t in (1e4, 1e5, 1e6)]
    assert recipe.extrapolate(flat, 2.0) is None


def test_recipe_scores_the_val_split_or_either_bench_suite():
    from peagle_lab.prompts import chat_records
    from peagle_lab.prompts import humaneval_prompts, load_scale_records
    from peagle_lab.experiments.recipe import scored_prompts

    assert scored_prompts("val", 3) == load_scale_records("val")[:3]
    assert scored_prompts("chat", 3) == chat_records(3)
    assert scored_prompts("code", 2) == humaneval_prompts(2)
