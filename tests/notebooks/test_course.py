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
    """The closing reading is the last markdown cell; after it only a silent records cell may follow (the
    chapter's figures for the workbook's summary and 08's ledger), kept out of the lesson."""
    nb = cells(path)
    at = max(i for i, c in enumerate(nb) if c.cell_type == "markdown")
    last = nb[at]
    assert "## What we saw" in last.source, f"{path.name}: no closing reading"
    for c in nb[at + 1:]:
        assert c.source.startswith("# Records, after the lesson:"), f"{path.name}: a lesson cell after the ending"
        assert not c.get("outputs"), f"{path.name}: the records cell prints; it should stay silent"
    later = [p for p in NOTEBOOKS if p.name > path.name]
    if later:
        assert later[0].stem in last.source, f"{path.name}: the ending does not point to {later[0].stem}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_chapter_has_an_exercise_with_its_answer(path):
    """An exercise is a '### Exercise' markdown cell whose answer is folded in it (<details>) or written out in a
    code cell starting '# The answer.' after the cell where the learner writes theirs, which must call the same
    check (a function the answer cell calls and the exercise cell defines)."""
    nb = cells(path)
    found = []
    for i, c in enumerate(nb):
        if c.cell_type != "markdown" or not re.search(r"^#+ .*Exercise", c.source, re.M):
            continue
        if "<details>" in c.source and "</details>" in c.source:
            found.append(i)
            continue
        code = [d for d in nb[i + 1:i + 3] if d.cell_type == "code"]
        if len(code) == 2 and code[1].source.startswith("# The answer."):
            checks = re.findall(r"^(check_\w+)\(", code[1].source, re.M)
            assert checks and all(f"def {name}(" in code[0].source for name in checks), \
                f"{path.name}: the answer cell after cell {i} runs no check the exercise cell defines"
            found.append(i)
    assert found, f"{path.name}: no exercise (a '### Exercise' markdown cell with its answer folded or written out)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_reading_is_left_unwritten(path):
    """A reading written before its outputs exist holds a placeholder; none may reach a saved chapter."""
    holes = [i for i, c in enumerate(cells(path)) if c.cell_type == "markdown"
             and re.search(r"\b(TBD|TODO|FIXME|XXX)\b", c.source)]
    assert not holes, f"{path.name}: markdown cells {holes} hold a placeholder instead of a reading"
