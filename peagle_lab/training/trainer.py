"""The trainer: :class:`Trainer` (optimizer, learning-rate schedule, checkpoints, resume, the loop), :func:`train_head`
and :func:`precision_probe`.

Runs on one CPU (fp32) or GPU (optional bf16 autocast), and unchanged under ``accelerate launch`` / ``torchrun``:
:class:`accelerate.Accelerator` is the one code path on every device (it places the model, wraps it in DDP when
several processes run and reduces across them); every process takes its own packed rows.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import lock, validate
from ..atomic import write_text
from ..drafter import PEagleConfig, PEagleDrafter
from ..errors import PeagleError
from ..features.identity import recorded_target_problem, target_identity
from .lineage import check_compatible, cumulative, head_config, history_of
from ..precision import dtype_name, resolve_dtype
from ..settings import display_path
from ..drafter.vocab import build_draft_vocab, check_draft_vocab, count_tokens, coverage, pick_mask_token_id
from .config import TrainConfig
from .distributed import check_world_size, make_accelerator
from .elements import plan_row
from .objective import DraftTrainer, tap_rms
from .packing import PackedRows
from ..jsonl_log import append_row, heal
from .state import (LOG_FILE, STATE_FILE, atomic_torch_save, check_resume_config, read_log, read_state,
                    trainable_state)


@dataclass
class TrainResult:
    head: PEagleDrafter
    log: list[dict]
    steps_done: int
    train_time_s: float
    stopped_by: str  # "steps", "time_budget", "epochs", "stop_after", "interrupt"
    out_dir: Path | None = None
    info: dict = field(default_factory=dict)


def lr_factor(cfg: TrainConfig, step: int, elapsed_s: float) -> float:
    """Linear warm-up over ``warmup_steps``, then cosine from 1 to ``min_lr_ratio`` over the steps (or the time
    budget with ``schedule='time'``)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "time":
        p = min(elapsed_s / cfg.time_budget_s, 1.0)
    else:
        p = min((step - cfg.warmup_steps) / max(cfg.steps - cfg.warmup_steps, 1), 1.0)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * p))


def draft_vocab_always(mask_token_id: int, tokenizer) -> list[int]:
    """The ids every draft vocabulary keeps: the mask token and the tokenizer's EOS id(s)."""
    eos = getattr(tokenizer, "eos_token_id", None) if tokenizer is not None else None
    return [mask_token_id] + ([eos] if isinstance(eos, int) else list(eos or []))


def check_target_settings(cfg: TrainConfig, vocab_size: int, tokenizer=None) -> None:
    """The settings that depend on the target (from its config.json, before its weights load): the mask token id
    within its vocabulary, the draft vocabulary no larger than it and large enough for the ids it always keeps."""
    if cfg.mask_token_id is not None:
        validate.token_id(cfg.mask_token_id, vocab_size, "mask_token_id", "--mask-token-id")
    if cfg.draft_vocab_size:
        mask = cfg.mask_token_id if cfg.mask_token_id is not None else (
            pick_mask_token_id(tokenizer) if tokenizer is not None else None)
        check_draft_vocab(cfg.draft_vocab_size, vocab_size,
                          draft_vocab_always(mask, tokenizer) if mask is not None else ())


@dataclass(frozen=True)
class TrainerOptions:
    """Where a :class:`Trainer` writes and what it prints. With ``out_dir`` the head is saved there
    (``config.json`` + ``model.safetensors``) and the training state (weights, optimizer, step, data cursor, RNG) to
    ``state_dir`` (default ``out_dir/checkpoint``) every ``save_every`` steps, when the time budget ends and on
    Ctrl-C; ``resume=True`` continues from it; ``overwrite=True`` starts afresh over a head or state already there
    (without either, one there is refused). ``progress``: the progress bar; ``verbose``: the run's messages."""

    out_dir: str | Path | None = None
    state_dir: str | Path | None = None
    resume: bool = False
    overwrite: bool = False
    progress: bool = True
    verbose: bool = True


