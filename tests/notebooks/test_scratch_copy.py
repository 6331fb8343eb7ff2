"""``peagle_lab.workbook.scratch`` keeps notebook 02's ``ScratchDrafter`` for later chapters to import: the copy must
be the very code the chapter writes in view, so that what 03 runs is what 02 taught."""

import ast
from pathlib import Path

import jupytext

import peagle_lab.workbook.scratch as scratch

ROOT = Path(__file__).resolve().parents[2]


def _class_node(source: str, name: str) -> str:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return ast.dump(node, include_attributes=False)
    raise AssertionError(f"no class {name}")


def test_the_kept_scratch_drafter_is_notebook_02s_class():
    nb = jupytext.read(ROOT / "notebooks" / "02_mask_tokens.py")
    written = "\n".join(c.source for c in nb.cells if c.cell_type == "code" and "class ScratchDrafter" in c.source)
    assert written, "notebook 02 no longer writes class ScratchDrafter"
    kept = Path(scratch.__file__).read_text()
    assert _class_node(written, "ScratchDrafter") == _class_node(kept, "ScratchDrafter"), (
        "peagle_lab/workbook/scratch.py's ScratchDrafter differs from notebook 02's: copy the class from "
        "notebooks/02_mask_tokens.py again")


def test_the_check_sees_a_changed_line():
    nb = jupytext.read(ROOT / "notebooks" / "02_mask_tokens.py")
    written = "\n".join(c.source for c in nb.cells if c.cell_type == "code" and "class ScratchDrafter" in c.source)
    altered = written.replace("rms_norm_eps", "rms_norm_eps * 2", 1)
    assert _class_node(altered, "ScratchDrafter") != _class_node(Path(scratch.__file__).read_text(), "ScratchDrafter")
