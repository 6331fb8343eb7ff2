"""One timed greedy batch on vLLM's offline engine (a fake engine in vLLM's shapes; no vLLM): what each engine is
started with, what is warmed up, timed and scored, and that the engine is freed before the function returns."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import pytest

from peagle_lab.serving import batch
from peagle_lab.serving.agreement import PLAIN_ENGINE_ARGS, SCORED_LOGPROBS
from peagle_lab.serving.engine import Speculation

PROMPTS = [{"prompt_token_ids": [1, 2, 3]}, {"prompt_token_ids": [4, 5]}]


class FakeLLM:
    """Answers each prompt with tokens 10, 11, ... up to max_tokens; counts one draft per prompt and call."""

    def __init__(self, calls):
        self.calls, self.drafts = calls, 0
        self.cycle = self  # as a real engine, held in a reference cycle: only a collection frees it

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((len(prompts), params.max_tokens, getattr(params, "logprobs", None)))
        self.drafts += len(prompts)
        toks = list(range(10, 10 + params.max_tokens))
        logits = [{t: 5.0, t + 100: 5.0 - 0.5 * (i + 1)} for i, t in enumerate(toks)]
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(toks), text=f"out{n}",
                                                         logprobs=logits if getattr(params, "logprobs", None)
                                                         else None)]) for n in range(len(prompts))]


@pytest.fixture
def engine(monkeypatch):
    seen = {"calls": [], "kw": [], "engines": []}

    def make_llm(target_dir, spec=None, **kw):
        seen["kw"].append((target_dir, spec, kw))
        llm = FakeLLM(seen["calls"])
        seen["engines"].append(weakref.ref(llm))
        return llm

    def spec_metrics(llm, since=None):
        return {"drafts": llm.drafts - (since["drafts"] if since else 0)}

    monkeypatch.setattr(batch, "require_vllm", lambda: SimpleNamespace(SamplingParams=SimpleNamespace))
    monkeypatch.setattr(batch, "make_llm", make_llm)
    monkeypatch.setattr(batch, "spec_metrics", spec_metrics)
    return seen


def test_the_plain_engine_returns_raw_logits_and_scores_the_batch_once_more_untimed(engine):
    out = batch.timed_greedy_batch("target", PROMPTS, max_tokens=3, dtype="float32")
    (target, spec, kw), = engine["kw"]
    assert target == "target" and spec is None and kw["dtype"] == "float32" and kw["max_model_len"] == 2048
    assert all(kw[k] == v for k, v in PLAIN_ENGINE_ARGS.items())
    # the warm-up on the first prompt, the timed batch, the scored batch with the top-2 logits
    assert engine["calls"] == [(1, batch.WARMUP_TOKENS, None), (2, 3, None), (2, 3, SCORED_LOGPROBS)]
    assert out["ids"] == [[10, 11, 12]] * 2 and out["text"] == ["out0", "out1"] and out["metrics"] is None
    assert [r.tokens for r in out["runs"]] == out["ids"] and out["runs"][0].margins == pytest.approx([0.5, 1.0, 1.5])
    assert out["start_s"] >= 0 and out["gen_s"] >= 0


def test_a_speculating_engine_counts_only_the_timed_batch_and_is_never_scored(engine):
    spec = Speculation("head", k=4, parallel=True)
    out = batch.timed_greedy_batch("target", PROMPTS, max_tokens=3, spec=spec)
    (_, given, kw), = engine["kw"]
    assert given is spec and not set(PLAIN_ENGINE_ARGS) & set(kw)
    assert engine["calls"] == [(1, batch.WARMUP_TOKENS, None), (2, 3, None)]
    assert out["metrics"] == {"drafts": 2} and out["runs"] is None  # the warm-up's draft left out


def test_the_engine_is_freed_before_the_function_returns(engine):
    batch.timed_greedy_batch("target", PROMPTS, max_tokens=2)
    assert engine["engines"][0]() is None
