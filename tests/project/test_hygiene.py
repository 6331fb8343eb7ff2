"""Committed files stay free of this machine: no absolute paths of a home, work or temporary directory in any
tracked text file (sources, docs, data, notebooks with their outputs), and the code's docstrings, comments and
messages only point at files that exist in the repository (nothing outside it, such as a shared notes folder).

Both tests list every hit as ``file:line``. They are meant to fail until the hits are fixed where they are: an
entry is never excused here.
"""

from __future__ import annotations

import re
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# Absolute paths of a machine: a home (Linux, macOS, root's), the work and scratch areas, temporary folders,
# mounts and installs under opt. Not preceded by a word character, a dot, a dash or a tilde (so `~/.cache/...`, a
# relative `x/home/y` or a URL's path `https://host/home/...` do not count; `file:///...` does).
_MACHINE_ROOTS = "work|tmp|root|home|Users|mnt|opt|scratch|private/var|var/folders|var/tmp"
ABSOLUTE = re.compile(r"(?<![\w.~-])(/(?:" + _MACHINE_ROOTS + r")(?=[/\s\"'`),:;]|$)[^\s\"'`),;]*)")
_URL_BEFORE = re.compile(r"https?://\S*$")
# nbformat writes an image output as one line: `"image/png": "<base64>"` (base64 may spell anything)
_IMAGE_LINE = re.compile(r'^\s*"image/[\w.+-]+":\s*"')


@lru_cache(maxsize=1)
def tracked_files() -> tuple[str, ...]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("not a git checkout (or no git): the tracked files are unknown")
    return tuple(p for p in out.stdout.decode().split("\0") if p)


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # listed by git but deleted in the working tree
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def machine_paths(name: str, text: str) -> list[str]:
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if name.endswith(".ipynb") and _IMAGE_LINE.match(line):
            continue
        for m in ABSOLUTE.finditer(line):
            if _URL_BEFORE.search(line[: m.start()]):
                continue
            hits.append(f"{name}:{lineno}: {m.group(1)[:120]}")
    return hits


R = "/"  # the examples below are built at run time, so this file holds no machine path itself


@pytest.mark.parametrize("line,found", [
    (f"venv in {R}work/main/.venv", [f"{R}work/main/.venv"]),
    (f'"Extracting ... into {R}work/main/results/features\\n",', [f"{R}work/main/results/features\\n"]),
    (f"cache: {R}root/.cache/peagle-lab and {R}home/me/x", [f"{R}root/.cache/peagle-lab", f"{R}home/me/x"]),
    (f"see file://{R}opt/wheels", [f"{R}opt/wheels"]),
    (f"mktemp gives {R}tmp/xyz", [f"{R}tmp/xyz"]),
    (f"on a Mac: {R}Users/me/peagle", [f"{R}Users/me/peagle"]),
    ("cache in ~/.cache/peagle-lab, results in results/bench/", []),
    (f"https://github.com{R}home/tmp/x and http://host{R}work/y", []),
    ("PATH=/usr/bin:/bin, SHELL := /bin/bash, 2>/dev/null", []),
    ("a relative data/tmp/x or build/work/y, /tmpfs-like names", []),
])
def test_the_machine_path_pattern(line, found):
    assert [h.split(": ", 1)[1] for h in machine_paths("x.md", line)] == found


def test_no_tracked_file_holds_a_machine_path():
    hits = []
    for name in tracked_files():
        text = _text(REPO / name)
        if text is not None:
            hits += machine_paths(name, text)
    assert not hits, (f"{len(hits)} absolute path(s) of a machine in tracked files (write repository-relative "
                      "paths, settings.display_path(), or ~/...; re-execute notebooks whose outputs hold them):\n"
                      + "\n".join(hits))


# ------------------------------------------------------------------------------------------------ references
# Repository-relative references: `docs/x.md`, `scripts/make_prompts.py`, `data/distill/<target>.jsonl`, ...
# (placeholders <...> and {...} match anything) and anything reaching out of the repository (`../...`).
_TOP = r"(?:docs|scripts|tests|notebooks|data|peagle_lab|\.ci|build|results)"
_SEG = r"[\w.*<>{}\[\]-]+"
REFERENCE = re.compile(rf"(?<![\w./~$-])((?:\.\./)+{_SEG}(?:/{_SEG})*/?|{_TOP}/(?:{_SEG}(?:/{_SEG})*/?)?)")
# A document named on its own (REFERENCE.md, DESIGN.md, README.md): some tracked file must carry that name.
BARE_DOC = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_-]+\.md)\b")
GENERATED = ("build/", "results/")  # outputs of a run: they exist after the run, not in the repository