class Trainer:
    """``Trainer(cfg, model, sequences, tokenizer, TrainerOptions(out_dir=...)).train()``.

    ``model``: the frozen target (its embeddings, norm and lm_head start the head). ``sequences``: from
    :func:`prepare_sequences` (in memory), or :func:`~peagle_lab.training.stream.shard_sequences` (streamed from
    feature shards). ``options``: where the head and the training state go, resume or overwrite, output
    (:class:`TrainerOptions`; its defaults when ``None``). ``log`` rows also go to ``state_dir/train_log.jsonl``.
    ``draft_ids``: the draft vocabulary (default: the most frequent labels, or the ``init_from`` head's).
    """

    def __init__(self, cfg: TrainConfig, model, sequences: list[dict], tokenizer=None,
                 options: TrainerOptions | None = None, draft_ids=None):
        options = options or TrainerOptions()
        self.cfg, self.model, self.seqs = cfg, model, sequences
        if not sequences:
            raise PeagleError("No training sequences. Fix: pass distilled records (--num-sequences >= 1, a --data "
                              "file with records of the --split).")
        if cfg.init_from is None:
            check_target_settings(cfg, model.config.vocab_size, tokenizer)
        self._setup_output(options)
        self._setup_device()
        source = self._init_source(model) if cfg.init_from else None
        self._setup_vocab(tokenizer, source, draft_ids)
        self._build_module(source)
        self.opt = self._optimizer()
        # sequences streamed from shards (training.stream) pack their own rows; a list is packed in memory
        self.rows = (sequences.rows(cfg.row_tokens, cfg.seed) if hasattr(sequences, "rows")
                     else PackedRows(sequences, cfg.row_tokens, cfg.seed))
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # COD sampling
        self.step, self.elapsed, self.log, self.tokens_seen = 0, 0.0, [], 0
        # tokens seen by the heads this one continues (snapshots are named by the cumulative count)
        self.tokens_before = 0
        if cfg.init_from:
            self.tokens_before = int(cumulative(history_of(cfg.init_from), dict(tokens_seen=0))["tokens_seen"] or 0)
        self._start(options)
        self.model_for_step, self.opt = self.acc.prepare(self.module, self.opt)

    # ---- setup steps (in __init__'s order) ----
    def _setup_output(self, options: TrainerOptions) -> None:
        self.out_dir = Path(options.out_dir) if options.out_dir else None
        self.state_dir = (Path(options.state_dir) if options.state_dir
                          else (self.out_dir / "checkpoint" if self.out_dir else None))
        self.progress, self.verbose = options.progress, options.verbose

    def _setup_device(self) -> None:
        """The accelerator (device, processes) and the training precision."""
        self.acc = make_accelerator(next(self.model.parameters()).device)
        self.device = self.acc.device
        self.rank, self.world = self.acc.process_index, self.acc.num_processes
        self.is_main = self.acc.is_main_process
        check_world_size(self.cfg, self.world)
        # bf16 autocast where the hardware multiplies bf16 natively (CUDA sm_80+, AMX, AVX512-BF16); fp32 elsewhere
        self.autocast = resolve_dtype(self.cfg.autocast, self.device, warn=self.verbose, training=True)
        self.identity = target_identity(self.model)  # the same for the fp32 and the bf16 copy of a target

    def _setup_vocab(self, tokenizer, source: PEagleDrafter | None, draft_ids) -> None:
        """The mask token and the draft vocabulary: the ``init_from`` head's, else the given or chosen ones."""
        cfg = self.cfg
        if source is not None:
            if cfg.mask_token_id is not None and cfg.mask_token_id != source.config.mask_token_id:
                raise PeagleError(f"--mask-token-id {cfg.mask_token_id} differs from the --init-from head's "
                                  f"{source.config.mask_token_id}. Fix: leave --mask-token-id unset.")
            draft_ids = source.draft_to_target_ids().cpu()
        mask_id = source.config.mask_token_id if source is not None else cfg.mask_token_id
        mask_id = mask_id if mask_id is not None else (
            pick_mask_token_id(tokenizer) if tokenizer is not None else None)
        if mask_id is None:
            raise PeagleError("TrainConfig.mask_token_id is unset and no tokenizer was given to pick one. "
                              "Fix: pass tokenizer=... or mask_token_id=<an unused token id>.")
        self.mask_token_id = int(mask_id)
        V = self.model.config.vocab_size
        if draft_ids is None:
            draft_ids, self.coverage = self._draft_vocab(V, tokenizer)
        else:
            self.coverage = coverage(self._label_counts(V), draft_ids, V)
        self.draft_ids = torch.as_tensor(draft_ids, dtype=torch.long)

    def _build_module(self, source: PEagleDrafter | None) -> None:
        """The head, started from the target (and loaded from the ``init_from`` head), in its trainable wrapper."""
        cfg, model = self.cfg, self.model
        torch.manual_seed(cfg.seed)
        hcfg = PEagleConfig.from_target(
            model.config, num_hidden_layers=cfg.layers, draft_vocab_size=self.draft_ids.numel(),
            aux_layer_ids=cfg.tap_layers, mask_token_id=self.mask_token_id, mode=cfg.mode,
            num_speculative_tokens=cfg.num_depths, embed_shared_with_target=True, target=cfg.target,
            extra=dict(mask_hidden_variant=cfg.mask_hidden, mask_embedding_variant=cfg.mask_embedding,
                       draft_vocab_coverage=round(self.coverage, 5), target_identity=self.identity))
        head = PEagleDrafter(hcfg)
        head.set_draft_vocab(self.draft_ids)
        head.init_from_target(model, self.draft_ids)
        self.module = DraftTrainer(head, cfg.mode, cfg.mask_hidden, cfg.mask_embedding,
                                   tap_scale=tap_rms(self.seqs), seed=cfg.seed, loss=cfg.loss).to(self.device)
        if source is not None:
            self.module.load_head(source.to(self.device))
        if cfg.freeze_lm_head:
            head.lm_head.weight.requires_grad_(False)
            head.norm.weight.requires_grad_(False)

    def _optimizer(self) -> torch.optim.AdamW:
        """AdamW over the trainable parameters: weight decay on matrices only, the lr of lm_head and the final
        norm (started from the target's) scaled by ``lm_head_lr_ratio``."""
        cfg, head = self.cfg, self.module.head
        pretrained = {id(p) for p in (head.lm_head.weight, head.norm.weight)}
        groups = {}
        for p in self.module.parameters():
            if p.requires_grad:
                key = (id(p) in pretrained, p.dim() >= 2)
                groups.setdefault(key, []).append(p)
        return torch.optim.AdamW(
            [{"params": ps, "weight_decay": cfg.weight_decay if matrix else 0.0,
              "lr_ratio": cfg.lm_head_lr_ratio if pre else 1.0} for (pre, matrix), ps in sorted(groups.items())],
            lr=cfg.lr, betas=cfg.betas)

    def _start(self, options: TrainerOptions) -> None:
        """Resume the saved state, or refuse to start over a head or state already there unless ``overwrite``;
        then trim the log to the starting step."""
        if options.resume:
            self._load_state()
        elif self.state_dir is not None and (self.state_dir / STATE_FILE).exists() and not options.overwrite:
            raise PeagleError(f"{self.state_dir} already holds a training state. Fix: pass "
                              "TrainerOptions(resume=True) (`--resume`) to continue it, --overwrite to start afresh "
                              "over it, or another --out / --state-dir.")
        if (not options.resume and not options.overwrite and self.out_dir is not None
                and (self.out_dir / "config.json").exists()):
            raise PeagleError(f"{self.out_dir} already holds a head. Fix: --resume to continue its training state, "
                              "--overwrite to replace it, or another --out.")
        self._trim_log()

    def _init_source(self, model) -> PEagleDrafter:
        cfg = self.cfg
        path = Path(cfg.init_from)
        head_config(path)  # a clear error naming --init-from when it is no head directory
        src = PEagleDrafter.from_pretrained(path, target=model, device="cpu")
        V = model.config.vocab_size
        check_compatible(src.config, dict(
            mode=cfg.mode, num_hidden_layers=cfg.layers, draft_vocab_size=cfg.draft_vocab_size or V,
            hidden_size=model.config.hidden_size, vocab_size=V,
            aux_hidden_state_layer_ids=cfg.tap_layers), path)
        other = recorded_target_problem(src.config.target_record(), model)
        if other:
            raise PeagleError(f"--init-from {path} was trained on another target ({other}). Fix: start from a head "
                              "trained for this target, or leave --init-from out.")
        return src

    # ---- draft vocabulary ----
    def _label_counts(self, V):
        """Counts of what the drafter is trained to predict: the labels at anchor positions."""
        if hasattr(self.seqs, "anchor_labels"):  # streamed: the labels are read without the taps
            return count_tokens(self.seqs.anchor_labels(), V)
        return count_tokens([s["labels"][max(s["prompt_len"] - 1, 0):] for s in self.seqs], V)

    def _draft_vocab(self, V, tokenizer):
        size = self.cfg.draft_vocab_size or V
        always = draft_vocab_always(self.mask_token_id, tokenizer)
        counts = self._label_counts(V)
        ids = build_draft_vocab(counts, size, V, always=always)
        return ids, coverage(counts, ids, V)

    # ---- state ----
    def state_dict(self) -> dict:
        return dict(step=self.step, elapsed_s=self.elapsed, model=trainable_state(self.module),
                    optimizer=self.opt.state_dict(), data=self.rows.state_dict(), cod_generator=self.gen.get_state(),
                    config=asdict(self.cfg), draft_ids=self.draft_ids, mask_token_id=self.mask_token_id,
                    torch_rng=torch.get_rng_state(), tokens_seen=self.tokens_seen)

    def _load_state(self):
        path = self.state_dir / STATE_FILE if self.state_dir else None
        if path is None or not path.exists():
            if self.verbose:
                print(f"[train] no state at {display_path(path)}: starting from step 0")
            return
        st = read_state(path)
        check_resume_config(st.get("config") or {}, asdict(self.cfg), path)
        if not torch.equal(st["draft_ids"], self.draft_ids) or st["mask_token_id"] != self.mask_token_id:
            raise PeagleError(f"{path} was trained with another draft vocabulary or mask token. Fix: resume with the "
                              "same data and settings, or start a new run in another directory.")
        missing, unexpected = self.module.load_state_dict(st["model"], strict=False)
        if unexpected or [m for m in missing if m != "head.embed_tokens.weight"]:
            raise PeagleError(f"{path} does not match this model ({missing}, {unexpected}): trained with other "
                              "settings (layers, mode, draft vocabulary). Fix: resume with the same settings.")
        self.opt.load_state_dict(st["optimizer"])
        self.rows.load_state_dict(st["data"])
        self.gen.set_state(st["cod_generator"])
        torch.set_rng_state(st["torch_rng"])
        self.step, self.elapsed = st["step"], st["elapsed_s"]
        self.tokens_seen = int(st.get("tokens_seen", 0))
        if self.verbose:
            print(f"[train] resumed from {display_path(path)} at step {self.step} ({self.elapsed:.0f} s trained)")

    def _trim_log(self) -> None:
        """The log keeps only the rows up to the step this run starts from (the resumed state's, else 0): rows a
        killed run wrote after its last saved state, or rows of a run started afresh over, would repeat."""
        log_path = self.state_dir / LOG_FILE if self.state_dir is not None else None
        if log_path is None or not log_path.exists():
            return
        if self.is_main:
            heal(log_path)  # a torn last row (a crash, a full disk) is cut before this run appends
        rows = read_log(log_path)
        self.log = [r for r in rows if r["step"] <= self.step]
        if self.is_main and len(self.log) < len(rows):  # every process reads the log; only rank 0 writes files
            write_text(log_path, "".join(json.dumps(r) + "\n" for r in self.log))

    def save(self):
        if not self.is_main:
            return
        if self.state_dir is not None:  # the state first: a full disk never leaves a newer head without its state
            self.state_dir.mkdir(parents=True, exist_ok=True)
            atomic_torch_save(self.state_dict(), self.state_dir / STATE_FILE)
        if self.out_dir is not None:
            self.save_head(self.out_dir)

    def save_head(self, path):
        head = self.module.sync_head()
        head.config.extra["trained_steps"] = self.step
        return head.save_pretrained(path)

    def _all_agree(self, flag: bool) -> bool:
        """``flag`` of any process, on every process (clocks differ: all must stop at the same step)."""
        if self.world <= 1:
            return flag
        t = torch.tensor([1.0 if flag else 0.0], device=self.device)
        return bool(self.acc.reduce(t, reduction="sum").item() > 0)

    def _maybe_snapshot(self, step_tokens: int) -> None:
        """A head copy in ``state_dir/snapshots/tokens-N`` each time the tokens seen cross a multiple of
        ``snapshot_every_tokens`` (N counts the tokens of the heads this one continues, too)."""
        every = self.cfg.snapshot_every_tokens
        if not every or not self.is_main or self.state_dir is None:
            return
        if self.tokens_seen // every > (self.tokens_seen - step_tokens) // every:
            self.save_head(self.state_dir / "snapshots" / f"tokens-{self.tokens_before + self.tokens_seen:09d}")

    # ---- one optimizer step ----
    def _train_step(self):
        cfg = self.cfg
        rows = self.rows.next_rows(cfg.batch_tokens, min_rows=self.world)
        # every process plans every row with the shared COD generator (it stays in step across processes and
        # with a single-process run), then keeps its own rows
        plans = [plan_row(r, cfg.num_depths, cfg.cod_ratio, cfg.cod_min_ratio, self.gen) for r in rows]
        weights = [sum(len(s["input_ids"]) for s in r) for r in rows]
        total = sum(weights)  # the global batch: the loss is its token-weighted mean, whatever the world size
        plans, weights = plans[self.rank::self.world], weights[self.rank::self.world]
        lr = cfg.lr * lr_factor(cfg, self.step, self.elapsed)
        for group in self.opt.param_groups:
            group["lr"] = lr * group["lr_ratio"]
        self.opt.zero_grad(set_to_none=True)
        agg = [dict(n=0, correct=0, loss_sum=0.0) for _ in range(cfg.num_depths)]
        loss_total = 0.0
        amp = self.autocast == torch.bfloat16
        for i, (plan, w) in enumerate(zip(plans, weights)):
            # DDP syncs the gradients once, in the last row's backward (no_sync for the rows before it)
            sync = self.acc.no_sync(self.model_for_step) if i < len(plans) - 1 else contextlib.nullcontext()
            with sync, torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=amp):
                loss, metrics = self.model_for_step(plan)
                self.acc.backward(loss * (w / total * self.world))  # DDP averages the processes' gradients
            loss_total += float(loss.detach()) * w / total
            for a, m in zip(agg, metrics):
                for k in a:
                    a[k] += m[k]
        if self.world > 1:  # the logged loss and accuracies are the global batch's
            stats = torch.tensor([loss_total] + [a[k] for a in agg for k in ("n", "correct", "loss_sum")],
                                 dtype=torch.float64, device=self.device)
            stats = self.acc.reduce(stats, reduction="sum").tolist()
            loss_total = stats[0]
            for j, a in enumerate(agg):
                a["n"], a["correct"], a["loss_sum"] = int(stats[1 + 3 * j]), int(stats[2 + 3 * j]), stats[3 + 3 * j]
        params = [p for p in self.module.parameters() if p.requires_grad]
        gnorm = self.acc.clip_grad_norm_(params, cfg.grad_clip)
        self.opt.step()
        return dict(loss=loss_total, lr=lr, grad_norm=float(gnorm), tokens=total,
                    acc=[round(a["correct"] / a["n"], 4) if a["n"] else None for a in agg],
                    depth_loss=[round(a["loss_sum"] / a["n"], 4) if a["n"] else None for a in agg],
                    elements=[a["n"] for a in agg])

    # ---- the loop ----
    def train(self, stop_after: int | None = None) -> TrainResult:
        """Run until ``cfg.steps`` (or the time budget, or ``stop_after`` more steps: a simulated interruption),
        holding the locks of the head and state directories (:mod:`peagle_lab.lock`: one writer each)."""
        with lock.hold(self.out_dir if self.is_main else None, self.state_dir if self.is_main else None):
            return self._train(stop_after)

    def _stop_reason(self, step_times: list[float], stop_asked: bool) -> str | None:
        """Why the loop stops before the next step: the time budget (the next step, at the median step time,
        would pass it), the epochs asked for, or ``stop_asked``; ``None`` to go on."""
        cfg = self.cfg
        if cfg.time_budget_s is not None:
            est = sorted(step_times)[len(step_times) // 2] if step_times else 0.0
            if self._all_agree(self.elapsed + est > cfg.time_budget_s):
                return "time_budget"
        if cfg.epochs is not None and self.rows.epochs_done() >= cfg.epochs:
            return "epochs"
        return "stop_after" if stop_asked else None

    def _train(self, stop_after: int | None) -> TrainResult:
        cfg = self.cfg
        self.module.train()
        log_path = None
        if self.is_main and self.state_dir is not None:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.state_dir / LOG_FILE
        bar = tqdm(total=cfg.steps, initial=self.step, desc=f"train {cfg.mode}", unit="step",
                   disable=not (self.progress and self.is_main))
        stopped_by, done_here, step_times = "steps", 0, []
        try:
            while self.step < cfg.steps:
                reason = self._stop_reason(step_times, stop_after is not None and done_here >= stop_after)
                if reason:
                    stopped_by = reason
                    break
                t0 = time.perf_counter()
                row = self._train_step()
                dt = time.perf_counter() - t0
                step_times.append(dt)
                self.elapsed += dt
                self.step += 1
                done_here += 1
                self.tokens_seen += row["tokens"]
                row = dict(step=self.step, time_s=round(self.elapsed, 2), step_s=round(dt, 3),
                           tokens_seen=self.tokens_seen, **row)
                row["loss"] = round(row["loss"], 4)
                self.log.append(row)
                if log_path is not None and (self.step % cfg.log_every == 0 or self.step == cfg.steps):
                    append_row(log_path, row)
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.3f}", acc0=row["acc"][0], accK=row["acc"][-1],
                                tok_s=f"{self.tokens_seen / max(self.elapsed, 1e-9):.0f}")
                self._maybe_snapshot(row["tokens"])
                if cfg.save_every and self.step % cfg.save_every == 0:
                    self.save()
        except KeyboardInterrupt:
            stopped_by = "interrupt"  # the step in flight never reached opt.step(): the state is consistent
            print(f"\n[train] interrupted: saving the state at step {self.step}")
        finally:
            bar.close()
        self.save()
        self.module.eval()
        if self.verbose and self.is_main:
            print(f"[train] {self.step} steps, {self.elapsed:.0f} s of training (stopped by {stopped_by})")
        if stopped_by == "interrupt":
            raise KeyboardInterrupt
        return TrainResult(self.module.sync_head(), self.log, self.step, self.elapsed, stopped_by, self.out_dir,
                           dict(draft_vocab_size=int(self.draft_ids.numel()), draft_vocab_coverage=self.coverage,
                                mask_token_id=self.mask_token_id, tokens_seen=self.tokens_seen,
                                epochs_done=round(self.rows.epochs_done(), 3),
                                tokens_per_s=round(self.tokens_seen / max(self.elapsed, 1e-9), 1),
                                autocast=dtype_name(self.autocast)))


