"""The dtype choice (auto / float32 / bfloat16), the host slug, and losslessness in the two regimes:
fp32 token for token, bf16 divergences only at near-ties of the plain run (and a wrong rule is caught)."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

from peagle_lab import precision
from peagle_lab.decoding.divergence import BF16_TIE_ULPS, Divergence, first_divergence, tie_bound
from peagle_lab.errors import PeagleError
from peagle_lab.decoding.speculative import GenerationResult


@pytest.mark.parametrize("flags, units", [({"avx2"}, None), ({"avx512f", "avx512_bf16"}, "avx512_bf16"),
                                          ({"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}, "amx")])
def test_bf16_units_from_cpu_flags(monkeypatch, flags, units):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert precision.cpu_bf16_units(flags) == units


def test_auto_picks_bf16_only_with_native_units(monkeypatch):
    monkeypatch.delenv("PEAGLE_DTYPE", raising=False)
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda flags=None: None)
    assert precision.resolve_dtype("auto", "cpu") == torch.float32
    assert precision.resolve_dtype(None, "cpu") == torch.float32
    assert "no native bf16" in precision.describe_choice(torch.float32, "cpu", "auto")
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda flags=None: "amx")
    assert precision.resolve_dtype("auto", "cpu") == torch.bfloat16
    assert precision.describe_choice(torch.bfloat16, "cpu", "auto") == "bfloat16 (auto: CPU has amx)"
    monkeypatch.setenv("PEAGLE_DTYPE", "fp32")
    assert precision.resolve_dtype(None, "cpu") == torch.float32


def test_bf16_without_native_units_warns_and_still_runs(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_units", lambda flags=None: None)
    with pytest.warns(UserWarning, match="emulated.*slower"):
        assert precision.resolve_dtype("bfloat16", "cpu") == torch.bfloat16


# (device type, compute capability, CPU bf16 units) -> what auto picks for inference / for training autocast
AUTO_TABLE = [
    ("cuda", (9, 0), None, torch.bfloat16, torch.bfloat16),   # H100 / H200
    ("cuda", (8, 6), None, torch.bfloat16, torch.bfloat16),   # A10G (ml.g5), RTX 3090
    ("cuda", (8, 9), None, torch.bfloat16, torch.bfloat16),   # L4, RTX 4090
    ("cuda", (8, 0), None, torch.bfloat16, torch.bfloat16),   # A100
    ("cuda", (7, 5), None, torch.float16, torch.float32),     # T4 (ml.g4dn): bf16 emulated
    ("cuda", (7, 0), None, torch.float16, torch.float32),     # V100 (ml.p3)
    ("cpu", None, "amx", torch.bfloat16, torch.bfloat16),
    ("cpu", None, "avx512_bf16", torch.bfloat16, torch.bfloat16),
    ("cpu", None, None, torch.float32, torch.float32),        # AVX2 only: bf16 emulated
    ("mps", None, None, torch.float32, torch.float32),
]


@pytest.mark.parametrize("device_type, capability, units, infer, train", AUTO_TABLE)
def test_auto_dtype_is_bf16_only_where_native(device_type, capability, units, infer, train):
    assert precision.auto_dtype(device_type, capability, units) == infer
    assert precision.auto_dtype(device_type, capability, units, training=True) == train


def test_auto_on_cuda_reads_the_device_capability(monkeypatch):
    monkeypatch.delenv("PEAGLE_DTYPE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for cap, want in [((7, 5), torch.float16), ((9, 0), torch.bfloat16)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None, cap=cap: cap)
        assert precision.resolve_dtype("auto", "cuda:1") == want
    assert precision.resolve_dtype("auto", "cuda", training=True) == torch.bfloat16
    assert "sm_90" in precision.describe_choice(torch.bfloat16, "cuda", "auto")


@pytest.mark.parametrize("bad", ["float16", "fp16", "half", "int8", "bf17"])
def test_unsupported_dtypes_name_the_fix(bad):
    with pytest.raises(PeagleError, match="--dtype"):
        precision.resolve_dtype(bad, "cpu")


def test_float16_only_for_cuda_inference():
    assert precision.resolve_dtype("float16", "cuda") == torch.float16
    with pytest.raises(PeagleError, match="training"):
        precision.resolve_dtype("fp16", "cuda", training=True)


@pytest.mark.parametrize("name, slug", [("NVIDIA H200", "gpu-h200"), ("NVIDIA H100 80GB HBM3", "gpu-h100-80gb"),
                                        ("Tesla T4", "gpu-t4"), ("Tesla V100-SXM2-16GB", "gpu-v100-16gb"),
                                        ("NVIDIA A10G", "gpu-a10g"), ("NVIDIA A100-SXM4-80GB", "gpu-a100-80gb"),
                                        ("NVIDIA L4", "gpu-l4"), ("NVIDIA GeForce RTX 4090", "gpu-rtx4090")])
def test_gpu_slug_names_the_model(name, slug):
    assert precision.gpu_slug(name) == slug


def test_host_slug_of_a_cuda_run_names_the_gpu_not_the_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA H200")
    assert precision.host_slug("cuda") == precision.host_slug("cuda:0") == "gpu-h200"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert precision.host_slug() == "gpu-h200"  # no device given: the one a run would use
    assert precision.host_slug("cpu").startswith("cpu-")


def test_host_slug_names_cpu_family_isa_and_cores():
    slug = precision.host_slug("cpu")
    assert re.fullmatch(r"cpu-[a-z0-9-]+-(amx|avx512bf16|avx512|avx2|base)-\d+c", slug), slug
    assert precision.isa_record()["torch_cpu_capability"]


def test_tie_bound_is_zero_in_fp32_on_cpu_and_a_stated_bound_on_gpu():
    assert tie_bound(torch.float32, 20.0) == 0.0
    assert tie_bound(torch.float32, 32.0, "cuda") == pytest.approx(32.0 * 2 ** -11)
    # fp16: 11 significant bits, |z| in [16, 32): ulp = 2**(4 - 10)
    assert tie_bound(torch.float16, 20.0, "cuda") == pytest.approx(BF16_TIE_ULPS * 2 ** -6)


def test_fp32_gpu_divergence_is_judged_by_its_margin_never_a_bare_assertion():
    plain = GenerationResult([5, 6, 7], None, 1.0, margins=[3.0, 0.004, 9.0], top_logits=[32.0] * 3)
    tie = first_divergence([5, 9, 7], plain, torch.float32, "cuda")
    assert tie.near_tie and "a near-tie" in tie.message()  # 0.004 <= 0.0156
    assert not first_divergence([5, 9, 7], plain, torch.float32, "cpu").near_tie  # CPU fp32: exact
    bug = first_divergence([5, 6, 1], plain, torch.float32, "cuda")
    assert not bug.near_tie and "NOT a near-tie" in bug.message()


def test_tie_bound_is_a_few_ulps_in_bf16():
    # |z| in [16, 32): ulp = 2**(4 - 7) = 0.125
    assert tie_bound(torch.bfloat16, 20.0) == pytest.approx(BF16_TIE_ULPS * 0.125)
    assert tie_bound(torch.bfloat16, 40.0) == pytest.approx(BF16_TIE_ULPS * 0.25)


def test_first_divergence_reports_position_and_plain_margin():
    plain = GenerationResult([5, 6, 7, 8], None, 1.0, margins=[3.0, 0.1, 9.0, 1.0], top_logits=[20.0] * 4)
    assert first_divergence([5, 6, 7, 8], plain, torch.bfloat16) is None
    d = first_divergence([5, 9, 1, 1], plain, torch.bfloat16)
    assert isinstance(d, Divergence) and (d.position, d.margin, d.got, d.plain) == (1, 0.1, 9, 6)
    assert d.near_tie  # 0.1 <= 0.5
    d = first_divergence([5, 6, 1], plain, torch.bfloat16)
    assert d.position == 2 and not d.near_tie  # 9.0 > 0.5
    assert not first_divergence([5, 6, 1], plain, torch.float32).near_tie  # fp32: any divergence is a failure


def _bf16_runs(model, tok, heads, ks, n_prompts=3, new=40):
    from peagle_lab.decoding.draft_sources import HeadDrafter
    from peagle_lab.prompts import chat_ids, humaneval_prompts
    from peagle_lab.decoding.speculative import plain_generate, speculative_generate
    from peagle_lab.decoding.target_runner import TargetRunner

    out = []
    runner = TargetRunner(model, heads["parallel"].config.aux_hidden_state_layer_ids)
    for text in humaneval_prompts(n_prompts):
        prompt = chat_ids(tok, text)
        base = plain_generate(runner, prompt, new, eos_ids=tok.eos_token_id)
        for mode, k in ks:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = speculative_generate(runner, HeadDrafter(heads[mode], mode), prompt, k, new,
                                           eos_ids=tok.eos_token_id)
            out.append((mode, k, first_divergence(res.tokens, base, torch.bfloat16)))
    return out


def _heads(model):
    from peagle_lab.drafter.heads import load_head

    return {m: load_head(m, model) for m in ("parallel", "sequential")}


@pytest.mark.slow
def test_bf16_divergences_happen_only_at_near_ties(smollm2_bf16):
    """bf16 speculative vs plain bf16 greedy on real prompts: every divergence is at a plain-run margin within
    BF16_TIE_ULPS ulps of the top logit (batched vs one-token numerics), never a real disagreement."""
    model, tok = smollm2_bf16
    runs = _bf16_runs(model, tok, _heads(model), [("parallel", 3), ("parallel", 7), ("sequential", 3)])
    bad = [(m, k, d.as_dict()) for m, k, d in runs if d is not None and not d.near_tie]
    assert not bad, bad


@pytest.mark.slow
def test_bf16_check_catches_a_wrong_acceptance_rule(smollm2_bf16, monkeypatch):
    """Accepting one draft too many (a plausible off-by-one) makes outputs diverge at confident positions: the
    near-tie check must flag it, so it has the power to catch a broken loop."""
    import peagle_lab.decoding.speculative as spec

    right = spec.accept_greedy

    def off_by_one(drafts, logits):
        a, bonus = right(drafts, logits)
        if a < len(drafts):
            return a + 1, int(logits[a + 1].argmax())
        return a, bonus

    monkeypatch.setattr(spec, "accept_greedy", off_by_one)
    model, tok = smollm2_bf16
    runs = _bf16_runs(model, tok, _heads(model), [("parallel", 3)], n_prompts=2, new=24)
    assert any(d is not None and not d.near_tie for _, _, d in runs), [d for _, _, d in runs]


def test_agreement_of_engines_is_identical_or_near_ties_only():
    from peagle_lab.decoding.divergence import agreement

    plain = GenerationResult([5, 6, 7], None, 1.0, margins=[3.0, 0.004, 9.0], top_logits=[32.0] * 3)
    same = agreement([[[5, 6, 7]], [[5, 6, 7]]], [plain], torch.float32, "cpu")
    assert same["identical"] and same["near_ties_only"] and same["note"] == "identical"
    tie = agreement([[[5, 6, 7]], [[5, 9, 7]]], [plain], torch.float32, "cuda")
    assert not tie["identical"] and tie["near_ties_only"] and tie["note"].startswith("only near-ties")
    assert not agreement([[[5, 6, 7]], [[5, 9, 7]]], [plain], torch.float32, "cpu")["near_ties_only"]
    bug = agreement([[[5, 6, 7]], [[5, 6, 1]]], [plain], torch.float32, "cuda")
    assert not bug["near_ties_only"] and "NOT only near-ties" in bug["note"]


def test_one_lossless_verdict_for_every_claim():
    from peagle_lab.bench.lossless import lossless_note, run_divergence
    from peagle_lab.decoding.divergence import (LOSSLESS, NEAR_TIES_ONLY, NOT_LOSSLESS, is_lossless, lossless_regime,
                                                lossless_verdict)

    tie, bug = Divergence(3, 0.0, 0.25, 7, 8), {"near_tie": False, "margin": 2.0}
    assert lossless_regime(torch.float32, "cpu") == "exact" and lossless_regime(torch.bfloat16, "cpu") == "near-tie"
    assert lossless_regime(torch.float32, "cuda") == "near-tie"
    assert lossless_verdict([None, None], "exact") == lossless_verdict([], "near-tie") == LOSSLESS
    assert lossless_verdict([None, tie], "near-tie") == NEAR_TIES_ONLY
    assert lossless_verdict([tie.as_dict()], "near-tie") == NEAR_TIES_ONLY  # a result file's record reads the same
    assert lossless_verdict([tie], "exact") == NOT_LOSSLESS  # fp32 on a CPU: token for token
    assert lossless_verdict([tie, bug], "near-tie") == NOT_LOSSLESS and not is_lossless([bug], "near-tie")
    # an end-to-end run row: its reference decides identity, its divergence from plain greedy the near-tie
    assert run_divergence({"identical_to_reference": True, "divergence": bug}) is None
    assert run_divergence({"identical_to_reference": False, "divergence": None}) == {"near_tie": False}
    assert lossless_note("exact", 2, [tie.as_dict()]) == "exact: 1/2 outputs DIFFER"
    assert lossless_note("near-tie", 2, [tie.as_dict()]).endswith("largest margin 0")
    assert lossless_note("near-tie", 2, [bug | {"near_tie": False}]).endswith("(NOT a near-tie)")
