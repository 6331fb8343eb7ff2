"""The workbook reads as a course: each notebook is a chapter with one learning goal stated at the top, at most 30
cells, at least one exercise whose answer is folded away, and a "What we saw" ending in markdown that points to the
next chapter."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_CELLS = 30


def cells(path):
    return nbformat.read(path, as_version=4).cells


def test_chapters_are_numbered_without_gaps():
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers == list(range(len(numbers))) and len(numbers) >= 8


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_chapter_is_short(path):
    assert len(cells(path)) <= MAX_CELLS, f"{path.name}: {len(cells(path))} cells; split it or merge cells"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_chapter_states_its_goal_first(path):
    first = cells(path)[0]
    assert first.cell_type == "markdown" and first.source.startswith(f"# {path.name[:2]} ·")
    assert re.search(r"^\*\*Goal[:.]?\*\*", first.source, re.M), f"{path.name}: no '**Goal:**' line in its first cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_chapter_ends_with_what_we_saw_and_the_next_chapter(path):
    last = cells(path)[-1]
    assert last.cell_type == "markdown" and "## What we saw" in last.source, f"{path.name}: no closing reading"
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        assert later[0].stem in last.source, f"{path.name}: the ending does not point to {later[0].stem}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_chapter_has_an_exercise_with_a_folded_answer(path):
    found = [c for c in cells(path) if c.cell_type == "markdown" and re.search(r"^#+ .*Exercise", c.source, re.M)
             and "<details>" in c.source and "</details>" in c.source]
    assert found, f"{path.name}: no exercise (a '### Exercise' markdown cell with its answer in <details>)"
