"""Draft sources: what proposes the K tokens of a speculative round.

Interface (:class:`DraftSource`): ``check(runner, sampling, gen)`` and ``notes(k)`` before a generation,
``reset()`` once per generation, then per round ``propose(slots, k, sampling, gen)`` with the newly committed :class:`~peagle_lab.decoding.slots.Slots` (EAGLE shift: slot t = token t+1 with the
target's taps at t). It returns ``(draft_ids (k,), draft_probs (k, V) or None)``, probabilities over the TARGET
vocabulary when sampling.

* :class:`HeadDrafter`: a P-EAGLE / EAGLE-3 head, ``parallel`` (one pass for K drafts) or ``sequential`` (K passes),
  the one way a head drafts (a head trained with ``mask_hidden='context'`` drafts through its view, see
  :func:`peagle_lab.drafter.context.drafting_head`);
* :class:`PromptLookupDrafter`: no model at all: copies what followed the latest earlier occurrence of the
  context's last tokens (vLLM's ``ngram`` method); the baseline a trained head must beat;
* :class:`OracleDrafter` / :class:`RandomDrafter`: test doubles (every draft accepted / almost none);
* :class:`RatedOracleDrafter`: the reference continuation with set per-position acceptance rates, charged a real
  head's drafting cost: what a head with a given (e.g. the paper's) acceptance would give on this machine.
"""

from __future__ import annotations

import torch

from ..drafter import PEagleDrafter
from ..drafter.context import drafting_head
from ..errors import PeagleError
from .sampling import check_generator, sample
from .slots import Slots


class DraftSource:
    """Interface: ``check``, ``notes``, ``reset()``, then per round ``propose(slots, k, sampling, gen)`` (see the
    module)."""

    name = "draft"

    def check(self, runner, sampling, gen) -> None:
        """Raise :class:`PeagleError` when this source cannot draft for ``runner``'s target (before any work)."""

    def notes(self, k: int) -> list[str]:
        """What a caller may want to tell its user about drafting ``k`` tokens a round (nothing by default)."""
        return []

    def reset(self):
        pass

    def passes(self, k: int) -> int:
        """Drafter forward passes a round of ``k`` drafts costs."""
        return 1

    def propose(self, slots: Slots, k, sampling, gen):  # pragma: no cover - interface
        raise NotImplementedError


