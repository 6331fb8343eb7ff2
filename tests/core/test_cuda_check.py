"""The set-up's question "can this torch use this GPU?" as a pure function of the driver, the wheel's CUDA and
torch.cuda.is_available(): each answer one line with its fix."""

from __future__ import annotations

from peagle_lab import cuda_check


def test_no_gpu_or_a_working_one_says_nothing():
    assert cuda_check.problem("", "2.13.0+cpu", None, False) is None
    assert cuda_check.problem("580.82.07", "2.13.0", "13.0", True) is None


def test_a_cuda13_wheel_on_an_r550_driver_names_both_and_the_cuda12_wheel():
    line = cuda_check.problem("550.54.15", "2.13.0", "13.0", False)
    assert "\n" not in line
    assert "CUDA 13.0" in line and "580.65 or newer" in line and "550.54.15" in line
    assert "TORCH_CUDA=cu126" in line and "update the driver" in line


def test_a_cuda12_wheel_runs_from_r525():
    assert "525.60" in cuda_check.problem("470.82.01", "2.13.0+cu126", "12.6", False)
    ok_driver = cuda_check.problem("535.104.05", "2.13.0+cu126", "12.6", False)
    assert "new enough" in ok_driver and "CUDA_VISIBLE_DEVICES" in ok_driver  # another cause, named


def test_a_cpu_torch_on_a_gpu_machine_says_cuda_1():
    line = cuda_check.problem("550.54.15", "2.13.0+cpu", None, False)
    assert "CPU build" in line and "make setup CUDA=1" in line


def test_main_reads_the_installed_torch(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert cuda_check.main(["550.54.15"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("!! ")
    assert cuda_check.main([""]) == 0  # no GPU listed: nothing to check
