"""Shipped heads for the embedded target and a single ``load_head`` entry point."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .network import PEagleDrafter
from ..errors import PeagleError
from ..settings import data_dir

# kind -> directory name under <data>/heads
SHIPPED_NAMES = {
    "parallel": "smollm2-135m-peagle",  # P-EAGLE, trained for K=8
    "sequential": "smollm2-135m-eagle3",  # EAGLE-3 style, same data and budget
}


def heads_dir() -> Path:
    """``<data>/heads`` (``settings.data_dir()``: ``$PEAGLE_DATA`` or the checkout's ``data/``)."""
    return data_dir() / "heads"


class _ShippedHeads(Mapping):
    """``{kind: head directory}`` of the shipped heads, resolved when read (so ``$PEAGLE_DATA`` is honoured and
    importing this module needs no data). Unknown keys raise ``KeyError`` before any data is looked up, so
    ``SHIPPED.get(some_path, Path(some_path))`` works without a data directory."""

    def __getitem__(self, kind):
        if kind not in SHIPPED_NAMES:
            raise KeyError(kind)
        return heads_dir() / SHIPPED_NAMES[kind]

    def __iter__(self):
        return iter(SHIPPED_NAMES)

    def __len__(self):
        return len(SHIPPED_NAMES)

    def __repr__(self):
        return f"SHIPPED({ {k: str(v) for k, v in self.items()} })"


SHIPPED = _ShippedHeads()


def __getattr__(name: str):
    if name == "HEADS_DIR":  # the old constant, resolved when used
        return heads_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
