"""The speculative decoding loop: draft K -> verify in one target pass -> accept -> roll back caches.

Read it top to bottom:

* ``TargetRunner`` owns the target model and its KV cache (``forward`` appends, ``crop`` rolls back);
* a *draft source* proposes K tokens given the newly committed context (``HeadDrafter`` in parallel or
  sequential mode, ``OracleDrafter`` and ``RandomDrafter`` as test doubles);
* ``accept_greedy`` / ``accept_sampling`` decide how many drafts survive (+1 token from the target);
* ``speculative_generate`` strings them together; ``plain_generate`` is the baseline on the same call path.

Cache contract (EAGLE shift): drafter slot ``t`` holds token ``x[t+1]`` and the target's taps at ``t``, at
RoPE position ``t``. Each round the drafter first receives the newly committed slots, then drafts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .drafter import PEagleDrafter, check_k
from .errors import PeagleError
from .taps import check_tap_layers, default_tap_layers, target_forward
from .timer import Timer


# ------------------------------------------------------------------------------------------ sampling
@dataclass
class Sampling:
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """Temperature + nucleus (top-p) filtering, in float32."""
        probs = torch.softmax(logits.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_p, idx = probs.sort(dim=-1, descending=True)
            cum = sorted_p.cumsum(-1)
            drop = cum - sorted_p > self.top_p  # keep the smallest set whose mass reaches top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(-1, idx, sorted_p)
            probs = probs / probs.sum(-1, keepdim=True)
        return probs


def _sample(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=gen).squeeze(-1)


def make_generator(device, seed: int) -> torch.Generator:
    """The one random generator of a sampled generation, on ``device`` (the runner's: ``runner.device``).

    ``torch.multinomial`` and ``torch.rand`` need a generator on the device of the tensors they draw for, so a CPU
    generator crashes a CUDA run. On the CPU this is ``torch.Generator().manual_seed(seed)``: the same draws."""
    return torch.Generator(device=torch.device(device)).manual_seed(int(seed))


def _same_device(a, b) -> bool:
    a, b = torch.device(a), torch.device(b)
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device() if torch.cuda.is_available() else 0
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


def check_generator(gen: torch.Generator | None, device) -> None:
    """Refuse a generator that cannot draw on ``device`` (the sampling tensors live there), naming the fix."""
    if gen is not None and not _same_device(gen.device, device):
        raise PeagleError(f"The random generator is on {gen.device} but sampling runs on {torch.device(device)}: "
                          "torch cannot draw there with it. Fix: create it on the runner's device, "
                          "speculative.make_generator(runner.device, seed) (= torch.Generator(device=runner.device)"
                          ".manual_seed(seed)).")


# ------------------------------------------------------------------------------------------ target
class TargetRunner:
    """The target model with its own KV cache. ``forward`` appends tokens; ``crop(n)`` keeps n positions."""

    def __init__(self, model, tap_layers=None):
        check_cache_rollback(model.config)
        self.model = model
        L = model.config.num_hidden_layers
        self.tap_layers = check_tap_layers(tap_layers or default_tap_layers(L), L)
        self.device = next(model.parameters()).device
        self.reset()

    def reset(self):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.length = 0

    @torch.no_grad()
    def forward(self, ids, need_taps: bool = True, last_only: bool = False):
        """ids: 1-D list/tensor of new tokens. Returns (logits (T,V), taps (T,3H) or None).

        ``last_only``: logits of the last position only, shape (1, V) (a prefill needs no more: the lm_head over
        a long prompt costs more than the rest of a decode step).
        """
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device).view(1, -1)
        T = ids.shape[1]
        pos = torch.arange(self.length, self.length + T, device=self.device)[None]
        keep = 1 if last_only else 0
        if need_taps:
            out = target_forward(self.model, ids, self.tap_layers, past_key_values=self.cache, position_ids=pos,
                                 logits_to_keep=keep)
            logits, taps, cache = out.logits, out.taps, out.past_key_values
        else:
            out = self.model(input_ids=ids, past_key_values=self.cache, position_ids=pos, use_cache=True,
                             logits_to_keep=keep)
            logits, taps, cache = out.logits, None, out.past_key_values
        self.cache = cache
        self.length += T
        return logits[0], (taps[0] if taps is not None else None)

    def crop(self, n: int):
        """Roll back to the first ``n`` positions (transformers >= 5: a negative count removes tokens)."""
        remove = self.length - n
        if remove > 0:
            self.cache.crop(-remove)
            self.length = n


def check_cache_rollback(config) -> None:
    """Refuse a target whose KV cache ``TargetRunner.crop`` cannot roll back: sliding-window (or chunked)
    attention layers keep only their last ``window`` positions, so after a rejected draft the evicted positions
    cannot come back and the next verification would attend to the wrong keys (output no longer equal to plain
    decoding); other non-attention layer types (linear attention, convolutions, state-space layers) keep a running
    state a crop does not rewind.

    Rule: every layer in ``layer_types`` is ``full_attention``, or is ``sliding_attention`` / ``chunked_attention``
    with a window (``sliding_window`` / ``attention_chunk_size``) >= ``max_position_embeddings`` (never evicts:
    global in effect); without ``layer_types``, an integer ``sliding_window`` below ``max_position_embeddings`` makes
    every layer sliding unless ``use_sliding_window`` is False (Mistral / Qwen2 style)."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    max_pos = getattr(cfg, "max_position_embeddings", None)

    def evicts(window):
        return isinstance(window, int) and not isinstance(window, bool) and window > 0 and (
            max_pos is None or window < max_pos)

    sliding, chunk = getattr(cfg, "sliding_window", None), getattr(cfg, "attention_chunk_size", None)
    layer_types = list(getattr(cfg, "layer_types", None) or [])
    problems = []
    if layer_types:
        windowed = {"sliding_attention": ("sliding_window", sliding), "chunked_attention": ("attention_chunk_size",
                                                                                            chunk)}
        for kind in dict.fromkeys(layer_types):
            layers = [i for i, t in enumerate(layer_types) if t == kind]
            if kind == "full_attention":
                continue
            if kind in windowed:
                name, window = windowed[kind]
                if evicts(window):
                    problems.append(f"{len(layers)} '{kind}' layer(s) (e.g. layer {layers[0]}) with {name}={window} "
                                    f"< max_position_embeddings={max_pos}")
            else:
                problems.append(f"{len(layers)} '{kind}' layer(s) (e.g. layer {layers[0]}), which keep a running "
                                "state instead of a per-position KV cache")
    elif evicts(sliding) and getattr(cfg, "use_sliding_window", True) is not False:
        problems.append(f"sliding_window={sliding} < max_position_embeddings={max_pos} on every layer")
    if problems:
        raise PeagleError(
            "This target cannot be used for speculative decoding here: " + "; ".join(problems) + ". A sliding-window "
            "(or stateful) cache drops what a rejected draft needs restored, and TargetRunner.crop can only roll back "
            "a full-attention KV cache, so the output would no longer equal plain decoding. Accepted: full-attention "
            "layers, and windows >= max_position_embeddings (global in effect). Fix: use a full-attention target "
            "(Llama, Qwen3, SmolLM2, ...); or, when prompt plus output always fit in the window, load the target "
            "with max_position_embeddings <= sliding_window (or use_sliding_window=False where the model was trained "
            "with global attention); or serve it with vLLM (serving.export_vllm), which manages its own KV cache.")


# ------------------------------------------------------------------------------------------ draft sources
class DraftSource:
    """Interface: ``reset()``, then per round ``propose(ctx_tokens, ctx_taps, start_pos, k, sampling, gen)``.

    ``ctx_tokens[i]``/``ctx_taps[i]`` are the newly committed slots at positions ``start_pos + i`` (token
    ``x[t+1]`` with target taps at ``t``). Returns ``(draft_ids (k,), draft_probs (k, V) or None)`` with
    probabilities over the TARGET vocabulary when sampling.
    """

    name = "draft"

    def reset(self):
        pass

    def propose(self, ctx_tokens, ctx_taps, start_pos, k, sampling, gen):  # pragma: no cover - interface
        raise NotImplementedError


class HeadDrafter(DraftSource):
    """A trained (or untrained) P-EAGLE / EAGLE-3 head, used in ``parallel`` or ``sequential`` mode."""

    def __init__(self, head: PEagleDrafter, mode: str | None = None):
        self.head = head
        self.mode = mode or head.config.mode
        if self.mode not in ("parallel", "sequential"):
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}")
        self.name = f"{self.mode}"
        self.device = next(head.parameters()).device
        self.dtype = next(head.parameters()).dtype
        self.reset()

    def reset(self):
        self.cache = self.head.new_cache()

    def _pick(self, logits, sampling, gen):
        """Draft-vocab logits (n, Vd) -> target ids (n,), target-vocab probs (n, V) or None."""
        full = self.head.to_target_logits(logits.float())
        if sampling.greedy:
            return full.argmax(-1), None
        probs = sampling.probs(full)
        return _sample(probs, gen), probs

    @torch.no_grad()
    def propose(self, ctx_tokens, ctx_taps, start_pos, k, sampling, gen):
        head = self.head
        check_k(k, head.config, warn=False)  # the loop warns once per generation, not once per round
        self.cache.crop(start_pos)  # drop last round's speculative slots
        n = len(ctx_tokens)
        tokens = torch.as_tensor(ctx_tokens, dtype=torch.long, device=self.device).view(1, n)
        hidden = head.fuse(ctx_taps.to(self.device, self.dtype).view(1, n, -1))
        if self.mode == "parallel":
            mask_id = head.config.mask_token_id
            tokens = torch.cat([tokens, tokens.new_full((1, k - 1), mask_id)], dim=1)
            hidden = torch.cat([hidden, head.mask_slot_hidden().to(hidden.dtype).expand(1, k - 1, -1)], dim=1)
            pos = torch.arange(start_pos, start_pos + n + k - 1, device=self.device)[None]
            logits, _ = head(tokens, hidden, pos, cache=self.cache, logits_from=n - 1)
            return self._pick(logits[0], sampling, gen)
        # sequential (EAGLE-3): K passes, each feeding back the drafted token and its prenorm state
        pos = torch.arange(start_pos, start_pos + n, device=self.device)[None]
        logits, prenorm = head(tokens, hidden, pos, cache=self.cache, logits_from=n - 1)
        ids, probs = [], []
        tok, p = self._pick(logits[0, -1:], sampling, gen)
        for j in range(1, k + 1):
            ids.append(tok)
            probs.append(p)
            if j == k:
                break
            step_pos = torch.tensor([[start_pos + n - 1 + j]], device=self.device)
            logits, prenorm = head(tok.view(1, 1), prenorm[:, -1:], step_pos, cache=self.cache)
            tok, p = self._pick(logits[0], sampling, gen)
        return torch.cat(ids), (None if sampling.greedy else torch.cat(probs))


