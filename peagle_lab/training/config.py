"""The settings of one training run: :class:`TrainConfig` (checked when made; ``asdict`` of it is what a
checkpoint and ``training.json`` record)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from ..data import MAX_SEQ_LEN
from ..errors import PeagleError
from ..precision import choice_name


MASK_HIDDEN_VARIANTS = ("learned", "zeros", "context", "random")
MASK_EMBEDDING_VARIANTS = ("learned", "frozen")


@dataclass
class TrainConfig:
    mode: str = "parallel"  # "parallel" (P-EAGLE) or "sequential" (EAGLE-3 training-time test)
    num_depths: int = 8  # K: depths trained (slot 1 .. K)
    layers: int = 1  # drafter decoder layers
    draft_vocab_size: int | None = 16384  # None: the full target vocabulary
    steps: int = 1000
    time_budget_s: float | None = None  # stop cleanly (and save) when the training loop has run this long
    schedule: str = "steps"  # cosine over "steps", or over "time" (time_budget_s) when the budget decides
    lr: float = 2e-3
    lm_head_lr_ratio: float = 0.25  # lm_head and final norm start from the target's: move them more gently
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    batch_tokens: int = 2048  # sequence tokens per optimizer step (gradient accumulation over packed rows)
    row_tokens: int = 512  # sequence tokens packed into one row (one forward)
    max_seq_len: int = MAX_SEQ_LEN
    cod_ratio: float = 0.7
    cod_min_ratio: float = 0.2
    mask_hidden: str = "learned"
    mask_embedding: str = "learned"
    mask_token_id: int | None = None  # None: picked from the tokenizer (an unused special token)
    tap_layers: tuple[int, ...] | None = None
    seed: int = 0
    log_every: int = 1
    save_every: int = 50  # optimizer steps between checkpoints (also on stop / Ctrl-C)
    autocast: str = "auto"  # "auto": bf16 on CUDA and CPUs with native bf16 (AMX / AVX512-BF16), else float32
    freeze_lm_head: bool = False  # keep lm_head and the final norm at the target's (speculators' choice)
    init_from: str | None = None  # a head directory to continue from (its draft vocabulary and mask token)
    snapshot_every_tokens: int | None = None  # save a head copy every N training tokens (the learning curve)
    accelerate: str = "auto"  # "auto": use accelerate's Accelerator on GPU / several processes; "no": never
    target: str = ""

    def __post_init__(self):
        if self.mode not in ("parallel", "sequential"):
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}")
        if self.mask_hidden not in MASK_HIDDEN_VARIANTS:
            raise PeagleError(f"mask_hidden must be one of {MASK_HIDDEN_VARIANTS}, got {self.mask_hidden!r}")
        if self.mask_embedding not in MASK_EMBEDDING_VARIANTS:
            raise PeagleError(f"mask_embedding must be one of {MASK_EMBEDDING_VARIANTS}, got {self.mask_embedding!r}")
        if self.schedule not in ("steps", "time"):
            raise PeagleError(f"schedule must be 'steps' or 'time', got {self.schedule!r}")
        if self.schedule == "time" and not self.time_budget_s:
            raise PeagleError("schedule='time' needs time_budget_s. Fix: pass time_budget_s, or schedule='steps'.")
        self.autocast = choice_name(self.autocast)
        if self.num_depths < 1 or self.steps < 1 or self.layers < 1:
            raise PeagleError("num_depths, steps and layers must be >= 1.")
        self.betas = tuple(self.betas)
        self.tap_layers = tuple(self.tap_layers) if self.tap_layers else None

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})
