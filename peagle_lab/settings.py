"""Run-time settings read from the environment, shared by notebooks, CLI and tests.

Importing this module changes nothing: no environment variable is set and no directory is created. Paths that
are read (``data_dir()``, ``results_dir()``) are only resolved; the code that writes a file creates its folder.

Where things live (docs/data.md):

- ``data_dir()``: the shipped data (prompts, distilled sequences, heads, committed results): ``$PEAGLE_DATA`` when
  set, else ``<checkout>/data``.
- ``results_dir()``: what runs write: ``$PEAGLE_RESULTS``, else ``<checkout>/results``, else ``./results``.
- ``committed_host()``: whose committed results a chapter reads: ``$PEAGLE_COMMITTED_HOST``, else this machine's.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from .errors import PeagleError

PACKAGE_DIR = Path(__file__).resolve().parent
# The repository checkout this package is imported from (an editable install or a source tree). In a
# non-editable install this is site-packages' parent and holds no data: see in_checkout().
REPO_ROOT = PACKAGE_DIR.parent

DEFAULT_TARGET = "smollm2-135m"  # the embedded default target (models.py converts it; heads are shipped for it)
DATA_ENV = "PEAGLE_DATA"
RESULTS_ENV = "PEAGLE_RESULTS"


def in_checkout() -> bool:
    """True when the package is imported from a repository checkout (``pyproject.toml`` beside the package)."""
    return (REPO_ROOT / "pyproject.toml").is_file() and (REPO_ROOT / "data").is_dir()


def data_dir() -> Path:
    """The shipped data directory (``prompts/``, ``distill/``, ``heads/``, ``recipe/``, ``results/``).

    ``$PEAGLE_DATA`` when set (it must be a directory), else the checkout's ``data/``. A non-editable install
    (``pip install .`` or a wheel) ships no data: point ``PEAGLE_DATA`` at the ``data/`` folder of a clone."""
    env = os.environ.get(DATA_ENV)
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise PeagleError(f"{DATA_ENV}={env} is not a directory. Fix: point {DATA_ENV} at the data/ folder of a "
                              "peagle-lab clone, or unset it to use the data of the checkout peagle_lab runs from.")
        return path
    if in_checkout():
        return REPO_ROOT / "data"
    raise PeagleError(
        f"peagle-lab's shipped data (prompts, distilled sequences, heads) is not installed with the package: "
        f"{PACKAGE_DIR} is not in a repository checkout and {DATA_ENV} is not set. Fix: clone the repository and "
        f"either install it editable (`pip install -e .`) or `export {DATA_ENV}=<clone>/data` (docs/data.md).")


def data_path(*parts: str) -> Path:
    """A path inside ``data_dir()``; nothing is checked or created (``data_path("prompts", "train.jsonl")``)."""
    return data_dir().joinpath(*parts)


CI_VALUES = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False, "": False}


def is_ci() -> bool:
    """``PEAGLE_CI=1``: small sizes, same code path (used by CI and the nbval runs). Any other value than
    1/true/yes or 0/false/no (or unset) is an error, not silently "off"."""
    value = os.environ.get("PEAGLE_CI", "0").strip().lower()
    if value not in CI_VALUES:
        raise PeagleError(f"PEAGLE_CI={os.environ['PEAGLE_CI']!r} is neither on nor off. Fix: PEAGLE_CI=1 (CI sizes) "
                          "or PEAGLE_CI=0 / unset it (full sizes).")
    return CI_VALUES[value]


def pick(full, ci):
    """Choose a size: ``ci`` under ``PEAGLE_CI=1``, else ``full``."""
    return ci if is_ci() else full


def seed_everything(seed: int = 0) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def prefer_passive_omp_wait() -> str:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` unless it is already set; returns the policy in effect.

    On a shared or small CPU, OpenMP threads that spin while waiting make torch 10-50x slower as soon as another
    process competes for the cores; passive waiting costs nothing measurable on a quiet machine. It only takes
    effect before torch is first imported in the process (and in the processes it starts), so the entry points
    call it on purpose, first: the ``peagle-lab`` command (cli.main), scripts/run_workbook.py and
    tests/conftest.py. Importing peagle_lab does not."""
    return os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


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
    """Where runs write results: ``$PEAGLE_RESULTS``, else ``<checkout>/results``, else ``./results`` (the
    current directory) in a non-editable install. Only resolved, never created: writers create their folders."""
    env = os.environ.get(RESULTS_ENV)
    if env:
        return Path(env).expanduser()
    return REPO_ROOT / "results" if in_checkout() else Path.cwd() / "results"


COMMITTED_HOST_ENV = "PEAGLE_COMMITTED_HOST"


def committed_host(this_host: str, hosts) -> str:
    """The host whose committed results a chapter reads: ``$PEAGLE_COMMITTED_HOST`` when set (to follow another
    machine's saved outputs, or to compare with it), else ``this_host``. ``hosts``: those with committed results; a
    pinned host among none of them is an error naming them."""
    pinned = os.environ.get(COMMITTED_HOST_ENV, "").strip()
    if not pinned:
        return this_host
    hosts = sorted(set(hosts))
    if pinned not in hosts:
        raise PeagleError(f"{COMMITTED_HOST_ENV}={pinned} has no committed results. Fix: one of {', '.join(hosts)}, "
                          f"or unset {COMMITTED_HOST_ENV} to read this machine's ({this_host}).")
    return pinned