class OracleDrafter(DraftSource):
    """Proposes the reference continuation (e.g. plain greedy output): every draft is accepted."""

    name = "oracle"

    def __init__(self, reference_ids, vocab_size: int):
        self.ref = list(reference_ids)
        self.vocab_size = vocab_size

    def propose(self, ctx_tokens, ctx_taps, start_pos, k, sampling, gen):
        first = start_pos + len(ctx_tokens) + 1  # sequence index of draft token 1
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

    def propose(self, ctx_tokens, ctx_taps, start_pos, k, sampling, gen):
        ids = torch.randint(0, self.vocab_size, (k,), generator=self.gen)
        probs = None if sampling.greedy else torch.full((k, self.vocab_size), 1.0 / self.vocab_size)
        return ids, probs


# ------------------------------------------------------------------------------------------ acceptance
def accept_greedy(drafts: torch.Tensor, target_logits: torch.Tensor):
    """Longest prefix of drafts equal to the target's argmax, plus the target's own next token.

    Computed where the logits are; only the two ints come back (one transfer)."""
    pred = target_logits.argmax(-1)  # (k+1,)
    match = (drafts.to(pred.device) == pred[:-1]).int()
    a = match.cumprod(0).sum()
    a, bonus = torch.stack([a, pred[a]]).tolist()
    return a, bonus


