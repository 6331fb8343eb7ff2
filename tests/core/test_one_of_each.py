"""One of each: one JSON cleaner, one environment record, one atomic write for figures, used by every writer."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from peagle_lab.errors import PeagleError
from peagle_lab.jsonsafe import json_safe


# -- the JSON cleaner ----------------------------------------------------------------------------------------------

def test_json_safe_makes_results_strict_json():
    obj = {1: float("nan"), "inf": [float("inf"), -float("inf"), 1.5], "t": torch.tensor([1, 2]),
           "t0": torch.tensor(0.25), "np": np.arange(3), "np_scalar": np.float64(2.5), "np_int": np.int64(7),
           "np_nan": np.float64("nan"), "path": Path("results") / "x.json", "tuple": (1, None, True),
           "set": {3, 1}, "dtype": torch.bfloat16}
    out = json_safe(obj)
    assert out == {"1": None, "inf": [None, None, 1.5], "t": [1, 2], "t0": 0.25, "np": [0, 1, 2], "np_scalar": 2.5,
                   "np_int": 7, "np_nan": None, "path": str(Path("results") / "x.json"), "tuple": [1, None, True],
                   "set": [1, 3], "dtype": "bfloat16"}
    json.dumps(out, allow_nan=False)  # strict JSON: no NaN, no Infinity
    assert type(out["np_scalar"]) is float and type(out["np_int"]) is int


def test_json_safe_names_what_it_cannot_write():
    with pytest.raises(PeagleError, match="object cannot be written to JSON. Fix:"):
        json_safe({"x": object()})


def _cleaners(sources: dict[str, str]) -> list[str]:
    """The functions in ``sources`` (module -> code) that clean values for JSON: they go down into dicts
    (``isinstance(x, dict)``, calling themselves) and test floats for NaN or infinity."""
    found = []
    for module, code in sources.items():
        for fn in ast.walk(ast.parse(code)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
            called = {getattr(c.func, "attr", getattr(c.func, "id", None)) for c in calls}
            into_dicts = any(getattr(c.func, "id", None) == "isinstance" and len(c.args) == 2 and
                             "dict" in ast.dump(c.args[1]) for c in calls)
            if into_dicts and fn.name in called and called & {"isnan", "isinf", "isfinite"}:
                found.append(f"{module}.{fn.name}")
    return found


def _package_sources() -> dict[str, str]:
    from peagle_lab.settings import PACKAGE_DIR

    return {".".join(p.relative_to(PACKAGE_DIR.parent).with_suffix("").parts): p.read_text()
            for p in sorted(PACKAGE_DIR.rglob("*.py"))}


def test_there_is_one_cleaner():
    assert _cleaners(_package_sources()) == ["peagle_lab.jsonsafe.json_safe"]


def test_a_second_cleaner_is_found():
    second = "import math\ndef tidy(x):\n    if isinstance(x, dict):\n        return {k: tidy(v) for k, v in x.items()}\n" \
             "    return None if math.isnan(x) else x\n"
    assert _cleaners({**_package_sources(), "peagle_lab.bench.extra": second}) == [
        "peagle_lab.jsonsafe.json_safe", "peagle_lab.bench.extra.tidy"]


def test_the_notebooks_summary_is_strict_json_with_paths_as_text(monkeypatch, tmp_path):
    from peagle_lab.workbook import report

    monkeypatch.setenv("PEAGLE_RESULTS", str(tmp_path))
    report.record("nan", float("nan"), notebook="nb")  # strict JSON has no NaN
    report.record("where", tmp_path / "x", notebook="nb")
    assert json.loads((tmp_path / "summary.json").read_text(), parse_constant=pytest.fail) == {
        "nb": {"nan": None, "where": str(tmp_path / "x")}}


# -- the environment record ----------------------------------------------------------------------------------------

# What the readers of committed results use: bench/readme.py, bench/plots.py, bench/summary.py, bench/files.py
# (ENV_CSV_KEYS), training/records.py (TRAINING.md), experiments/recipe.py, experiments/studies.py,
# training/lineage.py.
_READ_KEYS = {"host", "hardware", "device", "cpu", "gpu", "cuda", "cpu_count", "torch_threads", "dtype", "torch",
              "transformers", "python", "platform", "git_commit", "timer", "timestamp_utc", "omp_wait_policy",
              "loadavg_start", "loadavg_end", "load_average_1m", "start_epoch_s", "isa_flags", "bf16_units",
              "target_dtype"}


def test_the_benchmark_and_the_training_record_the_same_environment(tiny_llama):
    from peagle_lab.environment import environment
    from peagle_lab.precision import host_slug

    model = tiny_llama(hidden=16, layers=2)
    bench_env, machine = environment("cpu", torch.float32), environment(model=model)
    assert set(bench_env) == set(machine) and _READ_KEYS <= set(machine)
    assert machine["host"] == bench_env["host"] == host_slug("cpu")
    assert machine["target_dtype"] == machine["dtype"] == "float32" and machine["device"] == "cpu"
    system = machine["system"]  # torch.utils.collect_env's SystemEnv, less its package lists
    assert system["torch_version"] == torch.__version__ and "os" in system and "pip_packages" not in system
    flags = set(machine["isa_flags"])
    assert flags <= {"avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8"}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file() and " avx2" in cpuinfo.read_text():
        assert "avx2" in flags
    json.dumps(json_safe(machine), allow_nan=False)


def _environment_writers(sources: dict[str, str]) -> dict[str, str]:
    """Module -> where the ``environment`` it calls comes from: ``"peagle_lab.environment"`` when imported from
    it, else ``"own"`` (defined there or taken elsewhere)."""
    out = {}
    for module, code in sources.items():
        tree = ast.parse(code)
        calls = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "environment" for n in ast.walk(tree))
        defines = any(isinstance(n, ast.FunctionDef) and n.name == "environment" for n in ast.walk(tree))
        imported = any(isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[-1] == "environment" and
                       any(a.name == "environment" for a in n.names) for n in ast.walk(tree))
        if module != "peagle_lab.environment" and (calls or defines):
            out[module] = "peagle_lab.environment" if imported and not defines else "own"
    return out


def test_every_writer_records_the_environment_with_the_one_function():
    writers = _environment_writers(_package_sources())
    assert {"peagle_lab.bench.drafting", "peagle_lab.bench.e2e", "peagle_lab.cli.train"} <= set(writers)
    assert {m: w for m, w in writers.items() if w != "peagle_lab.environment"} == {}


def test_a_writer_with_its_own_environment_is_found():
    own = "import platform\ndef environment():\n    return {'host': platform.node()}\nrecord = environment()\n"
    writers = _environment_writers({**_package_sources(), "peagle_lab.bench.extra": own})
    assert writers["peagle_lab.bench.extra"] == "own"


def test_committed_training_records_render_with_their_machine_and_with_todays(tmp_path, tiny_llama):
    from peagle_lab.settings import REPO_ROOT
    from peagle_lab.environment import environment
    from peagle_lab.training.records import write_training_record

    committed = sorted((REPO_ROOT / "data" / "heads").glob("*/training.json"))
    if not committed:
        pytest.skip("no committed training records")
    record = json.loads(committed[0].read_text())
    write_training_record(tmp_path / "old", record)  # the machine it was trained on, as committed
    record["machine"] = environment(model=tiny_llama(hidden=16, layers=2))
    write_training_record(tmp_path / "new", record)
    text = (tmp_path / "new" / "TRAINING.md").read_text()
    assert f"(host {record['machine']['host']})" in text and f"{record['machine']['cpu_count']} cores" in text
    assert json.loads((tmp_path / "new" / "training.json").read_text())["machine"]["system"]


# -- figures are written atomically --------------------------------------------------------------------------------

class _FigureKilledMidWrite:
    """A figure whose savefig writes half an image, then fails as a full disk does."""

    def savefig(self, fname, **kw):
        Path(fname).write_bytes(b"\x89PNG half")
        raise OSError(28, "No space left on device")


def test_a_figure_write_that_fails_keeps_the_previous_figure(tmp_path):
    from peagle_lab.workbook import viz

    path = tmp_path / "fig.png"
    path.write_bytes(b"the previous figure")
    with pytest.raises(PeagleError, match="disk may be full"):
        viz.save_figure(_FigureKilledMidWrite(), path)
    assert path.read_bytes() == b"the previous figure" and sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]


def test_write_figure_keeps_the_format_its_suffix_names(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from peagle_lab.workbook import viz

    fig, ax = plt.subplots(figsize=(2, 1))
    ax.plot([0, 1], [0, math.pi])
    svg = viz.save_figure(fig, tmp_path / "a.svg")
    png = viz.save_figure(fig, tmp_path / "b")
    plt.close(fig)
    assert svg.read_text().lstrip().startswith("<?xml") and png.suffix == ".png"
    assert png.read_bytes().startswith(b"\x89PNG")
