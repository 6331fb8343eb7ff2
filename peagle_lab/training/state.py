"""The training state on disk: ``state.pt`` (weights, optimizer, step, data cursor, RNG), saved atomically,
the log beside it, and the check that a resumed run keeps the saved settings.

Why not accelerate's ``save_state`` / ``load_state`` (the trainer otherwise runs everything through the
``Accelerator``): every process writes into its directory (``random_states_<rank>.pkl``, and ``os.makedirs`` on each
rank), where here only rank 0 writes and a save is one atomic rename; and it saves the whole model, the frozen copy
of the target's embedding table included, which this state leaves out (it is rebuilt from the target)."""

from __future__ import annotations

import pickle
from pathlib import Path

import torch

from ..atomic import atomic_write
from ..errors import PeagleError
from ..jsonl_log import read_rows
from .objective import DraftTrainer


STATE_FILE = "state.pt"
LOG_FILE = "train_log.jsonl"


def read_log(path: Path) -> list[dict]:
    """The rows of a training log (``train_log.jsonl``, appended one line per step). A last line cut short by a
    crash in mid-write is left out (:func:`peagle_lab.jsonl_log.read_rows`): the resumed run writes that step
    again."""
    return read_rows(path)


def read_state(path: Path) -> dict:
    """The training state saved at ``path``, or one clear error when it is truncated or damaged."""
    try:
        st = torch.load(path, map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError) as exc:
        raise PeagleError(f"{path} cannot be read ({str(exc).splitlines()[0]}): the training state is truncated or "
                          "damaged. Fix: resume from a copy of it, or start afresh with --overwrite (the head in "
                          "--out is replaced).") from None
    keys = ("step", "elapsed_s", "model", "optimizer", "data", "config", "draft_ids", "mask_token_id")
    if not isinstance(st, dict) or any(k not in st for k in keys):
        raise PeagleError(f"{path} is not a training state of `peagle-lab train`. Fix: point --state-dir at the "
                          "folder a training wrote, or start afresh with --overwrite.")
    return st


def atomic_torch_save(obj, path: Path):
    atomic_write(path, lambda tmp: torch.save(obj, tmp))


def trainable_state(module: DraftTrainer) -> dict:
    # the embedding table is the target's (frozen) and is rebuilt from it: keep checkpoints small
    module.sync_head()
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items() if k != "head.embed_tokens.weight"}


# fields a resumed run may change; any other difference changes what the saved state means
RESUMABLE_FIELDS = ("steps", "time_budget_s", "log_every", "save_every", "autocast", "snapshot_every_tokens")


def check_resume_config(saved: dict, now: dict, path) -> None:
    """Refuse a resume whose settings differ from the saved state's, naming every differing field."""
    def norm(v):
        return list(v) if isinstance(v, tuple) else v

    diff = {k: (saved[k], now.get(k)) for k in saved
            if k not in RESUMABLE_FIELDS and k in now and norm(saved[k]) != norm(now.get(k))}
    if diff:
        fields = ", ".join(f"{k}: saved {a!r}, now {b!r}" for k, a, b in ((k, *v) for k, v in sorted(diff.items())))
        raise PeagleError(f"{path} was trained with other settings ({fields}). Fix: resume with the saved values, "
                          f"or start a new run in another --out. Only {', '.join(RESUMABLE_FIELDS)} may change on "
                          "resume.")


def resume_tolerance(device) -> tuple[float, float]:
    """``(largest loss difference, largest weight difference)`` within which an interrupted-and-resumed run counts
    as the uninterrupted run on ``device``. On a CPU the kernels are deterministic: (1e-4, 1e-5), rounding only.
    On CUDA, backward kernels that add with atomics (embedding backward, index_add, scatter) sum in a varying order,
    so two identical runs already differ in the last bits and Adam carries that through the steps: (1e-2, 1e-2),
    still an order of magnitude below what a broken resume gives (optimizer moments or the data cursor lost: loss
    jumps of 0.1 and more)."""
    return (1e-4, 1e-5) if torch.device(device).type == "cpu" else (1e-2, 1e-2)
