"""The readings cannot drift from their outputs: every figure a notebook's prose states (a decimal, a count with
thousands separators, an exponent, a percentage) is printed by an executed cell, to the prose's precision, or is a
published figure named below. The cell must be the same notebook's, unless the sentence around the figure names
another chapter ("06's", "in 07"), whose outputs then count too. A stale reading, left behind when a chapter is
re-executed and its numbers move, fails here.

Figures in code (fenced blocks and `inline code`) are commands and settings, not readings, and are not checked."""

from __future__ import annotations

import re
from decimal import Decimal, ROUND_HALF_EVEN, ROUND_HALF_UP
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Figures the prose quotes from publications, or states by definition; no cell measures them.
PUBLISHED = {
    "1.00": "plain decoding's acceptance length, by definition",
    "2602.01469": "the P-EAGLE paper's arXiv number",
    "3.94": "the vLLM blog's P-EAGLE acceptance length on HumanEval (GPT-OSS-20B, K=7)",
    "3.03": "the same blog's EAGLE-3 acceptance length there",
    "1.55": "the same blog's P-EAGLE speed-up over EAGLE-3, each at its best K",
    "0.16": "the vLLM version the blog names for parallel drafting",
    "3.70": "the vLLM blog's P-EAGLE acceptance length on MT-Bench (K=7)",
    "2.68": "the GPT-OSS-120B P-EAGLE head's model card: acceptance length on MT-Bench (K=5)",
    "3.15": "the same model card: HumanEval",
    "3.55": "the same model card: GSM-8K",
}

FIGURE = re.compile(r"(?<![\w.\-/^])(\d+(?:\.\d+)?e-\d+|\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?%)")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
QUOTING = re.compile(r"blog|paper|card|arXiv|publish|vLLM|plain\s+decoding", re.I)  # where a published figure may stand
CHAPTER = re.compile(r"(?<![\d.,])(0\d|1[0-2])(?:'s)?(?![\d.,%x])")  # "06", "07's": a chapter named in the sentence


def _outputs(nb) -> str:
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if "text" in out:
                texts.append(out["text"])
            for kind in ("text/plain", "text/html", "text/markdown"):
                if kind in out.get("data", {}):
                    texts.append(out["data"][kind])
    return "\n".join(texts).replace(",", "")


def _printed(pool: str) -> dict:
    """Every number the outputs print: ``{decimals: values}``, each decimal number rounded to every precision up to
    its own, and ``{"e": values}`` for those printed with an exponent."""
    by_places: dict = {"e": set()}
    for text in set(NUMBER.findall(pool)):
        value = Decimal(text)
        if "e" in text:
            by_places["e"].add(abs(value))
            continue
        places = max(0, -value.as_tuple().exponent)
        for p in range(places + 1):
            q = Decimal(1).scaleb(-p)
            for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN):
                by_places.setdefault(p, set()).add(abs(value.quantize(q, rounding=mode)))
    return by_places


@pytest.fixture(scope="module")
def printed():
    """{"course": every notebook's printed numbers, path: that notebook's own}."""
    books = {p: _outputs(nbformat.read(p, as_version=4)) for p in NOTEBOOKS}
    return {"course": _printed("\n".join(books.values()))} | {p: _printed(text) for p, text in books.items()}


def _stated(text: str) -> Decimal:
    return Decimal(text.replace(",", "").rstrip("%"))


def _sentence(prose: str, start: int, end: int) -> str:
    left = max(prose.rfind(". ", 0, start), prose.rfind("\n\n", 0, start), prose.rfind("\n- ", 0, start))
    right = min([i for i in (prose.find(". ", end), prose.find("\n\n", end), prose.find("\n- ", end)) if i >= 0]
                or [len(prose)])
    return prose[left + 1: right]


