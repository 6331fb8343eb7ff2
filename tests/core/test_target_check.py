"""Bad targets and mismatched artefacts, refused in one line before any long work: no chat template, a layout that
is not Llama-family, layers with a running state (linear attention), a head (or draft vocabulary) that does not fit the target, features
extracted from another target. And the one rule that picks the head for a target (heads.head_for_target)."""

from __future__ import annotations


import pytest
import torch

from conftest import make_byte_tokenizer, make_random_head, make_tiny_llama
from peagle_lab.errors import PeagleError
from peagle_lab.models import load_target


def _save(tmp_path, config=None, model=None, template=True):
    """A target directory: a config (and weights when ``model`` is given) and a byte tokenizer."""
    out = tmp_path / "target"
    if model is not None:
        model.save_pretrained(out)
    else:
        config.save_pretrained(out)  # no weights: a check that reads them would fail otherwise
    (make_byte_tokenizer() if template else make_byte_tokenizer(None)).save_pretrained(out)
    return out


def _one_line_naming(exc, target, *words):
    msg = str(exc.value)
    assert f"target {target}" in msg and "Fix:" in msg, msg
    for w in words:
        assert w in msg, msg


def test_a_target_without_chat_template_is_refused_before_its_weights_load(tmp_path):
    model = make_tiny_llama(vocab=300)
    out = _save(tmp_path, model=model, template=False)
    with pytest.raises(PeagleError) as exc:
        load_target(str(out), device="cpu", dtype=torch.float32)
    _one_line_naming(exc, out, "no chat template")


def test_a_target_with_linear_attention_layers_is_refused_from_its_config_alone_in_one_line(tmp_path):
    from transformers import Qwen3NextConfig

    cfg = Qwen3NextConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=256)
    out = _save(tmp_path, config=cfg)  # no weights: refused before reading any
    with pytest.raises(PeagleError) as exc:
        load_target(str(out), device="cpu", dtype=torch.float32)
    _one_line_naming(exc, out, "3 'linear_attention' layer(s)", "running state")
    assert str(exc.value).count("Fix:") == 1 and "\n" not in str(exc.value)


def test_a_sliding_window_target_passes_the_config_checks(tmp_path):
    from transformers import MistralConfig

    from peagle_lab import target_check

    cfg = MistralConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, sliding_window=16)
    target_check.check_config(cfg, "mistral-window")
    target_check.check_on_meta(cfg, "mistral-window")


def test_a_target_that_is_not_llama_family_is_refused_from_its_config_alone(tmp_path):
    from transformers import GPT2Config

    out = _save(tmp_path, config=GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=300))
    with pytest.raises(PeagleError) as exc:
        load_target(str(out), device="cpu", dtype=torch.float32)
    _one_line_naming(exc, out, "Llama-family", "rms_norm_eps")


def test_a_llama_family_target_with_a_template_loads(tmp_path):
    out = _save(tmp_path, model=make_tiny_llama(vocab=300))
    model, tok = load_target(str(out), device="cpu", dtype=torch.float32)
    assert model.config.vocab_size == 300 and tok.chat_template


def _head_dir(tmp_path, model, name, **cfg):
    return make_random_head(model, mask_token=5, **cfg).save_pretrained(tmp_path / name)


def test_a_head_of_another_vocabulary_is_one_line_naming_target_problem_and_fix(tmp_path):
    from peagle_lab.drafter.heads import head_for_target

    other = make_tiny_llama(vocab=200)
    model = make_tiny_llama(vocab=300)
    path = _head_dir(tmp_path, other, "other-head")
    with pytest.raises(PeagleError, match=r"cannot serve the target tiny.*vocabulary 200 \(head\) vs 300.*Fix:"):
        head_for_target(path, model, target="tiny")


@pytest.mark.parametrize("field", ["target_identity", "target_fingerprint"])  # heads naming it target_fingerprint are read too
def test_a_head_trained_on_another_target_of_the_same_shape_is_refused_by_fingerprint(tmp_path, field):
    from peagle_lab.drafter.heads import head_fit_problems, head_for_target
    from peagle_lab.features.identity import target_identity

    a, b = make_tiny_llama(seed=0), make_tiny_llama(seed=1)
    path = _head_dir(tmp_path, a, "head-a", extra={field: target_identity(a)})
    assert head_fit_problems(path, a) == []
    assert "another target" in head_fit_problems(path, b)[0]
    with pytest.raises(PeagleError, match="fingerprint"):
        head_for_target(path, b, target="b")


def test_a_draft_vocabulary_larger_than_the_target_is_refused_before_features(tmp_path):
    from peagle_lab.training import TrainConfig
    from peagle_lab.training.config import check_config_fits_target

    model = make_tiny_llama(vocab=96)
    with pytest.raises(PeagleError, match=r"target tiny: --draft-vocab-size 4096 exceeds its vocabulary of 96"):
        check_config_fits_target(TrainConfig(draft_vocab_size=4096), model, "tiny")
    with pytest.raises(PeagleError, match=r"tap layer ids \[7\] are out of range"):
        check_config_fits_target(TrainConfig(tap_layers=(0, 1, 7), draft_vocab_size=64), model, "tiny")
    check_config_fits_target(TrainConfig(draft_vocab_size=96), model, "tiny")


