"""The settings of one training run: :class:`TrainConfig` (checked when made; ``asdict`` of it is what a
checkpoint and ``training.json`` record; its fields' metadata makes the ``peagle-lab train`` flags, through
:mod:`peagle_lab.flags`)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import validate
from ..distill.data import MAX_SEQ_LEN
from ..errors import PeagleError
from ..flags import flag_field
from ..precision import choice_name


MASK_HIDDEN_VARIANTS = ("learned", "zeros", "context", "random")
MASK_EMBEDDING_VARIANTS = ("learned", "frozen")


SCHEDULES = ("steps", "time")
LOSSES = ("ce", "kl", "lk")


def _flag(name: str) -> str:
    return {"num_depths": "-K", "time_budget_s": "--time-budget"}.get(name, "--" + name.replace("_", "-"))
MODES = ("parallel", "sequential")


@dataclass
class TrainConfig:
    """One field, one ``peagle-lab train`` flag (``--field-name`` unless the metadata names another): a new field
    is a new flag."""

    mode: str = flag_field("parallel", "P-EAGLE (parallel) or EAGLE-3 (sequential, training-time test)",
                           choices=MODES)
    num_depths: int = flag_field(8, "K: depths (draft slots) trained for", short="-K")
    layers: int = flag_field(1, "drafter decoder layers (CLI default: 1, or the --init-from head's)")
    draft_vocab_size: int | None = flag_field(
        16384, "draft vocabulary (CLI default: 16384, or the --init-from head's; 0: the full target vocabulary)")
    steps: int = flag_field(1000, "optimizer steps")
    time_budget_s: float | None = flag_field(None, "seconds of training, then stop and save", flag="--time-budget",
                                       metavar="SECONDS")
    epochs: float | None = flag_field(None, "passes over the training sequences, then stop and save (with --steps and "
                                            "--time-budget: whichever comes first)")
    schedule: str = flag_field("steps", "cosine over steps or over the time budget (CLI default: time when "
                                  "--time-budget is given)", choices=SCHEDULES)
    lr: float = flag_field(2e-3, "peak learning rate")
    lm_head_lr_ratio: float = flag_field(0.25, "lr multiplier of lm_head and final norm (they start from the target's)")
    min_lr_ratio: float = flag_field(0.1, "the cosine's final lr, as a fraction of --lr")
    warmup_steps: int = flag_field(20, "linear warm-up steps")
    weight_decay: float = flag_field(0.0, "AdamW weight decay of the weight matrices")
    betas: tuple[float, float] = flag_field((0.9, 0.95), "AdamW betas", metavar=("BETA1", "BETA2"))
    grad_clip: float = flag_field(1.0, "gradient norm clip")
    batch_tokens: int = flag_field(2048, "sequence tokens per optimizer step (gradient accumulation over packed rows)")
    row_tokens: int = flag_field(512, "sequence tokens packed into one forward")
    max_seq_len: int = flag_field(MAX_SEQ_LEN, "longest sequence trained on (longer ones are cut)")
    loss: str = flag_field("ce", "ce: cross-entropy to the target's greedy token; kl: soft cross-entropy (KL up to a "
                           "constant) to the target's top-k distribution restricted to the draft vocabulary, "
                           "positions whose target top-1 is outside it masked; lk: acceptance-aligned, "
                           "lam*CE + (1-lam)*(1 - q(y)) with q(y) the head's probability of the greedy token (the "
                           "chance a token drawn from the head is accepted) and lam = exp(-3 * mean q(y)), so the "
                           "weight moves from CE to acceptance as the depth learns", choices=LOSSES)
    topk_logits: int = flag_field(32, "k of the target's top-k logits the kl loss learns from (read from the feature "
                                      "shards, or computed online)")
    cod_ratio: float = flag_field(0.7, "COD: depth d trains on ratio**d of the anchors")
    cod_min_ratio: float = flag_field(0.2, "COD: but on at least this fraction of them")
    mask_hidden: str = flag_field("learned", "hidden state of the mask slots", choices=MASK_HIDDEN_VARIANTS)
    mask_embedding: str = flag_field("learned", "embedding of the mask token", choices=MASK_EMBEDDING_VARIANTS)
    mask_token_id: int | None = flag_field(None, "the mask token (default: an unused special token of the tokenizer)")
    tap_layers: tuple[int, ...] | None = flag_field(None, "target layers whose residual streams feed the head "
                                                    "(default: EAGLE-3's low, middle and high layer)")
    seed: int = flag_field(0, "seed of the weights, the data order and COD sampling")
    log_every: int = flag_field(1, "optimizer steps between rows of train_log.jsonl")
    save_every: int = flag_field(50, "optimizer steps between checkpoints (also on stop / Ctrl-C)")
    autocast: str = flag_field("auto", "training precision (auto: bf16 autocast on CUDA and CPUs with AMX/AVX512-BF16, "
                                 "else float32)", choices=("auto", "float32", "bfloat16"))
    freeze_lm_head: bool = flag_field(False, "keep lm_head and final norm at the target's (speculators' choice)")
    init_from: str | None = flag_field(None, "continue a trained head (its weights, draft vocabulary, mask token; "
                                             "fresh optimizer)", metavar="HEAD_DIR")
    snapshot_every_tokens: int | None = flag_field(None, "save a head copy every N training tokens (for the "
                                                   "acceptance-vs-tokens curve)")
    target: str = flag_field("", cli=False)  # set by --target (the target options shared by every command)

    def __post_init__(self):
        if self.mode not in MODES:
            raise PeagleError(f"mode must be 'parallel' or 'sequential', got {self.mode!r}. Fix: --mode parallel or "
                              "--mode sequential.")
        if self.mask_hidden not in MASK_HIDDEN_VARIANTS:
            raise PeagleError(f"mask_hidden must be one of {MASK_HIDDEN_VARIANTS}, got {self.mask_hidden!r}. Fix: "
                              "--mask-hidden learned.")
        if self.mask_embedding not in MASK_EMBEDDING_VARIANTS:
            raise PeagleError(f"mask_embedding must be one of {MASK_EMBEDDING_VARIANTS}, got {self.mask_embedding!r}. "
                              "Fix: --mask-embedding learned.")
        if self.loss not in LOSSES:
            raise PeagleError(f"loss must be one of {LOSSES}, got {self.loss!r}. Fix: --loss ce, kl or lk.")
        if self.loss == "kl" and self.topk_logits < 1:
            raise PeagleError(f"--loss kl needs --topk-logits >= 1, got {self.topk_logits}.")
        if self.schedule not in SCHEDULES:
            raise PeagleError(f"schedule must be 'steps' or 'time', got {self.schedule!r}. Fix: --schedule steps.")
        if self.schedule == "time" and not self.time_budget_s:
            raise PeagleError("schedule='time' needs time_budget_s. Fix: pass time_budget_s, or schedule='steps'.")
        self.autocast = choice_name(self.autocast)
        if self.autocast == "float16":
            raise PeagleError("float16 is not supported for training (fp16 autocast would need loss scaling). "
                              "Fix: --autocast bfloat16, float32 or auto.")
        self._check_ranges()
        self.betas = tuple(self.betas)
        self.tap_layers = tuple(self.tap_layers) if self.tap_layers else None

    def _check_ranges(self) -> None:
        """Every number in the range where training means something: a run that cannot learn (lr 0, no time)
        is refused, not run."""
        for name in ("num_depths", "steps", "layers", "batch_tokens", "row_tokens", "log_every"):
            validate.positive_int(getattr(self, name), name, _flag(name))
        validate.positive_int(self.max_seq_len, "max_seq_len", "--max-seq-len", 2)
        validate.positive_int(self.warmup_steps, "warmup_steps", "--warmup-steps", 0)
        validate.positive_int(self.save_every, "save_every", "--save-every", 0)
        validate.seed(self.seed)
        validate.finite(self.lr, "lr", "--lr", low=0, low_open=True, high=1)
        validate.finite(self.lm_head_lr_ratio, "lm_head_lr_ratio", "--lm-head-lr-ratio", low=0)
        validate.finite(self.min_lr_ratio, "min_lr_ratio", "--min-lr-ratio", low=0, high=1)
        validate.finite(self.weight_decay, "weight_decay", "--weight-decay", low=0)
        validate.finite(self.grad_clip, "grad_clip", "--grad-clip", low=0, low_open=True)
        validate.finite(self.cod_ratio, "cod_ratio", "--cod-ratio", low=0, low_open=True, high=1)
        validate.finite(self.cod_min_ratio, "cod_min_ratio", "--cod-min-ratio", low=0, high=1)
        if len(tuple(self.betas)) != 2:
            raise PeagleError(f"betas must be two numbers, got {self.betas!r}. Fix: --betas 0.9 0.95.")
        for i, b in enumerate(self.betas):
            validate.finite(b, f"betas[{i}]", "--betas", low=0, high=1, high_open=True)
        if self.time_budget_s is not None:
            validate.finite(self.time_budget_s, "time_budget_s", "--time-budget", low=0, low_open=True)
        if self.epochs is not None:
            validate.finite(self.epochs, "epochs", "--epochs", low=0, low_open=True)
        if self.draft_vocab_size is not None:
            validate.positive_int(self.draft_vocab_size, "draft_vocab_size", "--draft-vocab-size", 1)
        if self.mask_token_id is not None:
            validate.positive_int(self.mask_token_id, "mask_token_id", "--mask-token-id", 0)
        if self.snapshot_every_tokens is not None:
            validate.positive_int(self.snapshot_every_tokens, "snapshot_every_tokens", "--snapshot-every-tokens")


def check_config_fits_target(cfg: TrainConfig, model, target) -> None:
    """Before any feature is computed: the draft vocabulary, taps, mask token and ``init_from`` head of ``cfg``
    must fit the target (one line naming the target, what does not fit and the fix)."""
    from ..drafter.heads import head_fit_problems, target_slug
    from ..features.taps import tap_range_problem

    tc = model.config
    name = target_slug(target)
    if cfg.draft_vocab_size is not None and cfg.draft_vocab_size > tc.vocab_size:
        raise PeagleError(f"target {name}: --draft-vocab-size {cfg.draft_vocab_size} exceeds its vocabulary of "
                          f"{tc.vocab_size} ids. Fix: --draft-vocab-size {tc.vocab_size} or less.")
    taps = tap_range_problem(cfg.tap_layers or (), tc.num_hidden_layers)
    if taps:
        raise PeagleError(f"target {name}: {taps}. Fix: --tap-layers within 0..{tc.num_hidden_layers - 1} (or leave "
                          "the default).")
    if cfg.mask_token_id is not None and not 0 <= cfg.mask_token_id < tc.vocab_size:
        raise PeagleError(f"target {name}: --mask-token-id {cfg.mask_token_id} is outside its vocabulary of "
                          f"{tc.vocab_size} ids. Fix: an unused special token of its tokenizer (or leave the default).")
    if cfg.init_from:
        problems = head_fit_problems(cfg.init_from, model)
        if problems:
            raise PeagleError(f"target {name}: the --init-from head {cfg.init_from} does not fit it: "
                              + "; ".join(problems) + ". Fix: start from a head trained for this target, or "
                              "leave --init-from out.")
