"""``peagle_lab.workbook.scratch`` keeps notebook 02's ``ScratchDrafter`` for later chapters to import: the copy must
be the very code the chapter writes in view, so that what 03 runs is what 02 taught."""

import ast
from pathlib import Path

import jupytext
import pytest

import peagle_lab.workbook.scratch as scratch

ROOT = Path(__file__).resolve().parents[2]


def _class_node(source: str, name: str) -> str:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ast.dump(node, include_attributes=False)
    raise AssertionError(f"no class {name}")


CLASSES = ("ScratchLayer", "ScratchDrafter")  # the network, then the two ways of drafting with it


def _written() -> str:
    nb = jupytext.read(ROOT / "notebooks" / "02_mask_tokens.py")
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code" and "class Scratch" in c.source)


@pytest.mark.parametrize("name", CLASSES)
def test_the_kept_scratch_classes_are_notebook_02s(name):
    written = _written()
    assert f"class {name}" in written, f"notebook 02 no longer writes class {name}"
    kept = Path(scratch.__file__).read_text()
    assert _class_node(written, name) == _class_node(kept, name), (
        f"peagle_lab/workbook/scratch.py's {name} differs from notebook 02's: copy the class from "
        "notebooks/02_mask_tokens.py again")


def test_the_check_sees_a_changed_line():
    altered = _written().replace("rms_norm_eps", "rms_norm_eps * 2", 1)
    assert _class_node(altered, "ScratchLayer") != _class_node(Path(scratch.__file__).read_text(), "ScratchLayer")
