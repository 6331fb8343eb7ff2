"""Where the package finds its data and results (docs/data.md), and that importing it or asking for a path
changes nothing on the machine: no environment variable set, no directory created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from peagle_lab.drafter import heads
from peagle_lab import prompts, settings
from peagle_lab.workbook import report
from peagle_lab.distill.data import shipped_distilled_path
from peagle_lab.errors import PeagleError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_data_env(monkeypatch):
    monkeypatch.delenv("PEAGLE_DATA", raising=False)


def test_checkout_data_is_found_without_configuration(no_data_env):
    assert settings.in_checkout()
    assert settings.data_dir() == REPO / "data"
    assert prompts.train_file() == REPO / "data" / "prompts" / "train.jsonl" and prompts.train_file().is_file()
    assert heads.SHIPPED["parallel"] == REPO / "data" / "heads" / "smollm2-135m-peagle"
    assert shipped_distilled_path("smollm2-135m") == REPO / "data" / "distill" / "smollm2-135m.jsonl"


def test_peagle_data_points_every_reader_elsewhere(monkeypatch, tmp_path):
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "train.jsonl").write_text(json.dumps({"id": "x", "prompt": "hello"}) + "\n")
    monkeypatch.setenv("PEAGLE_DATA", str(tmp_path))
    assert settings.data_dir() == tmp_path
    assert prompts.load_train_prompts() == ["hello"]
    assert prompts.train_file() == tmp_path / "prompts" / "train.jsonl"
    assert prompts.scale_file() == tmp_path / "prompts" / "scale.jsonl"
    assert dict(heads.SHIPPED) == {"parallel": tmp_path / "heads" / "smollm2-135m-peagle",
                                   "sequential": tmp_path / "heads" / "smollm2-135m-eagle3"}
    assert shipped_distilled_path("smollm2-135m") == tmp_path / "distill" / "smollm2-135m.jsonl"


def test_peagle_data_that_is_not_a_directory_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAGLE_DATA", str(tmp_path / "missing"))
    with pytest.raises(PeagleError, match="PEAGLE_DATA=.*not a directory. Fix: point PEAGLE_DATA"):
        settings.data_dir()
    assert not (tmp_path / "missing").exists()


def test_an_install_without_data_says_how_to_get_it(monkeypatch, no_data_env, tmp_path):
    """A non-editable install: the package's parent is site-packages, not a checkout."""
    monkeypatch.setattr(settings, "REPO_ROOT", tmp_path)
    assert not settings.in_checkout()
    with pytest.raises(PeagleError, match=r"PEAGLE_DATA is not set. Fix: .*pip install -e .*export PEAGLE_DATA="):
        settings.data_dir()
    with pytest.raises(PeagleError, match="PEAGLE_DATA"):
        prompts.load_train_prompts(1)
    with pytest.raises(PeagleError, match="PEAGLE_DATA"):
        heads.SHIPPED["parallel"]
    # a head given by path, or an unknown key, needs no data directory
    assert heads.SHIPPED.get(str(tmp_path / "mine"), "given") == "given"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PEAGLE_RESULTS", raising=False)
    assert settings.results_dir() == tmp_path / "results"  # the current directory, not site-packages
    assert not (tmp_path / "results").exists()


def test_results_dir_is_resolved_not_created(monkeypatch, tmp_path):
    wanted = tmp_path / "a" / "results"
    monkeypatch.setenv("PEAGLE_RESULTS", str(wanted))
    assert settings.results_dir() == wanted
    assert report.load() == {}  # reading the summary of a fresh results folder ...
    assert not (tmp_path / "a").exists()  # ... creates nothing
    report.record("x", 1, notebook="nb")  # writing does create it
    assert json.loads((wanted / "summary.json").read_text()) == {"nb": {"x": 1}}
    monkeypatch.delenv("PEAGLE_RESULTS")
    assert settings.results_dir() == REPO / "results"


def test_reading_shipped_paths_creates_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("PEAGLE_DATA", str(tmp_path))
    settings.data_dir(), settings.data_path("prompts", "x"), prompts.train_file(), dict(heads.SHIPPED)
    shipped_distilled_path("t")
    with pytest.raises(PeagleError, match="not found"):
        prompts.load_train_records()
    assert list(tmp_path.iterdir()) == []


def test_cache_dir_is_not_created_by_asking_for_it(monkeypatch, tmp_path):
    from peagle_lab import models

    monkeypatch.setenv("PEAGLE_CACHE", str(tmp_path / "cache"))
    models.cache_dir()
    assert not (tmp_path / "cache").exists()


def test_omp_wait_policy_is_set_on_purpose_only(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert settings.prefer_passive_omp_wait() == "PASSIVE" and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert settings.prefer_passive_omp_wait() == "ACTIVE"  # the caller's choice wins


_IMPORT_ALL = r"""
import importlib, json, os, pkgutil, sys
before = dict(os.environ)
import peagle_lab
changed = {}
def diff(stage):
    for k in set(before) | set(os.environ):
        if before.get(k) != os.environ.get(k):
            changed.setdefault(k, (stage, before.get(k), os.environ.get(k)))
diff("import peagle_lab")
skipped = {}
for mod in pkgutil.walk_packages(peagle_lab.__path__, "peagle_lab."):
    if mod.name.endswith(".__main__"):  # running it is the command itself
        continue
    try:
        importlib.import_module(mod.name)
    except ImportError as exc:  # an optional dependency (vllm, matplotlib, ...) that is not installed
        if (exc.name or "").startswith("peagle_lab"):
            raise
        skipped[mod.name] = str(exc)
    diff("import " + mod.name)
print(json.dumps({"changed": changed, "skipped": skipped}))
"""


def test_importing_the_package_sets_nothing_and_creates_nothing(tmp_path):
    """``import peagle_lab`` and every module in it, in a clean environment (no OMP_WAIT_POLICY)."""
    home, cwd, tmp = tmp_path / "home", tmp_path / "cwd", tmp_path / "tmp"
    for d in (home, cwd, tmp):
        d.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "TMPDIR": str(tmp),
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([sys.executable, "-c", _IMPORT_ALL], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["changed"] == {}, f"importing peagle_lab changed the environment: {out['changed']}"
    created = sorted(str(p.relative_to(tmp_path)) for d in (home, cwd, tmp) for p in d.rglob("*"))
    assert created == [], f"importing peagle_lab created {created}"


def test_committed_host_is_this_one_unless_pinned_and_a_pin_must_name_a_host_with_results(monkeypatch):
    from peagle_lab import settings
    from peagle_lab.errors import PeagleError

    monkeypatch.delenv(settings.COMMITTED_HOST_ENV, raising=False)
    assert settings.committed_host("cpu-here", ["cpu-a"]) == "cpu-here"
    monkeypatch.setenv(settings.COMMITTED_HOST_ENV, "cpu-a")
    assert settings.committed_host("cpu-here", ["cpu-a", "cpu-b"]) == "cpu-a"
    monkeypatch.setenv(settings.COMMITTED_HOST_ENV, "cpu-z")
    with pytest.raises(PeagleError, match="cpu-z has no committed results. Fix: one of cpu-a, cpu-b"):
        settings.committed_host("cpu-here", ["cpu-b", "cpu-a"])
