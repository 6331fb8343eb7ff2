"""The equal-budget studies: seeds grouped per setting, noise read from them, human-written answers in the
distilled format, the training sets a run may name."""

import pytest

from peagle_lab.experiments import recipe
from peagle_lab.experiments import studies
from peagle_lab.errors import PeagleError
from peagle_lab.workbook.human_answers import human_records, stdlib_tasks


def _run(name, change, al, pos=(0.2, 0.1, None)):
    return dict(name=name, change=change, acceptance_length=al, per_position=list(pos), tokens_seen=100, k=7,
                val_prompts=2, max_new_tokens=8, steps=4, autocast="float32", machine={"host": "h"})


def test_seeds_of_a_setting_pool_and_their_spread_is_the_noise():
    runs = [_run("a (seed 0)", {"seed": 0}, 1.20), _run("a (seed 1)", {"seed": 1}, 1.26),
            _run("b (seed 0)", {"x": 1, "seed": 0}, 1.40), _run("b (seed 1)", {"x": 1, "seed": 1}, 1.41)]
    rows = studies.summarize(runs)
    assert [(r["setting"], r["seeds"], r["acceptance_length"]) for r in rows] == [("a", 2, 1.23), ("b", 2, 1.405)]
    assert recipe.noise(runs) == pytest.approx(0.06)
    assert rows[0]["slots_1_3"] == [0.2, 0.1, None]  # a slot never reached stays None, not 0
    assert "largest seed spread in this study 0.060" in studies.summary_markdown(runs)
    assert set(studies.with_seeds({"v": {"x": 1}})) == {"v (seed 0)", "v (seed 1)"}


def test_the_acceptance_yardstick_is_the_largest_seed_spread_of_the_committed_studies(monkeypatch):
    committed = {"mask": [_run("a (seed 0)", {"seed": 0}, 1.20), _run("a (seed 1)", {"seed": 1}, 1.23)],
                 "storage": [_run("b (seed 0)", {"seed": 0}, 1.30), _run("b (seed 1)", {"seed": 1}, 1.35)],
                 "self-distill": []}
    monkeypatch.setattr(studies, "committed", lambda name: ("h", committed[name]))
    assert studies.largest_seed_spread() == pytest.approx(0.05)
    assert studies.largest_seed_spread(("mask",)) == pytest.approx(0.03)
    committed.update(mask=[], storage=[])
    assert studies.largest_seed_spread() == 0.0  # nothing committed: every gap counts


def test_human_answers_are_library_functions_with_a_held_out_split():
    tasks = stdlib_tasks()
    assert len(tasks) > 300 and {t["split"] for t in tasks} == {"train", "val"}
    assert all(t["answer"].startswith("```python\n") and t["prompt"].startswith("Write the Python") for t in tasks)
    assert len({t["id"] for t in tasks}) == len(tasks)


def test_human_records_append_the_answer_and_eos_after_the_chat_prompt():
    class Tok:  # the two calls human_records makes: a chat template and plain tokenization
        eos_token_id = 2
        chat_template = "x"

        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "P:" + messages[-1]["content"]

        def __call__(self, text, add_special_tokens):
            return {"input_ids": [ord(c) % 50 + 3 for c in text]}

    recs = human_records(Tok(), [dict(prompt="ab", answer="xyz")], max_answer_tokens=2)
    assert recs[0]["prompt_len"] == 4 and recs[0]["input_ids"][4:] == [ord("x") % 50 + 3, ord("y") % 50 + 3]
    assert recs[0]["finished"] is False  # cut before its EOS


def test_a_run_naming_an_unknown_training_set_is_refused(tmp_path):
    with pytest.raises(PeagleError, match="training data 'nope'"):
        recipe.run_recipe(None, None, {"float32": []}, recipe.Scoring([]), tmp_path,
                          recipe.RecipePlan(variants={"v": dict(data="nope")}))


def test_the_deep_slot_settings_differ_from_the_default_in_one_thing_each_and_are_valid_configs():
    from peagle_lab.experiments.studies import BASE, DEEP_SLOT_VARIANTS, with_seeds
    from peagle_lab.training import TrainConfig

    default, *others = DEEP_SLOT_VARIANTS.values()
    for other in others:
        changed = {k for k in default.keys() | other.keys() if default.get(k) != other.get(k)}
        assert changed in ({"loss"}, {"cod_ratio", "cod_min_ratio"}), changed
    runs = with_seeds(DEEP_SLOT_VARIANTS, seed_major=True)
    assert len(runs) == 6 and [r["seed"] for r in runs.values()] == [0, 0, 0, 1, 1, 1]
    for settings in runs.values():
        cfg = TrainConfig(**dict(BASE, **settings))
        if cfg.cod_ratio == 1.0:
            assert cfg.cod_min_ratio == 1.0, "every anchor at every depth"