def scanned_sources() -> list[str]:
    """The project's own code and docs: the package, scripts, docs, the Makefile, CI and the root conftest."""
    keep = []
    for name in tracked_files():
        if (name.startswith("peagle_lab/") and name.endswith(".py")) or name.startswith(("scripts/", "docs/")) \
                or name in ("Makefile", ".ci/run", "conftest.py"):
            if name.endswith((".py", ".md", ".sh")) or name in ("Makefile", ".ci/run"):
                keep.append(name)
    return keep


_PLACEHOLDER = re.compile(r"<[^>]*>?|\{[^}]*\}?")


def _exists(ref: str) -> bool:
    """A path, a glob (``scripts/build_nb*.py``: something must match), or a family of paths named with a
    placeholder (``data/results/<host>/serving``, ``data/results/{mine}``): runs add members to a family, so the
    folder the first placeholder sits in must exist, and no more."""
    parts = ref.rstrip("/").split("/")
    first = next((i for i, part in enumerate(parts) if _PLACEHOLDER.search(part)), None)
    if first is not None:
        return (REPO.joinpath(*parts[:first])).is_dir()
    pattern = "/".join(parts)
    return any(REPO.glob(pattern)) if any(c in pattern for c in "*?[") else (REPO / pattern).exists()


def dangling_references(name: str, text: str, tracked_names: set[str], generated_names: set[str]) -> list[str]:
    hits = []
    for lineno, line in enumerate(text.splitlines(), 1):
        for m in REFERENCE.finditer(line):
            ref = m.group(1).rstrip(".,:;")
            if ref.startswith("../"):
                hits.append(f"{name}:{lineno}: {ref} (outside the repository)")
            elif not ref.startswith(GENERATED) and not _exists(ref):
                hits.append(f"{name}:{lineno}: {ref} (no such file in the repository)")
        for m in BARE_DOC.finditer(line):
            doc = m.group(1)
            if doc not in tracked_names and doc not in generated_names:
                hits.append(f"{name}:{lineno}: {doc} (no file of that name in the repository)")
    return hits


def test_the_reference_checker():
    names, generated = {"README.md", "TRAINING.md"}, {"SUMMARY.md"}
    ok = ("see docs/data.md, scripts/make_prompts.py and tests/conftest.py::tiny_llama; data/distill/<target>.jsonl,"
          " data/results/{mine}/{dtype_name(dtype)}, data/results/<host>/serving and README.md; TRAINING.md; "
          "build/workbook/SUMMARY.md; peagle_lab.settings; https://example.org/docs/none.md")
    assert dangling_references("x.py", ok, names, generated) == []
    bad = "see ../shared/REFERENCE.md; scripts/build_nb*.py; DESIGN.md; docs/CONVENTIONS.md."
    assert dangling_references("x.py", "data/resluts/<host>/x", names, generated) != []
    assert dangling_references("x.py", bad, names, generated) == [
        "x.py:1: ../shared/REFERENCE.md (outside the repository)",
        "x.py:1: scripts/build_nb*.py (no such file in the repository)",
        "x.py:1: docs/CONVENTIONS.md (no such file in the repository)",
        "x.py:1: DESIGN.md (no file of that name in the repository)",
    ]


def test_code_and_docs_point_only_at_files_in_the_repository():
    tracked_names = {Path(n).name for n in tracked_files()}
    sources = {name: _text(REPO / name) or "" for name in scanned_sources()}
    assert "peagle_lab/settings.py" in sources
    # a generated file's name may be used on its own where its place (build/..., results/...) is stated somewhere
    generated_names = {Path(m.group(1)).name for text in sources.values() for m in REFERENCE.finditer(text)
                       if m.group(1).startswith(GENERATED)}
    hits = [h for name, text in sources.items() for h in dangling_references(name, text, tracked_names,
                                                                               generated_names)]
    assert not hits, (f"{len(hits)} reference(s) to files that are not in the repository (point at a file in it, "
                      "e.g. docs/checkpoint-format.md, or say it in the text itself):\n" + "\n".join(hits))
