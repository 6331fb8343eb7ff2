#!/bin/bash
# A SageMaker notebook instance at every start (lifecycle configuration "Start notebook", run as ec2-user; see
# docs/sagemaker.md): register the `peagle-lab` Jupyter kernel of the env kept on the persistent volume, with the
# model caches on that volume written into the kernel's own environment (kernel.json "env": Jupyter kernels never
# read ~/.bashrc). Idempotent; without the env yet it says so and does nothing.
#
#   PEAGLE_VOLUME  the persistent volume (default ~/SageMaker)
#   PEAGLE_ENV     the conda env on it (default $PEAGLE_VOLUME/envs/peagle-lab)
#   PEAGLE_TARGET  optional: the target every notebook of this kernel uses (an HF id or a directory)
set -euo pipefail
VOLUME="${PEAGLE_VOLUME:-$HOME/SageMaker}"
ENV="${PEAGLE_ENV:-$VOLUME/envs/peagle-lab}"
if [ ! -x "$ENV/bin/python" ]; then
  echo "peagle-lab: no env at $ENV yet; create it once (docs/sagemaker.md), the next start registers its kernel"
  exit 0
fi
"$ENV/bin/python" -m ipykernel install --user --name peagle-lab --display-name "Python (peagle-lab)" >/dev/null
"$ENV/bin/python" - "$VOLUME" "$ENV" <<'PY'
import json
import os
import sys
from pathlib import Path

from jupyter_core.paths import jupyter_data_dir

volume, env = sys.argv[1], sys.argv[2]
spec = Path(jupyter_data_dir()) / "kernels" / "peagle-lab" / "kernel.json"  # where `install --user` wrote it
doc = json.loads(spec.read_text())
doc["env"] = {**doc.get("env", {}),
              "PEAGLE_CACHE": f"{volume}/.cache/peagle-lab",  # the converted model, heads made here
              "HF_HOME": f"{volume}/.cache/huggingface",  # hub downloads (an 8B target: 16 GB)
              "PEAGLE_RESULTS": f"{volume}/peagle-results",
              "PATH": f"{env}/bin:" + os.environ.get("PATH", "/usr/bin:/bin")}  # vLLM's server, nvidia-smi
if os.environ.get("PEAGLE_TARGET"):
    doc["env"]["PEAGLE_TARGET"] = os.environ["PEAGLE_TARGET"]
tmp = spec.with_suffix(".json.tmp")
tmp.write_text(json.dumps(doc, indent=1))
tmp.replace(spec)
print(f"peagle-lab: kernel registered ({spec}); caches on {volume}")
PY