def accept_sampling(drafts, draft_probs, target_logits, sampling: Sampling, gen):
    """Speculative sampling (Leviathan et al.; Chen et al.): output is distributed exactly as the target's.

    Accept draft j with probability min(1, p_j(d)/q_j(d)); at the first rejection sample from
    normalise(max(p_j - q_j, 0)); if all K are accepted, sample the bonus token from p_{K+1}.

    Everything stays on the logits' device (``gen`` must live there, see :func:`make_generator`); only the
    drafted tokens' probabilities (one transfer), each uniform draw and the sampled token come back as Python
    numbers. The draws are taken in the same order as ever, so a seeded CPU run gives the same tokens.
    """
    p = sampling.probs(target_logits)
    q = draft_probs.to(p.device).float()
    drafts = drafts.to(p.device)
    k = drafts.shape[0]
    rows = torch.arange(k, device=p.device)
    pds, qds = torch.stack([p[rows, drafts], q[rows, drafts]]).tolist()
    for j in range(k):
        pd, qd = pds[j], qds[j]
        u = float(torch.rand((), generator=gen, device=p.device))
        if qd > 0 and u < min(1.0, pd / qd):
            continue
        residual = (p[j] - q[j]).clamp_min(0)
        if float(residual.sum()) <= 0:  # p == q: any sample from p is right
            residual = p[j]
        return j, int(_sample(residual / residual.sum(), gen))
    return k, int(_sample(p[k], gen))


