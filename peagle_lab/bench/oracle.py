"""The engine at a published acceptance: per-position acceptance rates (presets from published figures, or a
list) and the bench method that runs :class:`~peagle_lab.decoding.draft_sources.RatedOracleDrafter` through the real loop,
charged a real head's drafting cost (one parallel pass, or K sequential passes), labelled ``oracle (...)`` beside
the real heads. The two charges on the same draws are P-EAGLE's claim in one comparison: equal acceptance, and
only the drafting cost differs.

Rates are CONDITIONAL, as the results files' ``per_position_acceptance``: rate ``j`` = P(slot j accepted | slots
before it accepted). vLLM reports unconditional rates (accepted at slot j / rounds):
:func:`conditional_from_unconditional` converts them.
"""

from __future__ import annotations


from ..decoding.draft_sources import HeadDrafter, RatedOracleDrafter
from ..errors import PeagleError
from ..decoding.speculative import plain_generate, speculative_generate
from .methods import Method, MethodRun, spec_stats_dict

ORACLE_LABEL = "paper's acceptance"
# per drafting mode the oracle is charged in: (suffix of the method's name, family, what a round costs, the bench
# flag of the head it needs); the parallel charge keeps the plain name
CHARGES = {"parallel": ("", "oracle", "one parallel head pass per round", "--parallel-head"),
           "sequential": (", sequential drafting", "oracle-sequential", "K sequential head passes per round",
                          "--sequential-head")}
# In bf16 the verification of K+1 tokens can break a near-tie the other way than plain decoding did; after such a
# divergence the plain run is no longer the continuation being verified and every later draft would be rejected.
# The oracle then takes its own output as the reference and decodes again, at most this many times in all.
ORACLE_ATTEMPTS = 3
# the seed of the oracle's draws (with the prompt): every oracle method of a run spoils the same drafts
ORACLE_SEED = 0


def conditional_from_unconditional(rates) -> list[float]:
    """vLLM's per-position rates (P(slot j accepted)) -> conditional ones (P(slot j | slots < j accepted))."""
    out, prev = [], 1.0
    for u in rates:
        out.append(round(u / prev, 4) if prev > 0 else 0.0)
        prev = u
    return out


def constant_rate_acceptance_length(rate: float, k: int) -> float:
    """The acceptance length when every one of ``k`` slots is accepted with the same conditional ``rate``:
    ``1 + rate + rate^2 + ... + rate^k`` (the target's own token, then slot j reached and accepted)."""
    return sum(rate ** j for j in range(k + 1))


def budget_acceptance_length(rate: float, k: int, max_new_tokens: int) -> float:
    """The acceptance length a loop with a constant per-slot ``rate`` reaches in answers of ``max_new_tokens``
    (pooled, expected): the prefill gives the first token and each round drafts only as many tokens as the budget
    leaves, so the last rounds of an answer are cut short and the figure falls below
    :func:`constant_rate_acceptance_length` (its limit for long answers)."""
    rounds, accepted = [0.0], [0.0]  # expected rounds and accepted drafts with r tokens left, r = 0, 1, ...
    for r in range(1, max_new_tokens):
        kr = min(k, r)
        probs = [rate ** a * (1 - rate) for a in range(kr)] + [rate ** kr]
        rounds.append(1 + sum(p * rounds[max(r - a - 1, 0)] for a, p in enumerate(probs)))
        accepted.append(sum(p * (a + accepted[max(r - a - 1, 0)]) for a, p in enumerate(probs)))
    return 1 + accepted[-1] / rounds[-1] if max_new_tokens > 1 else float("nan")


def constant_rate_for(acceptance_length: float, k: int) -> float:
    """The per-position rate ``c`` with ``1 + c + c^2 + ... + c^k = acceptance_length`` (bisection): the inverse of
    :func:`constant_rate_acceptance_length`."""
    if not 1.0 <= acceptance_length <= k + 1:
        raise PeagleError(f"An acceptance length of {acceptance_length} is impossible at K={k} (1..{k + 1}).")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        c = (lo + hi) / 2
        if constant_rate_acceptance_length(c, k) < acceptance_length:
            lo = c
        else:
            hi = c
    return round((lo + hi) / 2, 4)


