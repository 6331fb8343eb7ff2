"""Run-time settings read from the environment, shared by notebooks, CLI and tests."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"


def is_ci() -> bool:
    """``PEAGLE_CI=1``: small sizes, same code path (used by CI and the nbval runs)."""
    return os.environ.get("PEAGLE_CI", "0").lower() in ("1", "true", "yes")


def pick(full, ci):
    """Choose a size: ``ci`` under ``PEAGLE_CI=1``, else ``full``."""
    return ci if is_ci() else full


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def display_path(path) -> str:
    """A path as results and messages should show it: relative to the repository when inside it (no machine's
    absolute paths in committed files), else relative to the home directory as ``~/...``, else as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        pass
    try:
        return "~/" + p.resolve().relative_to(Path.home()).as_posix()
    except ValueError:
        return str(path)


def results_dir() -> Path:
    """Where runs write results (``$PEAGLE_RESULTS``, default ``<repo>/results``, wherever Jupyter started)."""
    path = Path(os.environ.get("PEAGLE_RESULTS", REPO_ROOT / "results"))
    path.mkdir(parents=True, exist_ok=True)
    return path
