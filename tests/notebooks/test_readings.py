"""The readings cannot drift from their outputs: every figure a notebook's prose states (a decimal, a count with
thousands separators, an exponent, a percentage) is printed by some executed cell of the course, to the prose's
precision, or is a published figure named below. A stale reading, left behind when a chapter is re-executed and
its numbers move, fails here.

Figures in code (fenced blocks and `inline code`) are commands and settings, not readings, and are not checked."""

from __future__ import annotations

import re
from decimal import Decimal, ROUND_HALF_EVEN, ROUND_HALF_UP
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# Figures the prose quotes from publications; no cell measures them.
PUBLISHED = {
    "2602.01469": "the P-EAGLE paper's arXiv number",
    "3.70": "the vLLM blog's P-EAGLE acceptance length on MT-Bench (K=7)",
    "2.68": "the GPT-OSS-120B P-EAGLE head's model card: acceptance length on MT-Bench (K=5)",
    "3.15": "the same model card: HumanEval",
    "3.55": "the same model card: GSM-8K",
}

FIGURE = re.compile(r"(?<![\w.\-/^])(\d+(?:\.\d+)?e-\d+|\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?%)")
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


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


def _printed(pool: str) -> dict[int, set[Decimal]]:
    """Every number the outputs print, rounded to each precision up to its own: {decimals: values}."""
    by_places: dict[int, set[Decimal]] = {}
    for text in set(NUMBER.findall(pool)):
        value = Decimal(text)
        places = max(0, -value.as_tuple().exponent) if "e" not in text.lower() else 12
        for p in range(places + 1):
            q = Decimal(1).scaleb(-p)
            for mode in (ROUND_HALF_UP, ROUND_HALF_EVEN):
                by_places.setdefault(p, set()).add(abs(value.quantize(q, rounding=mode)))
    return by_places


@pytest.fixture(scope="module")
def printed():
    return _printed("\n".join(_outputs(nbformat.read(p, as_version=4)) for p in NOTEBOOKS))


def _stated(text: str) -> Decimal:
    return Decimal(text.replace(",", "").rstrip("%"))


def unprinted(nb, printed) -> list[str]:
    """The figures of ``nb``'s markdown that no output prints (rounded to the figure's precision)."""
    left = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        prose = CODE.sub(" ", cell.source)
        for m in FIGURE.finditer(prose):
            figure = m.group(1)
            if figure.rstrip("%") in PUBLISHED:
                continue
            value = _stated(figure)
            places = max(0, -value.as_tuple().exponent)
            if "e" in figure or value not in printed.get(places, ()):
                if "e" in figure and any(abs(value - v) <= abs(value) * Decimal("0.05")
                                         for v in printed.get(12, ())):
                    continue
                context = prose[max(0, m.start() - 50): m.end() + 20].replace("\n", " ")
                left.append(f"cell {i}: {figure} in '...{context}...'")
    return left


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_in_the_prose_is_printed_by_the_course(path, printed):
    left = unprinted(nbformat.read(path, as_version=4), printed)
    assert not left, (f"{path.name}: figures no executed cell prints (a stale reading, or a published figure to "
                      "name in PUBLISHED):\n" + "\n".join(left))


def test_the_check_catches_a_stale_figure(printed):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(
        "Reading it. P-EAGLE ran 1.3571x faster on 12,345,679 tokens; `--lr 5e-4` is a setting.")])
    assert [line.split(":")[1].split(" in ")[0].strip() for line in unprinted(nb, printed)] == ["1.3571",
                                                                                               "12,345,679"]
