"""vLLM with a head against vLLM without it: identical, apart only at near-ties of the plain run's own logits, or a
real divergence (fake token and logit inputs in vLLM's shapes; no engine)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from peagle_lab.errors import PeagleError
from peagle_lab.serving.agreement import plain_run, plain_runs, speculation_agreement


def _logit(x):
    return SimpleNamespace(logprob=x, rank=1, decoded_token=None)  # vLLM's Logprob: a raw logit in raw_logits mode


def _output(tokens, logits):
    """A vLLM RequestOutput of one completion; ``logits``: per token, {token id: raw logit}."""
    steps = [{t: _logit(v) for t, v in step.items()} for step in logits]
    return SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(tokens), logprobs=steps)])


# the plain engine's run: at token 1 tokens 6 and 9 nearly tie (margin 1e-4 at a top logit of 2), at token 2 the
# choice is clear (margin 3)
PLAIN = _output([5, 6, 7], [{5: 4.0, 8: 1.0}, {6: 2.0, 9: 2.0 - 1e-4}, {7: 5.0, 1: 2.0}])


def test_a_plain_runs_margins_and_top_logits_come_from_its_top_2_raw_logits():
    run = plain_runs([PLAIN])[0]
    assert run.tokens == [5, 6, 7] and run.top_logits == [4.0, 2.0, 5.0]
    assert run.margins == pytest.approx([3.0, 1e-4, 3.0])


def test_identical_outputs_pass_as_identical():
    same = speculation_agreement([[5, 6, 7]], plain_runs([PLAIN]), torch.float32)
    assert same["identical"] and same["near_ties_only"] and same["divergences"] == []


def test_a_divergence_at_a_near_tie_of_the_plain_run_is_explained_by_its_margin():
    tie = speculation_agreement([[5, 9, 3]], plain_runs([PLAIN]), torch.float32)
    assert not tie["identical"] and tie["near_ties_only"] and tie["note"].startswith("only near-ties")
    (d,) = tie["divergences"]
    assert d["position"] == 1 and d["token"] == 9 and d["plain_token"] == 6 and d["near_tie"]
    assert d["margin"] == pytest.approx(1e-4, abs=1e-5) and d["bound"] == pytest.approx(2.0 * 2.0 ** -11, abs=1e-5)


def test_a_divergence_at_a_large_margin_is_reported_as_a_real_divergence():
    bug = speculation_agreement([[5, 6, 1]], plain_runs([PLAIN]), torch.float32)
    assert not bug["identical"] and not bug["near_ties_only"] and "NOT only near-ties" in bug["note"]
    assert bug["divergences"][0]["position"] == 2 and not bug["divergences"][0]["near_tie"]


def test_every_prompt_counts_one_real_divergence_fails_the_batch():
    other = _output([1, 2], [{1: 9.0, 2: 1.0}, {2: 9.0, 3: 1.0}])
    res = speculation_agreement([[5, 9, 3], [1, 3]], plain_runs([PLAIN, other]), torch.float32)
    assert not res["near_ties_only"] and len(res["divergences"]) == 2


def test_a_plain_run_without_top_2_logits_is_refused_with_the_fix():
    with pytest.raises(PeagleError, match="logprobs_mode"):
        plain_run([5, 6], None)
    with pytest.raises(PeagleError, match="fewer than 2 logits at token 0"):
        plain_run([5], [{5: 1.0}])