def unprinted(nb, own, course) -> list[str]:
    """The figures of ``nb``'s markdown that its own outputs do not print (rounded to the figure's precision), or,
    where the figure's sentence names another chapter, no output of the course prints."""
    left = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        prose = CODE.sub(" ", cell.source)
        for m in FIGURE.finditer(prose):
            figure = m.group(1)
            paragraph = prose[prose.rfind("\n\n", 0, m.start()) + 1: (prose.find("\n\n", m.end()) + 1
                                                                    or len(prose))]
            if figure.rstrip("%") in PUBLISHED and QUOTING.search(paragraph):
                continue
            value = _stated(figure)
            places = max(0, -value.as_tuple().exponent)
            printed = course if CHAPTER.search(_sentence(prose, m.start(), m.end())) else own
            if "e" in figure:  # an exponent figure matches a printed one within 5%
                shown = any(abs(value - v) <= abs(value) * Decimal("0.05") for v in printed.get("e", ()))
            else:
                shown = value in printed.get(places, ())
            if not shown:
                context = prose[max(0, m.start() - 50): m.end() + 20].replace("\n", " ")
                left.append(f"cell {i}: {figure} in '...{context}...'")
    return left


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_in_the_prose_is_printed_by_the_course(path, printed):
    left = unprinted(nbformat.read(path, as_version=4), printed[path], printed["course"])
    assert not left, (f"{path.name}: figures no executed cell prints (a stale reading, or a published figure to "
                      "name in PUBLISHED):\n" + "\n".join(left))


def test_the_check_catches_a_stale_figure(printed):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "Reading it. P-EAGLE ran 1.3571x faster on 12,345,679 tokens, within 7.7e-19; `--lr 5e-4` is a setting.")])
    assert [line.split(":")[1].split(" in ")[0].strip() for line in unprinted(nb, {}, printed["course"])] == [
        "1.3571", "12,345,679", "7.7e-19"]
    # a figure printed only by another chapter counts where the sentence names that chapter, not elsewhere
    figure = next(iter(sorted(v for v in printed["course"][3] if v > 1)))
    named, unnamed = f"As 06 printed, {figure}.", f"It ran {figure}."
    nb.cells = [nbformat.v4.new_markdown_cell(named), nbformat.v4.new_markdown_cell(unnamed)]
    assert [line.split(":")[0] for line in unprinted(nb, {}, printed["course"])] == ["cell 1"]


def test_every_published_figure_let_through_is_listed_with_its_source_in_the_reference_sheet():
    """reference.md's "Published figures" table is the learner's list of what the course quotes but did not
    measure: it names exactly the figures this test lets through (plain decoding's 1.00 is a definition)."""
    text = (NOTEBOOKS[0].parent / "reference.md").read_text()
    section = text.split("### Published figures the course quotes", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    listed = {line.split("|")[1].strip() for line in section.splitlines()
              if line.startswith("| ") and not line.startswith("| figure") and not line.startswith("|---")}
    assert listed == set(PUBLISHED) - {"1.00"}


def test_the_ledger_marks_the_best_k_of_the_saved_07_run():
    """12's ledger takes 07's live rows from the run that recorded them; the saved 07 must be that run, or the
    ledger's "best speed-up" K contradicts the K 07 prints as each head's best."""
    by_name = {p.name[:2]: p for p in NOTEBOOKS}
    if "07" not in by_name or "12" not in by_name:
        pytest.skip("07 or 12 is not here")
    seven = _outputs(nbformat.read(by_name["07"], as_version=4))
    printed = {name: int(k) for name, k in re.findall(r"^\s*(P-EAGLE|EAGLE-3) K=(\d+) \(\d+ drafter pass", seven, re.M)}
    heads = {"smollm2-135m-peagle": "P-EAGLE", "smollm2-135m-eagle3": "EAGLE-3"}
    marked = {}
    for line in _outputs(nbformat.read(by_name["12"], as_version=4)).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        live_best = cells[0] == "07" and "this run" in cells[1] and "best speed-up" in cells[1]
        if len(cells) > 7 and live_best and cells[2] in heads:
            marked[heads[cells[2]]] = int(cells[7])
    assert printed and marked == printed, (
        f"12's ledger marks {marked} as 07's live best K, 07 prints {printed}: save 07 and 12 from the same run")