# ------------------------------------------------------------------------------------------ statistics
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
        self.attempted_at = [0] * self.k
        self.accepted_at = [0] * self.k

    def add_round(self, a: int, k: int):
        self.rounds += 1
        self.accepted.append(a)
        for j in range(min(a + 1, k)):
            self.attempted_at[j] += 1
        for j in range(a):
            self.accepted_at[j] += 1

    @property
    def acceptance_length(self) -> float:
        """Mean accepted drafts per round + 1 (the bonus token), as vLLM and EAGLE report it."""
        return 1.0 + sum(self.accepted) / max(self.rounds, 1)

    @property
    def per_position_acceptance(self) -> list[float]:
        """P(slot j accepted | slots < j accepted), j = 1..K."""
        return [acc / att if att else float("nan") for acc, att in zip(self.accepted_at, self.attempted_at)]

    def as_dict(self) -> dict:
        total = sum(self.times.values())
        return {
            "k": self.k,
            "rounds": self.rounds,
            "new_tokens": self.new_tokens,
            "acceptance_length": round(self.acceptance_length, 4),
            "per_position_acceptance": [round(x, 4) for x in self.per_position_acceptance],
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
        tok = int(last.argmax()) if sampling.greedy else int(_sample(sampling.probs(last), gen))
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


@torch.no_grad()
def speculative_generate(runner: TargetRunner, drafter: DraftSource, prompt_ids, k: int, max_new_tokens: int,
                         eos_ids=None, sampling: Sampling | None = None, gen=None, on_round=None) -> GenerationResult:
    """Speculative decoding with ``drafter``; greedy output equals ``plain_generate``'s, token for token.

    ``on_round(new_tokens, num_accepted)`` is called after every verification (for live displays).
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise PeagleError(f"K must be an integer >= 1, got {k!r}. Fix: pass k in 1..{64}.")
    if isinstance(drafter, HeadDrafter):
        check_k(k, drafter.head.config)  # errors for a bad K; one warning when K exceeds the trained K
        drafter.head.check_compatible(runner.model)
        if tuple(drafter.head.config.aux_hidden_state_layer_ids) != tuple(runner.tap_layers):
            raise PeagleError(
                f"The head was trained on taps {drafter.head.config.aux_hidden_state_layer_ids} but the runner taps "
                f"{runner.tap_layers}. Fix: TargetRunner(model, tap_layers=head.config.aux_hidden_state_layer_ids).")
    sampling = sampling or Sampling()
    if not sampling.greedy:
        check_generator(gen, runner.device)
        if isinstance(drafter, HeadDrafter):
            check_generator(gen, drafter.device)  # the head samples its drafts where it lives
    eos = _eos_set(eos_ids)
    prompt = [int(t) for t in (prompt_ids.tolist() if torch.is_tensor(prompt_ids) else prompt_ids)]
    if not prompt:
        raise PeagleError("The prompt is empty: speculative decoding needs at least one token.")
    timer = Timer(runner.device)
    stats = SpecStats(k=k)
    runner.reset()
    drafter.reset()
    t0 = time.perf_counter()

    with timer("prefill"):
        logits, taps = runner.forward(prompt, last_only=True)
    first = int(logits[-1].argmax()) if sampling.greedy else int(_sample(sampling.probs(logits[-1]), gen))
    stats.target_forwards += 1
    out, done = _finish([first], eos, max_new_tokens)
    # the drafter's first slots: (x[t+1], taps[t]) for every prompt position t
    ctx_tokens, ctx_taps, ctx_start = prompt[1:] + [first], taps, 0
    while not done:
        k_round = min(k, max_new_tokens - len(out))
        with timer("draft"):
            drafts, q = drafter.propose(ctx_tokens, ctx_taps, ctx_start, k_round, sampling, gen)
        stats.drafter_passes += 1 if getattr(drafter, "mode", "parallel") == "parallel" else k_round
        last_pos = runner.length  # position of out[-1], not yet seen by the target
        with timer("verify"):
            logits, taps = runner.forward([out[-1]] + drafts.tolist())
        stats.target_forwards += 1
        with timer("accept"):
            if sampling.greedy:
                a, bonus = accept_greedy(drafts, logits)
            else:
                a, bonus = accept_sampling(drafts, q, logits, sampling, gen)
            new = drafts[:a].tolist() + [bonus]
            runner.crop(last_pos + a + 1)  # keep out[-1] and the accepted drafts; the bonus is not seen yet
        stats.add_round(a, k_round)
        if on_round is not None:
            on_round(new, a)
        out, done = _finish(out + new, eos, max_new_tokens)
        ctx_tokens, ctx_taps, ctx_start = new, taps[: a + 1], last_pos
    if timer.cuda:
        torch.cuda.synchronize()
    stats.times = timer.totals
    stats.new_tokens = len(out)
    return GenerationResult(out, stats, time.perf_counter() - t0)


# ------------------------------------------------------------------------------------------ lossless checks
# bf16 keeps 8 significant bits: one unit in the last place (ulp) of a logit of size |z| is 2**(floor(log2|z|)-7).
# Verifying K+1 tokens in one pass and decoding them one at a time run the same maths through differently blocked
# kernels, and every layer rounds its output to bf16, so the two paths' logits differ by a few ulps. Where the
# top-2 logits of the plain run are closer than that, the two paths may pick different tokens: a near-tie, not a
# bug. BF16_TIE_ULPS is the number of ulps (of the top logit) up to which a divergence counts as a near-tie:
# 4 ulps = 2**-5 relative: 0.5 logits at |z| = 16..32, 1.0 at |z| = 32..64. (Measured on the embedded target:
# divergences sit at margins of 0 or 1 ulp; a wrong acceptance rule diverges at margins of several logits.)
BF16_TIE_ULPS = 4


def logit_margin(logits_row: torch.Tensor) -> float:
    """Top-1 minus top-2 logit of one position (in float32)."""
    top = logits_row.float().topk(2).values
    return float(top[0] - top[1])


def tie_bound(dtype, top_logit: float) -> float:
    """The largest plain-run margin a divergence may have and still be a near-tie in ``dtype``: 0 in float32
    (exact equality is the invariant there), ``BF16_TIE_ULPS`` ulps of the top logit in bfloat16."""
    import math

    if dtype in (torch.float32, torch.float64):
        return 0.0
    exp = math.floor(math.log2(max(abs(top_logit), 2.0 ** -8)))
    return BF16_TIE_ULPS * 2.0 ** (exp - 7)


@dataclass
class Divergence:
    position: int  # index in the generated tokens where the outputs first differ
    margin: float  # the plain run's top-1 minus top-2 logit there
    bound: float  # tie_bound at that position
    got: int
    plain: int

    @property
    def near_tie(self) -> bool:
        return self.margin <= self.bound

    def as_dict(self) -> dict:
        return {"position": self.position, "margin": round(self.margin, 5), "bound": round(self.bound, 5),
                "near_tie": self.near_tie, "token": self.got, "plain_token": self.plain}


def first_divergence(tokens, plain: GenerationResult, dtype) -> Divergence | None:
    """Where ``tokens`` first differ from the plain greedy run ``plain`` (None when identical), with the plain
    run's logit margin there and the near-tie bound of ``dtype``."""
    n = min(len(tokens), len(plain.tokens))
    pos = next((i for i in range(n) if tokens[i] != plain.tokens[i]), None)
    if pos is None:
        if len(tokens) == len(plain.tokens):
            return None
        pos = n
    if plain.margins is None or pos >= len(plain.margins):
        raise PeagleError("The plain run has no logit margins at the divergence: run plain_generate greedily.")
    top = plain.top_logits[pos] if plain.top_logits else 16.0
    got = tokens[pos] if pos < len(tokens) else -1
    ref = plain.tokens[pos] if pos < len(plain.tokens) else -1
    return Divergence(pos, plain.margins[pos], tie_bound(dtype, top), got, ref)
