"""Tooling that checks the project rather than teaching it: ``gpu_check`` (what only a CUDA GPU shows, run by
``scripts/gpu_check.sh``: every stage of the loop, the notebooks and vLLM at real size, each result on disk)."""
