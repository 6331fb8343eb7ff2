"""Training with two processes on the CPU (gloo), launched as users launch it: torchrun and accelerate launch.

Each run trains the real Trainer on a tiny target (tests/workers/distributed_train.py) and compares with one
process: same global batch, so the same loss trajectory (DDP averages the gradients of the two halves of each
step; the sums differ only in float rounding order), disjoint rows per process, files written by rank 0 only,
and a state saved at one world size resumed at the other.
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
WORKER = Path(__file__).parent / "workers" / "distributed_train.py"
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


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    return _run("single", tmp_path_factory.mktemp("single"))[0]


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_two_processes_follow_one_process(launcher, single, tmp_path):
    ranks = _run(launcher, tmp_path)
    assert [r["world"] for r in ranks] == [2, 2]
    for r in ranks:  # the logged loss is the global batch's, on every rank
        assert r["losses"] == pytest.approx(single["losses"], rel=TOL)
    for step, whole in enumerate(single["rows"]):  # each process its own rows, together the one process's
        mine, theirs = ranks[0]["rows"][step], ranks[1]["rows"][step]
        assert mine and theirs and sorted(mine + theirs) == sorted(whole)
        assert not set(map(tuple, mine)) & set(map(tuple, theirs))
    assert ranks[1]["writes"] == []  # only rank 0 writes checkpoints, heads and logs
    head = tmp_path / "head"
    assert (head / "config.json").exists() and (head / "checkpoint" / "state.pt").exists()
    assert not [p for p in head.rglob("*") if ".tmp" in p.name]  # atomic: no half-written file left


@pytest.mark.parametrize("first,then", [("torchrun", "single"), ("single", "torchrun")])
def test_a_run_saved_at_one_world_size_resumes_at_the_other(first, then, single, tmp_path):
    _run(first, tmp_path, "--stop-after", "4")  # a checkpoint every 2 steps: step 4 is saved
    for p in tmp_path.glob("rank*.json"):
        p.unlink()
    ranks = _run(then, tmp_path, "--resume")
    assert all(r["step"] == 6 for r in ranks)
    for r in ranks:  # the resumed steps 5-6 are the uninterrupted run's
        assert r["losses"][-2:] == pytest.approx(single["losses"][-2:], rel=TOL)


def test_a_global_batch_the_world_cannot_share_is_refused():
    cfg = TrainConfig(batch_tokens=3 * 512, row_tokens=512)
    with pytest.raises(PeagleError, match=r"3 rows of --row-tokens 512, which 2 processes cannot share.*1024"):
        check_world_size(cfg, 2)
    check_world_size(cfg, 1)
    check_world_size(TrainConfig(batch_tokens=4 * 512, row_tokens=512), 2)
    with pytest.raises(PeagleError, match="multiple of 4 x 512"):
        check_world_size(TrainConfig(batch_tokens=1000, row_tokens=512), 4)
