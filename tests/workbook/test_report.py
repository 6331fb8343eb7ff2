"""peagle_lab.workbook.report: key numbers for the workbook summary, written atomically."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from peagle_lab.workbook import report
from peagle_lab.errors import PeagleError


@pytest.fixture(autouse=True)
def results(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path))
    monkeypatch.delenv("PEAGLE_NOTEBOOK", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    return tmp_path


def test_record_then_load_round_trips_numbers_from_numpy_and_torch(results):
    assert report.load() == {}
    assert report.record("acceptance_length", 2.5, notebook="05_parallel_vs_sequential") == 2.5
    report.record("speedup", np.float32(1.25), notebook="05_parallel_vs_sequential")
    report.record("per_depth", torch.tensor([0.5, 0.25]), notebook="03_train_head")
    assert report.load() == {
        "05_parallel_vs_sequential": {"acceptance_length": 2.5, "speedup": 1.25},
        "03_train_head": {"per_depth": [0.5, 0.25]},
    }
    assert json.loads((results / "summary.json").read_text()) == report.load()
    assert [p.name for p in results.iterdir()] == ["summary.json"]  # no temporary file left behind


def test_notebook_name_comes_from_the_runner_or_jupyter(monkeypatch, tmp_path):
    assert report.current_notebook() == "unknown"
    # jupyter_server sets an absolute path
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "peagle-lab" / "notebooks" / "02_mask_tokens.ipynb"))
    assert report.current_notebook() == "02_mask_tokens"
    monkeypatch.setenv("PEAGLE_NOTEBOOK", "06_vllm_deploy")
    report.record("engine_start_s", 39)
    assert report.load() == {"06_vllm_deploy": {"engine_start_s": 39}}


def test_clear_forgets_one_notebook_only():
    report.record("a", 1, notebook="x")
    report.record("b", 2, notebook="y")
    report.clear("x")
    report.clear("never-recorded")
    assert report.load() == {"y": {"b": 2}}


def test_unserialisable_value_and_corrupt_file_name_the_fix(results):
    with pytest.raises(PeagleError, match="Fix"):
        report.record("model", object(), notebook="x")
    (results / "summary.json").write_text("{not json")
    with pytest.raises(PeagleError, match="delete it"):
        report.load()
