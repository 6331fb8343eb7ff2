"""The speculative decoding loop: draft K -> verify in one target pass -> accept -> roll back caches.

Read it top to bottom: :func:`iter_rounds` is the loop, one :class:`Round` record per target forward (the prefill,
then one per verification); :func:`speculative_generate` runs it to the end and :class:`SpecStats` sums the rounds;
:func:`plain_generate` is the baseline on the same call path. The parts live in their own modules:

* :mod:`.target_runner` -- ``TargetRunner``, the target with its KV cache (``forward`` writes, ``crop`` rolls back);
* :mod:`.draft_sources` -- ``HeadDrafter`` (parallel or sequential mode), ``OracleDrafter``, ``RandomDrafter``;
* :mod:`.slots` -- ``Slots``, the EAGLE shift: drafter slot ``t`` holds token ``x[t+1]`` and the target's taps at
  ``t``. Each round the drafter first receives the newly committed slots, then drafts;
* :mod:`.sampling` -- ``Sampling``, the generator helpers and the acceptance rules ``accept_greedy`` /
  ``accept_sampling``;
* :mod:`peagle_lab.kv_cache` -- the position-indexed caches of both models; :mod:`.divergence` -- the lossless checks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import torch

from .. import validate
from ..errors import PeagleError
from .draft_sources import DraftSource
from .sampling import Sampling, accept_greedy, accept_sampling, check_generator
from .slots import Slots
from .target_runner import TargetRunner
from ..timer import Timer


# ------------------------------------------------------------------------------------------ records
@dataclass
class Round:
    """One target forward of the loop. Round 0 is the prefill: no drafts, ``bonus`` is the first token. Every
    later round verified ``drafts``, accepted the first ``accepted`` of them and added the target's ``bonus``."""

    index: int
    drafts: list  # the proposed ids (K, or fewer near max_new_tokens)
    accepted: int
    bonus: int
    tokens: list  # what the round commits to the output: drafts[:accepted] + [bonus], cut at EOS / max_new_tokens
    times: dict  # seconds per phase: prefill, or draft / verify / accept
    drafter_passes: int = 0
    done: bool = False  # the generation ends with this round

    @property
    def k(self) -> int:
        return len(self.drafts)

    @property
    def is_prefill(self) -> bool:
        return self.index == 0


