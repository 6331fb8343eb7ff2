"""Shipped heads for the embedded target and a single ``load_head`` entry point."""

from __future__ import annotations

from pathlib import Path

from .drafter import PEagleDrafter
from .errors import PeagleError
from .settings import DATA_DIR

HEADS_DIR = DATA_DIR / "heads"
SHIPPED = {
    "parallel": HEADS_DIR / "smollm2-135m-peagle",  # P-EAGLE, trained for K=8
    "sequential": HEADS_DIR / "smollm2-135m-eagle3",  # EAGLE-3 style, same data and budget
}


def shipped_head_path(kind: str) -> Path:
    return SHIPPED[kind]


def load_head(name_or_path, target, device=None) -> PEagleDrafter:
    """``'parallel'`` / ``'sequential'`` (shipped heads for the embedded target) or a head directory."""
    path = SHIPPED.get(str(name_or_path), Path(name_or_path))
    if not path.exists():
        raise PeagleError(
            f"No drafter head at {path}. Fix: train one (`peagle-lab train --help`, notebook 03) or pass the "
            f"directory of a head trained for this target.")
    device = device or next(target.parameters()).device
    head = PEagleDrafter.from_pretrained(path, target=target, device=device)
    return head
