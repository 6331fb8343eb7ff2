"""scripts/gpu_heads.sh: its CPU dry run (tiny sizes, the same commands as on a GPU) writes both heads,
their records with held-out and HumanEval figures, and a summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.real_model
def test_gpu_heads_dry_run_on_cpu(tmp_path):
    env = dict(os.environ, PEAGLE_GPU_DRY_RUN="1", PEAGLE_PYTHON=sys.executable, OMP_NUM_THREADS="1",
               PEAGLE_RESULTS=str(tmp_path / "results"))
    env.pop("PEAGLE_TARGET", None)
    out = tmp_path / "gpu"
    run = subprocess.run(["bash", "scripts/gpu_heads.sh", str(out)], cwd=REPO, env=env, capture_output=True,
                         text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"peagle", "eagle3"}
    for name, mode in (("peagle", "parallel"), ("eagle3", "sequential")):
        rec = json.loads((out / name / "training.json").read_text())
        assert rec["config"]["mode"] == mode and rec["data"]["split"] == "train"
        assert rec["tokens_seen"] > 0 and rec["autocast"] == "bfloat16" and rec["machine"]["host"]
        assert rec["features"]["source"].startswith("offline shards")
        assert set(rec["eval"]["acceptance_length"]) == {"1", "3"} and rec["eval_val"]["prompt_set"].startswith("held")
        assert (out / name / "TRAINING.md").exists() and (out / name / "model.safetensors").exists()
    # installed where head_for_target looks for a head trained here for this target, without the training state
    for kind, name in (("parallel", "peagle"), ("sequential", "eagle3")):
        installed = tmp_path / "results" / "heads" / "smollm2-135m" / kind
        assert (installed / "model.safetensors").read_bytes() == (out / name / "model.safetensors").read_bytes()
        assert not (installed / "checkpoint").exists()
    assert "--stream" in (REPO / "scripts" / "gpu_heads.sh").read_text()
    shards = list((out / "features").glob("part-*"))
    assert [p.name for p in shards] == ["part-train"]  # the trainers found every sequence there: no second part


def test_one_trainer_failing_stops_the_other(tmp_path):
    """gpu_heads.sh trains both heads through `together`: when one fails, the other is killed at once (no orphan
    keeps the GPU) and the failure's exit code comes back; both succeeding gives 0."""
    marker = tmp_path / "finished"
    script = (f"source scripts/lib/together.sh; SECONDS=0; "
              f"together slow 'sleep 30; touch {marker}' bad 'sleep 1; exit 3'; rc=$?; echo rc=$rc s=$SECONDS; "
              "together a 'X=1 true' b 'sleep 1'; echo both=$?")
    run = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    rc, secs = run.stdout.split()[0], int(run.stdout.split()[1].split("=")[1])
    assert rc == "rc=3" and secs < 15, run.stdout + run.stderr
    assert "bad failed (exit 3): stopping the other" in run.stderr
    assert "both=0" in run.stdout
    subprocess.run(["sleep", "2"])
    assert not marker.exists()  # the slow one was killed, not left running
    ps = subprocess.run(["pgrep", "-f", f"touch {marker}"], capture_output=True, text=True)
    assert ps.stdout.strip() == ""