@dataclass
class SpecStats:
    k: int
    rounds: int = 0
    accepted: list = field(default_factory=list)  # accepted drafts per round
    attempted_at: list = field(default_factory=list)  # per position j: rounds that reached slot j
    accepted_at: list = field(default_factory=list)  # per position j: rounds that accepted slot j
    target_forwards: int = 0
    drafter_passes: int = 0
    new_tokens: int = 0
    times: dict = field(default_factory=dict)

    def __post_init__(self):
        self.attempted_at = list(self.attempted_at) + [0] * (self.k - len(self.attempted_at))
        self.accepted_at = list(self.accepted_at) + [0] * (self.k - len(self.accepted_at))

    def add_round(self, a: int, k: int):
        """Count one verification round that proposed ``k`` drafts and accepted ``a``."""
        self.rounds += 1
        self.accepted.append(a)
        for j in range(min(a + 1, k)):
            self.attempted_at[j] += 1
        for j in range(a):
            self.accepted_at[j] += 1

    def add(self, rnd: Round):
        """Count one :class:`Round` record (the prefill counts a target forward and its token only)."""
        if not rnd.is_prefill:
            self.add_round(rnd.accepted, rnd.k)
        self.target_forwards += 1
        self.drafter_passes += rnd.drafter_passes
        self.new_tokens += len(rnd.tokens)
        for name, s in rnd.times.items():
            self.times[name] = self.times.get(name, 0.0) + s

    @classmethod
    def from_rounds(cls, k: int, rounds) -> "SpecStats":
        stats = cls(k=k)
        for rnd in rounds:
            stats.add(rnd)
        return stats

    def merge(self, other: "SpecStats") -> "SpecStats":
        """A new SpecStats counting both (e.g. one generation per prompt, pooled); K is the larger one."""
        k = max(self.k, other.k)

        def pad(xs):
            return list(xs) + [0] * (k - len(xs))

        times = dict(self.times)
        for name, s in other.times.items():
            times[name] = times.get(name, 0.0) + s
        return SpecStats(k=k, rounds=self.rounds + other.rounds, accepted=self.accepted + other.accepted,
                         attempted_at=[a + b for a, b in zip(pad(self.attempted_at), pad(other.attempted_at))],
                         accepted_at=[a + b for a, b in zip(pad(self.accepted_at), pad(other.accepted_at))],
                         target_forwards=self.target_forwards + other.target_forwards,
                         drafter_passes=self.drafter_passes + other.drafter_passes,
                         new_tokens=self.new_tokens + other.new_tokens, times=times)

    @classmethod
    def merged(cls, stats, k: int | None = None) -> "SpecStats":
        """All of ``stats`` pooled (an empty list gives an empty SpecStats of ``k``)."""
        out = cls(k=k or 0)
        for s in stats:
            out = out.merge(s)
        return out

    @property
    def acceptance_length(self) -> float:
        """Mean accepted drafts per round + 1 (the bonus token), as vLLM and EAGLE report it."""
        return 1.0 + sum(self.accepted) / max(self.rounds, 1)

    @property
    def conditional_acceptance(self) -> list[float]:
        """P(slot j accepted | slots < j accepted), j = 1..K (NaN: slot never reached). Results files store it
        under ``per_position_acceptance``."""
        return [acc / att if att else float("nan") for acc, att in zip(self.accepted_at, self.attempted_at)]

    @property
    def unconditional_acceptance(self) -> list[float]:
        """P(slot j accepted) per round, j = 1..K: accepted at j / rounds (vLLM's per-position rate, see
        ``serving.metrics.unconditional_acceptance``)."""
        return [acc / self.rounds if self.rounds else float("nan") for acc in self.accepted_at]

    def as_dict(self) -> dict:
        total = sum(self.times.values())
        return {
            "k": self.k,
            "rounds": self.rounds,
            "new_tokens": self.new_tokens,
            "acceptance_length": round(self.acceptance_length, 4),
            "per_position_acceptance": [round(x, 4) for x in self.conditional_acceptance],  # conditional
            "unconditional_acceptance": [round(x, 4) for x in self.unconditional_acceptance],
            "target_forwards": self.target_forwards,
            "drafter_passes": self.drafter_passes,
            "time_s": {k: round(v, 5) for k, v in self.times.items()} | {"total": round(total, 5)},
        }


@dataclass
class GenerationResult:
    tokens: list  # generated ids (prompt excluded)
    stats: SpecStats | None
    seconds: float
    margins: list | None = None  # plain greedy only: top-1 minus top-2 logit where each token was chosen
    top_logits: list | None = None  # plain greedy only: the top-1 logit there (sets the bf16 tie bound)

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")


# ------------------------------------------------------------------------------------------ the loops
def _eos_set(eos_ids):
    if eos_ids is None:
        return set()
    return {int(eos_ids)} if isinstance(eos_ids, int) else {int(e) for e in eos_ids}


def _finish(tokens, eos, max_new):
    tokens = tokens[:max_new]
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1], True
    return tokens, len(tokens) >= max_new


@torch.no_grad()
def plain_generate(runner: TargetRunner, prompt_ids, max_new_tokens: int, eos_ids=None,
                   sampling: Sampling | None = None, gen=None) -> GenerationResult:
    """Baseline: KV-cached decoding one token per target forward, through the same call path."""
    sampling = sampling or Sampling()
    if not sampling.greedy:
        check_generator(gen, runner.device)
    eos = _eos_set(eos_ids)
    timer = Timer(runner.device)
    runner.reset()
    t0 = time.perf_counter()
    with timer("prefill"):
        logits, _ = runner.forward(prompt_ids, need_taps=False, last_only=True)
    out, margins, tops = [], [], []
    while True:
        last = logits[-1]
        tok = sampling.pick(last, gen)
        if sampling.greedy:
            top = last.float().topk(2).values
            margins.append(float(top[0] - top[1]))
            tops.append(float(top[0]))
        out.append(tok)
        out, done = _finish(out, eos, max_new_tokens)
        if done:
            break
        with timer("decode"):
            logits, _ = runner.forward([tok], need_taps=False)
    if timer.cuda:
        torch.cuda.synchronize()
    stats = SpecStats(k=0)
    stats.times = timer.totals
    stats.new_tokens = len(out)
    stats.target_forwards = len(out)
    greedy = sampling.greedy
    return GenerationResult(out, stats, time.perf_counter() - t0, margins[:len(out)] if greedy else None,
                            tops[:len(out)] if greedy else None)


