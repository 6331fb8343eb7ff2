"""docs/sagemaker.md as written: its lifecycle script runs (here with a temporary HOME) and registers the kernel
with the caches on the volume in kernel.json's env; its commands name things that exist (the start script, the
CUDA check module, the Makefile's CUDA 12 variable); the platform and the volume are the ones the env needs."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = (REPO / "docs" / "sagemaker.md").read_text()


SAGEMAKER = DOC[DOC.index("## SageMaker notebook instances"):]


def bash_blocks() -> list[str]:
    """The bash blocks of the SageMaker part (the one above it is for a workstation's conda)."""
    return re.findall(r"```bash\n(.*?)```", SAGEMAKER.split("## The GPU check")[0], re.S)


def lifecycle_block() -> str:
    return next(b for b in bash_blocks() if b.startswith("#!/bin/bash"))


def test_the_lifecycle_script_runs_the_start_script_and_sets_nothing_in_bashrc():
    block = lifecycle_block()
    script = re.search(r"(scripts/\S+\.sh)", block).group(1)
    assert (REPO / script).exists()
    assert "sudo -u ec2-user" in block and ".bashrc" not in block


def test_the_env_lives_on_the_volume_and_the_platform_can_install_it():
    env_lines = [line for b in bash_blocks() for line in b.splitlines() if "conda env create" in line]
    assert env_lines and all("--prefix ~/SageMaker/" in line for line in env_lines)
    assert "notebook-al2023-v1" in DOC and "glibc 2.26" in DOC and "manylinux_2_28" in DOC
    assert "VolumeSizeInGB" in DOC and "default **5 GB**" in DOC


def test_the_docs_checks_and_make_variables_exist():
    modules = set(re.findall(r"python -m (peagle_lab\.\w+)", DOC))
    assert "peagle_lab.cuda_check" in modules
    assert all(importlib.util.find_spec(m) for m in modules)
    for var in re.findall(r"make setup [^`\n]*", DOC):
        for name in re.findall(r"\b([A-Z_]+)=", var):
            assert re.search(rf"^{name} \?=|\$\({name}\)", (REPO / "Makefile").read_text(), re.M), name


def test_the_start_script_registers_the_kernel_with_the_caches_in_its_env(tmp_path):
    pytest.importorskip("ipykernel")
    pytest.importorskip("jupyter_core")
    volume, env = tmp_path / "SageMaker", tmp_path / "SageMaker" / "envs" / "peagle-lab"
    (env / "bin").mkdir(parents=True)
    py = env / "bin" / "python"  # the env's python: this interpreter (it has ipykernel), behind a wrapper
    py.write_text(f"#!/bin/sh\nexec '{sys.executable}' \"$@\"\n")
    py.chmod(0o755)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PEAGLE_", "IPYTHON"))}
    run_env = dict(clean, HOME=str(tmp_path), PEAGLE_VOLUME=str(volume), PEAGLE_TARGET="Org/Model-8B",
                   XDG_DATA_HOME=str(tmp_path / ".local" / "share"))
    for _ in range(2):  # idempotent: a second start leaves the same kernel
        out = subprocess.run(["bash", str(REPO / "scripts" / "sagemaker_start.sh")], env=run_env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    spec = json.loads((tmp_path / ".local" / "share" / "jupyter" / "kernels" / "peagle-lab" / "kernel.json").read_text())
    assert spec["display_name"] == "Python (peagle-lab)"
    assert spec["env"]["PEAGLE_CACHE"] == f"{volume}/.cache/peagle-lab"
    assert spec["env"]["HF_HOME"] == f"{volume}/.cache/huggingface"
    assert spec["env"]["PEAGLE_TARGET"] == "Org/Model-8B"
    assert spec["env"]["PATH"].split(":")[0] == f"{env}/bin"


def test_the_start_script_without_the_env_says_so_and_succeeds(tmp_path):
    out = subprocess.run(["bash", str(REPO / "scripts" / "sagemaker_start.sh")], capture_output=True, text=True,
                         env=dict(os.environ, HOME=str(tmp_path), PEAGLE_VOLUME=str(tmp_path / "v")), timeout=60)
    assert out.returncode == 0 and "no env at" in out.stdout