class HeadDrafter(DraftSource):
    """A trained (or untrained) P-EAGLE / EAGLE-3 head, used in ``parallel`` or ``sequential`` mode."""

    def __init__(self, head: PEagleDrafter, mode: str | None = None):
        self.head = drafting_head(head)
        self.mode = mode or head.config.mode
        if self.mode not in ("parallel", "sequential"):
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}")
        self.name = f"{self.mode}"
        self.device = next(head.parameters()).device
        self.dtype = next(head.parameters()).dtype
        self.reset()

    def check(self, runner, sampling, gen) -> None:
        """The head fits the runner's target (vocabulary, hidden size, tapped layers); a sampled run's generator
        lives where the head samples its drafts."""
        cfg = self.head.config
        self.head.check_compatible(runner.model)
        if tuple(cfg.aux_hidden_state_layer_ids) != tuple(runner.tap_layers):
            raise PeagleError(
                f"The head was trained on taps {cfg.aux_hidden_state_layer_ids} but the runner taps "
                f"{runner.tap_layers}. Fix: TargetRunner(model, tap_layers=head.config.aux_hidden_state_layer_ids).")
        if not sampling.greedy:
            check_generator(gen, self.device)

    def notes(self, k: int) -> list[str]:
        trained = self.head.config.num_speculative_tokens
        if k <= trained:
            return []
        return [f"K={k} exceeds the K={trained} this head was trained for: deeper slots were never trained and "
                "will rarely be accepted (output stays lossless)."]

    def reset(self):
        self.cache = self.head.new_cache()

    def passes(self, k: int) -> int:
        return 1 if self.mode == "parallel" else k

    def _pick(self, logits, sampling, gen):
        """Draft-vocab logits (n, Vd) -> target ids (n,), target-vocab probs (n, V) or None."""
        full = self.head.to_target_logits(logits.float())
        if sampling.greedy:
            return full.argmax(-1), None
        probs = sampling.probs(full)
        return sample(probs, gen), probs

    @torch.no_grad()
    def propose(self, slots: Slots, k, sampling, gen=None):
        """Draft ``k`` tokens after ``slots`` (the newly committed slots; the drafter's cache keeps the earlier
        ones and drops last round's speculative slots)."""
        head = self.head
        start, n = slots.start, len(slots)
        self.cache.crop(start)  # drop last round's speculative slots
        tokens = torch.as_tensor(slots.tokens, dtype=torch.long, device=self.device).view(1, n)
        hidden = head.fuse(slots.taps.to(self.device, self.dtype).view(1, n, -1))
        if self.mode == "parallel":
            mask_id = head.config.mask_token_id
            tokens = torch.cat([tokens, tokens.new_full((1, k - 1), mask_id)], dim=1)
            hidden = torch.cat([hidden, head.mask_slot_hidden().to(hidden.dtype).expand(1, k - 1, -1)], dim=1)
            pos = torch.arange(start, start + n + k - 1, device=self.device)[None]
            logits, _ = head(tokens, hidden, pos, cache=self.cache, logits_from=n - 1)
            return self._pick(logits[0], sampling, gen)
        # sequential (EAGLE-3): K passes, each feeding back the drafted token and its prenorm state
        pos = torch.arange(start, start + n, device=self.device)[None]
        logits, prenorm = head(tokens, hidden, pos, cache=self.cache, logits_from=n - 1)
        ids, probs = [], []
        tok, p = self._pick(logits[0, -1:], sampling, gen)
        for j in range(1, k + 1):
            ids.append(tok)
            probs.append(p)
            if j == k:
                break
            step_pos = torch.tensor([[start + n - 1 + j]], device=self.device)
            logits, prenorm = head(tok.view(1, 1), prenorm[:, -1:], step_pos, cache=self.cache)
            tok, p = self._pick(logits[0], sampling, gen)
        return torch.cat(ids), (None if sampling.greedy else torch.cat(probs))


def lookup_drafts(context, k: int, max_ngram: int = 3) -> list[int]:
    """``k`` drafts copied from ``context`` (token ids): the tokens that followed the latest earlier occurrence of its
    last ``n`` tokens, trying ``n = max_ngram`` down to 1; padded with the last copied (or context) token when the
    copy runs out or nothing matches."""
    context = [int(t) for t in context]
    for n in range(min(max_ngram, len(context) - 1), 0, -1):
        tail = context[-n:]
        for i in range(len(context) - n - 1, -1, -1):  # latest first; the match must end before the tail
            if context[i:i + n] == tail:
                follow = context[i + n:i + n + k]
                return follow + [follow[-1]] * (k - len(follow))
    return [context[-1]] * k


class PromptLookupDrafter(DraftSource):
    """Drafts by copying from the tokens committed so far (:func:`lookup_drafts`): no model, no training.

    It runs inside this package's loop, so its rounds are counted like a head's; the benchmarks also time
    transformers' own prompt lookup (``prompt_lookup_num_tokens``), inside ``generate``. It sees the prompt from its
    second token on (slot t holds token t + 1, so the first prompt token, a template or BOS marker, never reaches a
    drafter) and every committed token after it.
    """

    name = "prompt-lookup"

    def __init__(self, vocab_size: int, max_ngram: int = 3):
        if max_ngram < 1:
            raise PeagleError(f"max_ngram must be at least 1, got {max_ngram}. Fix: e.g. max_ngram=3.")
        self.vocab_size, self.max_ngram = int(vocab_size), int(max_ngram)
        self.context: list[int] = []

    def reset(self):
        self.context = []

    def passes(self, k: int) -> int:
        return 0  # a lookup, not a forward pass

    def propose(self, slots: Slots, k, sampling, gen):
        self.context += [int(t) for t in slots.tokens]
        ids = torch.tensor(lookup_drafts(self.context, k, self.max_ngram), dtype=torch.long)
        probs = None if sampling.greedy else torch.nn.functional.one_hot(ids, self.vocab_size).float()
        return ids, probs


