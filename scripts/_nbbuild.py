"""Tiny helpers for the notebook generator scripts (``scripts/build_nb*.py``): cells in, ``.ipynb`` out.

A code cell whose source starts with ``# NBVAL_CHECK_OUTPUT`` is compared by ``pytest --nbval-lax``: use it only
for outputs that do not depend on hardware, timing or ``PEAGLE_CI`` sizes.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent

# The first code cell of every notebook: parameters from the environment, seeds.
PARAMETERS = '''\
# Parameters come from the environment: PEAGLE_TARGET (default: the embedded SmolLM2-135M-Instruct),
# PEAGLE_DEVICE (default: cuda if present, else cpu), PEAGLE_CI=1 (small sizes, same code path).
import os
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads: idle threads sleep, not spin (shared CPUs)

import torch
from peagle_lab import models, settings

TARGET = models.target_name()
DEVICE = models.pick_device()
CI = settings.is_ci()
settings.seed_everything(0)
print(f"target={TARGET}  device={DEVICE}  ci={CI}")'''


def md(text: str):
    return nbformat.v4.new_markdown_cell(textwrap.dedent(text).strip())


def code(src: str, check: bool = False):
    src = textwrap.dedent(src).strip()
    if check:
        src = "# NBVAL_CHECK_OUTPUT\n" + src
    return nbformat.v4.new_code_cell(src)


def write(name: str, cells: list) -> Path:
    for i, cell in enumerate(cells):
        cell.id = f"cell-{i:02d}"  # stable ids: regenerating a notebook gives a small diff
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": "peagle-lab", "display_name": "Python (peagle-lab)", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    path = REPO / "notebooks" / name
    nbformat.validate(nb)
    nbformat.write(nb, path)
    print(f"wrote {path.relative_to(REPO)} ({len(cells)} cells); execute it with:\n"
          f"  jupyter nbconvert --to notebook --execute --inplace {path.relative_to(REPO)}")
    return path