def precision_probe(cfg: TrainConfig, model, sequences, tokenizer=None, rounds: int = 3) -> dict:
    """Training tokens/s in float32 and in bf16 autocast, measured side by side: ``rounds`` optimizer steps of
    each, interleaved (fp32, bf16, fp32, ...), on the run's own settings and data; the median step of each."""
    trainers = {name: Trainer(replace(cfg, autocast=name, steps=rounds + 1, time_budget_s=None, schedule="steps",
                                      init_from=None, snapshot_every_tokens=None), model, sequences,
                              tokenizer, TrainerOptions(progress=False, verbose=False))
                for name in ("float32", "bfloat16")}
    rates = {name: [] for name in trainers}
    for r in range(rounds + 1):  # the first step of each is a warm-up
        for name, tr in trainers.items():
            t0 = time.perf_counter()
            row = tr._train_step()
            if r:
                rates[name].append(row["tokens"] / (time.perf_counter() - t0))
    return {name: round(sorted(v)[len(v) // 2], 1) for name, v in rates.items()} | dict(
        rounds=rounds, batch_tokens=cfg.batch_tokens, threads=torch.get_num_threads())


def train_head(cfg: TrainConfig, model, sequences, tokenizer=None, stop_after: int | None = None,
               **options) -> TrainResult:
    """Convenience: ``Trainer(cfg, model, sequences, tokenizer, TrainerOptions(**options)).train(stop_after)``."""
    return Trainer(cfg, model, sequences, tokenizer, TrainerOptions(**options)).train(stop_after=stop_after)