class OracleDrafter(DraftSource):
    """Proposes the reference continuation (e.g. plain greedy output): every draft is accepted."""

    name = "oracle"

    def __init__(self, reference_ids, vocab_size: int):
        self.ref = list(reference_ids)
        self.vocab_size = vocab_size

    def propose(self, slots: Slots, k, sampling, gen):
        first = slots.end + 1  # sequence index of draft token 1 (slot t holds token t+1)
        ids = self.ref[first:first + k]
        ids = ids + [0] * (k - len(ids))
        ids = torch.tensor(ids, dtype=torch.long)
        probs = None if sampling.greedy else torch.nn.functional.one_hot(ids, self.vocab_size).float()
        return ids, probs


class RandomDrafter(DraftSource):
    """Uniformly random drafts: almost never accepted, so the loop's rejection path runs every round."""

    name = "random"

    def __init__(self, vocab_size: int, seed: int = 0):
        self.vocab_size = vocab_size
        self.gen = torch.Generator().manual_seed(seed)  # its own, on the CPU: the loop moves the ids where needed

    def propose(self, slots: Slots, k, sampling, gen):
        ids = torch.randint(0, self.vocab_size, (k,), generator=self.gen)
        probs = None if sampling.greedy else torch.full((k, self.vocab_size), 1.0 / self.vocab_size)
        return ids, probs


class RatedOracleDrafter(DraftSource):
    """The true greedy continuation, each draft kept with a set probability, else replaced by a wrong token.

    ``rates[j]`` is the probability that draft ``j + 1`` of a round is the reference token, drawn independently per
    slot: since the verification accepts a draft exactly when it equals the target's greedy token (the reference,
    in float32), the measured conditional acceptance ``P(slot j accepted | slots < j accepted)`` follows
    ``rates[j]`` (slots past the list take its last rate). The output stays the target's: the loop verifies every
    draft. ``cost``: a drafter (a :class:`HeadDrafter` in parallel mode) run on the same slots each round and its
    drafts thrown away, so the round is charged what a real head costs; ``None`` charges nothing.

    Before each generation set :attr:`reference` (prompt + plain greedy output, as :class:`OracleDrafter` takes);
    :meth:`reset` reseeds the draws from ``seed`` and the reference, so a prompt's draws do not depend on what ran
    before it.
    """

    name = "oracle-rates"

    def __init__(self, rates, vocab_size: int, cost: DraftSource | None = None, seed: int = 0):
        rates = [float(r) for r in rates]
        if not rates or any(not 0.0 <= r <= 1.0 for r in rates):
            raise PeagleError(f"Oracle acceptance rates must be probabilities in [0, 1], got {rates}. Fix: e.g. "
                              "--oracle-accept 0.8,0.7,0.6.")
        if vocab_size < 2:
            raise PeagleError("The oracle needs a vocabulary of at least 2 tokens to draft a wrong one.")
        self.rates, self.vocab_size, self.cost, self.seed = rates, int(vocab_size), cost, int(seed)
        self.reference: list[int] = []
        self.gen = torch.Generator()
        self.reset()

    def reset(self):
        mix = hash((self.seed, len(self.reference), tuple(self.reference[:64]))) & 0x7FFFFFFF
        self.gen.manual_seed(mix)
        if self.cost is not None:
            self.cost.reset()

    def passes(self, k: int) -> int:
        return self.cost.passes(k) if self.cost is not None else 0

    def rate(self, j: int) -> float:
        """The probability that draft ``j + 1`` of a round is the reference token."""
        return self.rates[min(j, len(self.rates) - 1)]

    def propose(self, slots: Slots, k, sampling, gen):
        if self.cost is not None:
            self.cost.propose(slots, k, sampling, gen)  # the real head's pass: its time is the round's drafting
        first = slots.end + 1  # sequence index of draft token 1 (slot t holds token t+1)
        ids = torch.tensor((self.reference[first:first + k] + [0] * k)[:k], dtype=torch.long)
        keep = torch.rand(k, generator=self.gen) < torch.tensor([self.rate(j) for j in range(k)])
        shift = torch.randint(1, self.vocab_size, (k,), generator=self.gen)  # never 0: a wrong token
        ids = torch.where(keep, ids, (ids + shift) % self.vocab_size)
        probs = None if sampling.greedy else torch.nn.functional.one_hot(ids, self.vocab_size).float()
        return ids, probs
