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


def load_head(name_or_path, target, device=None, dtype=None, announce: bool = False) -> PEagleDrafter:
    """``'parallel'`` / ``'sequential'`` (shipped heads for the embedded target) or a head directory.

    The head runs in ``dtype`` (default: the target's). A head stored in another dtype (the shipped heads are
    stored in bf16) is converted; ``head.stored_dtype`` keeps what was on disk, and with ``announce`` (the CLI) a
    line on stderr says so.
    """
    import json
    path = SHIPPED.get(str(name_or_path), Path(name_or_path))
    if not path.exists():
        raise PeagleError(
            f"No drafter head at {path}. Fix: train one (`peagle-lab train --help`, notebook 03) or pass the "
            f"directory of a head trained for this target.")
    device = device or next(target.parameters()).device
    dtype = dtype or next(target.parameters()).dtype
    head = PEagleDrafter.from_pretrained(path, target=target, device=device, dtype=dtype)
    try:
        stored = json.loads((path / "config.json").read_text()).get("torch_dtype")
    except (OSError, ValueError):
        stored = None
    run = str(dtype).replace("torch.", "")
    if stored and stored != run and announce:
        import sys

        print(f"[peagle-lab] head {path.name}: stored in {stored}, converted to {run} to match the target",
              file=sys.stderr)
    head.stored_dtype = stored or run
    return head