def test_the_head_for_a_target_is_shipped_if_it_fits_else_trained_here_else_a_labelled_fresh_one(tmp_path,
                                                                                                  monkeypatch):
    from peagle_lab.drafter.heads import head_for_target, trained_head_dir

    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "results"))
    model, tok = make_tiny_llama(vocab=300), make_byte_tokenizer()
    head, info = head_for_target("parallel", model, tokenizer=tok, target="some/tiny")
    assert info["origin"] == "fresh" and "UNTRAINED" in info["note"] and "vocabulary 49152 (head) vs 300" in info["note"]
    with pytest.raises(PeagleError, match="No parallel head for the target tiny"):
        head_for_target("parallel", model, tokenizer=tok, target="some/tiny", allow_fresh=False)
    here = trained_head_dir("some/tiny", "parallel")
    assert here == tmp_path / "results" / "heads" / "tiny" / "parallel"
    _head_dir(here.parent, model, "parallel")
    head, info = head_for_target("parallel", model, tokenizer=tok, target="some/tiny", allow_fresh=False)
    assert info["origin"] == "trained here" and info["path"] == str(here) and head.config.vocab_size == 300


@pytest.mark.real_model
def test_the_shipped_head_is_the_head_for_the_embedded_target(smollm2):
    from peagle_lab.drafter.heads import SHIPPED, head_for_target

    model, tok = smollm2
    head, info = head_for_target("parallel", model, tokenizer=tok, target="smollm2-135m")
    assert info["origin"] == "shipped" and info["path"] == str(SHIPPED["parallel"]) and info["note"] == ""


@pytest.mark.parametrize("pair", ["LIST_HEADS", "MATCHED_HEADS", "MATCHED_SEED1_HEADS", "OPEN_MATCHED_HEADS"])
def test_the_list_heads_read_the_embedded_target_and_load_as_given_heads(smollm2, pair):
    from peagle_lab.drafter import heads as module
    from peagle_lab.drafter.heads import SHIPPED, head_fit_problems, head_for_target

    heads = getattr(module, pair)
    assert set(heads) == set(SHIPPED) and all(heads[k] != SHIPPED[k] for k in SHIPPED)
    model, tok = smollm2
    for kind, path in heads.items():
        if not (path / "model.safetensors").exists():
            pytest.skip(f"{path.name} is not here")
        assert head_fit_problems(path, model) == []
        head, info = head_for_target(str(path), model, tokenizer=tok, target="smollm2-135m")
        assert info["origin"] == "given" and head.config.mode == kind


def _records(vocab, n=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [dict(input_ids=torch.randint(3, vocab, (12,), generator=gen).tolist(), prompt_len=4) for _ in range(n)]


def test_the_feature_cache_refuses_features_of_another_target_with_the_same_taps(tmp_path):
    from peagle_lab.training import prepare_sequences

    a, b = make_tiny_llama(seed=0), make_tiny_llama(seed=1)
    recs = _records(96)
    prepare_sequences(a, recs, features_dir=tmp_path / "f", progress=False)
    again = prepare_sequences(a, recs, features_dir=tmp_path / "f", progress=False)  # same target: read back
    assert len(again) == 3
    with pytest.raises(PeagleError, match="extracted from another target"):
        prepare_sequences(b, recs, features_dir=tmp_path / "f", progress=False)


def test_the_feature_cache_takes_a_bf16_copy_of_the_same_target_and_old_fingerprint_only_manifests(tmp_path):
    from peagle_lab.features.identity import recorded_target_problem, target_fingerprint, target_identity

    a = make_tiny_llama(seed=0)
    bf16 = make_tiny_llama(seed=0).to(torch.bfloat16)
    assert recorded_target_problem({"target_identity": target_identity(a)}, bf16) is None
    assert recorded_target_problem({"target_fingerprint": target_fingerprint(bf16)}, a) is None  # bf16-made
    assert recorded_target_problem({"target_fingerprint": target_fingerprint(a)}, a) is None
    assert recorded_target_problem({"target_fingerprint": target_fingerprint(make_tiny_llama(seed=1))}, a)


def test_smollm2_facts_are_compared_only_on_smollm2(monkeypatch):
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("root_conftest", Path(__file__).resolve().parents[2] / "conftest.py")
    root = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(root)

    class Item:
        def __init__(self, tags):
            self.cell = {"metadata": {"tags": tags}}
            self.options = {"check": True}

    def run(target):
        monkeypatch.setenv("PEAGLE_TARGET", target)
        items = [Item(["smollm2-fact"]), Item([]), Item(["other"])]
        root.uncheck_smollm2_facts(items)
        return [i.options["check"] for i in items]

    assert run("smollm2-135m") == [True, True, True]
    assert run("build/tiny-qwen3") == [False, True, True]


def test_every_notebook_tags_its_smollm2_facts_only_on_checked_cells():
    from pathlib import Path

    import nbformat

    tagged = 0
    for path in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if "smollm2-fact" in cell.get("metadata", {}).get("tags", []):
                assert "nbval-check-output" in cell.metadata["tags"], f"{path.name}: a tagged cell nbval does not check"
                tagged += 1
    assert tagged >= 10
