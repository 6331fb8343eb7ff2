"""Training with two processes on the CPU (gloo), launched as users launch it: torchrun and accelerate launch.

Each run trains the real Trainer on a tiny target (tests/workers/distributed_train.py) and compares with one
process: same global batch, so the same loss trajectory (DDP averages the gradients of the two halves of each
step; the sums differ only in float rounding order), disjoint rows per process, files written by rank 0 only,
and a state saved at one world size resumed at the other. To keep the launches few (each costs a Python
start-up per process), the multi-process checks share one relay run: torchrun, then one process, then
accelerate launch, each resuming where the last stopped.
"""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from peagle_lab.errors import PeagleError
from peagle_lab.training import TrainConfig, check_world_size

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
WORKER = Path(__file__).resolve().parents[1] / "workers" / "distributed_train.py"
BIN = Path(sys.executable).parent
TOL = 1e-3  # loss trajectories agree to this (relative); in practice to the 4 decimals logged


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(launcher: str, out: Path, *extra) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    if launcher == "single":
        cmd = [sys.executable, str(WORKER)]
    elif launcher == "torchrun":
        cmd = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
               str(_port()), str(WORKER)]
    else:  # accelerate's multi-process launcher (torch.distributed underneath; the trainer joins with gloo)
        cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_ip", "127.0.0.1",
               "--main_process_port", str(_port()), str(WORKER)]
    run = subprocess.run(cmd + ["--out", str(out), *extra], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    return [json.loads(p.read_text()) for p in sorted(out.glob("rank*.json"))]


STEPS = 8


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The reference: one process, all steps uninterrupted."""
    return _run("single", tmp_path_factory.mktemp("single"), "--steps", str(STEPS))[0]


@pytest.fixture(scope="module")
def relay(tmp_path_factory):
    """One run in three launches on one directory: torchrun (world 2) trains steps 1-4 and stops, one process
    resumes for steps 5-6, accelerate launch (world 2) resumes for steps 7-8. Returns each leg's rank records."""
    out = tmp_path_factory.mktemp("relay")
    legs = {}
    for leg, launcher, extra in [("torchrun", "torchrun", ["--stop-after", "4"]),
                                 ("single", "single", ["--resume", "--stop-after", "2"]),
                                 ("accelerate", "accelerate", ["--resume"])]:
        for p in out.glob("rank*.json"):
            p.unlink()
        legs[leg] = _run(launcher, out, "--steps", str(STEPS), *extra)
        legs[leg + "_files"] = sorted(str(p.relative_to(out / "head")) for p in (out / "head").rglob("*"))
    return legs


def _check_shards(ranks, whole_rows):
    for step, whole in enumerate(whole_rows):  # each process its own rows, together the one process's
        mine, theirs = ranks[0]["rows"][step], ranks[1]["rows"][step]
        assert mine and theirs and sorted(mine + theirs) == sorted(whole)
        assert not set(map(tuple, mine)) & set(map(tuple, theirs))


def test_two_processes_follow_one_process_torchrun(relay, single):
    ranks = relay["torchrun"]
    assert [r["world"] for r in ranks] == [2, 2] and all(r["step"] == 4 for r in ranks)
    for r in ranks:  # the logged loss is the global batch's, on every rank
        assert r["losses"] == pytest.approx(single["losses"][:4], rel=TOL)
    _check_shards(ranks, single["rows"][:4])
    assert ranks[1]["writes"] == []  # only rank 0 writes checkpoints, heads and logs
    files = relay["torchrun_files"]
    assert "config.json" in files and "checkpoint/state.pt" in files
    assert not [f for f in files if ".tmp" in f]  # atomic: no half-written file left


def test_a_run_saved_at_world_size_two_resumes_at_one(relay, single):
    (r,) = relay["single"]
    assert r["world"] == 1 and r["step"] == 6
    assert r["losses"][-2:] == pytest.approx(single["losses"][4:6], rel=TOL)  # steps 5-6: the uninterrupted run's
    assert r["rows"][-2:] == single["rows"][4:6]


def test_a_run_saved_at_world_size_one_resumes_at_two_under_accelerate(relay, single):
    ranks = relay["accelerate"]
    assert [r["world"] for r in ranks] == [2, 2] and all(r["step"] == STEPS for r in ranks)
    for r in ranks:
        assert r["losses"][-2:] == pytest.approx(single["losses"][6:8], rel=TOL)
    _check_shards([dict(rows=r["rows"][-2:]) for r in ranks], single["rows"][6:8])
    assert ranks[1]["writes"] == []
    assert not [f for f in relay["accelerate_files"] if ".tmp" in f]


def test_a_global_batch_the_world_cannot_share_is_refused():
    cfg = TrainConfig(batch_tokens=3 * 512, row_tokens=512)
    with pytest.raises(PeagleError, match=r"3 rows of --row-tokens 512, which 2 processes cannot share.*1024"):
        check_world_size(cfg, 2)
    check_world_size(cfg, 1)
    check_world_size(TrainConfig(batch_tokens=4 * 512, row_tokens=512), 2)
    with pytest.raises(PeagleError, match="multiple of 4 x 512"):
        check_world_size(TrainConfig(batch_tokens=1000, row_tokens=512), 4)