# name -> (conditional rates, where they come from). The blog gives acceptance lengths only: its presets are the
# constant per-position rate that reaches that length at K=7.
PRESETS = {
    "blog-humaneval": ([constant_rate_for(3.94, 7)],
                       "vLLM P-EAGLE blog, GPT-OSS-20B, HumanEval, AL 3.94 at K=7 (constant per-position rate)"),
    "blog-mtbench": ([constant_rate_for(3.70, 7)],
                     "vLLM P-EAGLE blog, GPT-OSS-20B, MT-Bench, AL 3.70 at K=7 (constant per-position rate)"),
    "vllm-pr32628": (conditional_from_unconditional([0.63, 0.38, 0.23, 0.15, 0.09, 0.05, 0.03]),
                     "vLLM PR #32628, parallel drafting, HumanEval, K=7: per-position 63/38/23/15/9/5/3% (AL 2.56)"),
}
# the paper's acceptance on each suite's kind of prompts (``--oracle-accept paper``)
PAPER = {"code": "blog-humaneval", "chat": "blog-mtbench", "offmix": "blog-mtbench", "lists": "blog-mtbench"}


def oracle_rates(spec: str, suite: str = "code") -> tuple[list[float], str]:
    """``(conditional rates, source)`` of ``--oracle-accept``: ``paper`` (the blog's figure for the suite's kind of
    prompts), a preset name, or a comma-separated list of conditional rates."""
    spec = str(spec).strip()
    if spec == "paper":
        spec = PAPER.get(suite, PAPER["code"])
    if spec in PRESETS:
        return list(PRESETS[spec][0]), PRESETS[spec][1]
    try:
        rates = [float(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        rates = []
    if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
        raise PeagleError(f"--oracle-accept {spec!r} is neither a preset nor a list of probabilities. Fix: 'paper', "
                          f"one of {sorted(PRESETS)}, or e.g. 0.8,0.7,0.6 (conditional per-position rates).")
    return rates, "given rates"


def oracle_method(runner, head, rates, k: int, eos_id=None, label: str = ORACLE_LABEL, source: str = "",
                  mode: str = "parallel") -> Method:
    """A bench method: the rated oracle at draft length ``k``, charged ``head``'s drafting each round in ``mode``
    (``parallel``: one pass of a P-EAGLE head; ``sequential``: K passes of an EAGLE-3 head). The draws depend on
    :data:`ORACLE_SEED` and the prompt only, so both charges accept the same drafts in the same rounds. The
    reference continuation of a prompt is a plain greedy run of it, made once and untimed; where the loop's output
    leaves it (a bf16 near-tie broken the other way), the output becomes the reference and the generation is run
    again (:data:`ORACLE_ATTEMPTS` in all): the result kept is the last run, a complete
    generation timed on its own."""
    if mode not in CHARGES:
        raise PeagleError(f"The oracle's drafting cost is 'parallel' or 'sequential', got {mode!r}.")
    suffix, family, cost, flag = CHARGES[mode]
    if head is None:
        raise PeagleError(f"The oracle is charged a real {mode} head's drafting cost and needs one. Fix: pass a "
                          f"{mode} head ({flag}).")
    drafter = RatedOracleDrafter(rates, runner.model.config.vocab_size, cost=HeadDrafter(head, mode),
                                 seed=ORACLE_SEED)
    references: dict = {}

    def run(prompt, max_new):
        key = (tuple(prompt), max_new)
        if key not in references:  # untimed: the oracle's knowledge, not part of its decoding
            references[key] = list(prompt) + plain_generate(runner, prompt, max_new, eos_ids=eos_id).tokens
        for _ in range(ORACLE_ATTEMPTS):
            drafter.reference = references[key]
            res = speculative_generate(runner, drafter, prompt, k, max_new, eos_ids=eos_id)
            if list(prompt) + res.tokens == references[key]:
                break
            references[key] = list(prompt) + res.tokens  # the continuation this engine verifies
        return MethodRun(res.tokens, res.seconds, spec_stats_dict(res.stats), res.stats.target_forwards)

    return Method(f"oracle ({label}{suffix}) K={k}", family, k, run,
                  info={"rates": list(rates), "source": source, "cost": cost})


def paper_target(suite: str, k: int = 7) -> tuple[float, str]:
    """The blog's acceptance length that the oracle replays on `suite` at K=k, and its benchmark: code replays
    HumanEval's 3.94 at K=7, chat MT-Bench's 3.70."""
    name = {"blog-humaneval": "HumanEval", "blog-mtbench": "MT-Bench"}[PAPER.get(suite, PAPER["code"])]
    return constant_rate_acceptance_length(oracle_rates("paper", suite)[0][0], k), name