def iter_rounds(runner: TargetRunner, drafter: DraftSource, prompt_ids, k: int, max_new_tokens: int,
                eos_ids=None, sampling: Sampling | None = None, gen=None) -> Iterator[Round]:
    """Speculative decoding as a stream of :class:`Round` records: the prefill's, then one per verification,
    the last with ``done``. The output is the rounds' ``tokens`` joined. Arguments are checked here, before the
    first record."""
    validate.num_speculative_tokens(k)  # the one K check: 1..64 (above the head's trained K is a note, not an error)
    sampling = sampling or Sampling()
    if not sampling.greedy:
        check_generator(gen, runner.device)
    drafter.check(runner, sampling, gen)
    prompt = [int(t) for t in (prompt_ids.tolist() if torch.is_tensor(prompt_ids) else prompt_ids)]
    if not prompt:
        raise PeagleError("The prompt is empty: speculative decoding needs at least one token.")
    return _rounds(runner, drafter, prompt, k, max_new_tokens, _eos_set(eos_ids), sampling, gen)


@torch.no_grad()
def _rounds(runner, drafter, prompt, k, max_new_tokens, eos, sampling, gen):
    runner.reset()
    drafter.reset()
    timer = Timer(runner.device)
    with timer("prefill"):
        logits, taps = runner.forward(prompt, last_only=True)
        first = sampling.pick(logits[-1], gen)
    out, done = _finish([first], eos, max_new_tokens)
    yield Round(0, [], 0, first, list(out), timer.totals, done=done)
    slots = Slots.after_prefill(prompt, first, taps)
    index = 0
    while not done:
        index += 1
        timer = Timer(runner.device)
        k_round = min(k, max_new_tokens - len(out))
        with timer("draft"):
            drafts, q = drafter.propose(slots, k_round, sampling, gen)
        draft_ids = drafts.tolist()
        last_pos = runner.length  # position of out[-1], not yet seen by the target
        with timer("verify"):
            logits, taps = runner.forward([out[-1]] + draft_ids)
        with timer("accept"):
            if sampling.greedy:
                a, bonus = accept_greedy(drafts, logits)
            else:
                a, bonus = accept_sampling(drafts, q, logits, sampling, gen)
            new = draft_ids[:a] + [bonus]
            runner.crop(last_pos + a + 1)  # keep out[-1] and the accepted drafts; the bonus is not seen yet
        before = len(out)
        out, done = _finish(out + new, eos, max_new_tokens)
        yield Round(index, draft_ids, a, bonus, out[before:], timer.totals, drafter.passes(k_round), done)
        slots = Slots.after_round(new, taps, last_pos)


def speculative_generate(runner: TargetRunner, drafter: DraftSource, prompt_ids, k: int, max_new_tokens: int,
                         eos_ids=None, sampling: Sampling | None = None, gen=None) -> GenerationResult:
    """Speculative decoding with ``drafter``; greedy output equals ``plain_generate``'s, token for token.
    (For a live view of every round use :func:`iter_rounds`.)"""
    rounds = iter_rounds(runner, drafter, prompt_ids, k, max_new_tokens, eos_ids, sampling, gen)
    t0 = time.perf_counter()
    stats, out = SpecStats(k=k), []
    for rnd in rounds:
        stats.add(rnd)
        out += rnd.tokens
    if runner.device.type == "cuda":
        torch.cuda.synchronize()
    return GenerationResult(out, stats, time.perf_counter() - t0)
