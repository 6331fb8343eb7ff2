"""Sampling and acceptance: what the speculative loop draws with and how it decides which drafts survive.

* :class:`Sampling` (temperature + top-p; temperature 0 = greedy) and :func:`sample`;
* :func:`make_generator` / :func:`check_generator`: the one random generator of a sampled run, on the right device;
* :func:`accept_greedy` / :func:`accept_sampling`: the acceptance rules (longest agreeing prefix; speculative
  sampling), each returning ``(accepted drafts, the target's next token)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import PeagleError


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

    def pick(self, logits_row: torch.Tensor, gen: torch.Generator | None) -> int:
        """The next token from one row of logits: argmax when greedy, else a draw from :meth:`probs`."""
        return int(logits_row.argmax()) if self.greedy else int(sample(self.probs(logits_row), gen))


def sample(probs: torch.Tensor, gen: torch.Generator | None) -> torch.Tensor:
    """One draw per row of ``probs``."""
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
                          "sampling.make_generator(runner.device, seed) (= torch.Generator(device=runner.device)"
                          ".manual_seed(seed)).")


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
    numbers. The draws are taken in a fixed order (one uniform per draft examined, then the residual or bonus
    sample), so a seeded CPU run gives the same tokens every time.
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
        return j, int(sample(residual / residual.sum(), gen))
    return k, int(sample(p[k], gen))
