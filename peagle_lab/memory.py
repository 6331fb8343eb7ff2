"""Memory a model takes, counted without materialising it (a meta-device instance of its config), and the one
check before a load: a GPU too small for the target in the chosen dtype is named in one line, with the need and
the free memory, before any weight is read.

Sizes are bytes; :func:`gib` writes them for people. What a whole notebook holds at its peak is
:mod:`peagle_lab.workbook.memory_plan`, built from these counts.
"""

from __future__ import annotations

import torch

from .errors import PeagleError

GIB = 1 << 30


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:.1f} GiB"


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def parameter_count(config) -> int:
    """The parameters of the causal LM ``config`` describes, counted on the meta device (no memory, no weights
    read); a tied embedding / lm_head is counted once."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def module_parameter_count(module: torch.nn.Module, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def _text(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def weights_bytes(config, dtype: torch.dtype) -> int:
    """The target's weights in ``dtype``."""
    return parameter_count(config) * dtype_bytes(dtype)


def kv_cache_bytes(config, tokens: int, dtype: torch.dtype) -> int:
    """Keys and values of every layer for ``tokens`` positions."""
    cfg = _text(config)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    return 2 * cfg.num_hidden_layers * kv_heads * head_dim * tokens * dtype_bytes(dtype)


def forward_bytes(config, tokens: int, dtype: torch.dtype) -> int:
    """What one forward over ``tokens`` positions keeps beside the weights when the taps are read: every layer's
    hidden states (``output_hidden_states``) and the logits, in ``dtype`` and once more in fp32."""
    cfg = _text(config)
    hidden = (cfg.num_hidden_layers + 1) * tokens * cfg.hidden_size * dtype_bytes(dtype)
    logits = tokens * cfg.vocab_size * (dtype_bytes(dtype) + 4)
    return hidden + logits


def release() -> None:
    """Give back what deleted names held: Python's cycles collected and, on CUDA, the allocator's cached blocks
    returned to the driver (so a trainer or a vLLM engine started next finds them free)."""
    import gc

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cuda_free(device) -> tuple[int, int]:
    """``(free, total)`` bytes of a CUDA device, as the driver reports them."""
    return tuple(int(x) for x in torch.cuda.mem_get_info(torch.device(device)))


def fits(need: int, device) -> bool:
    """Whether ``need`` bytes fit the free memory of a CUDA ``device`` (always True elsewhere: see
    :func:`check_fits`)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return dev.type != "cuda" or not torch.cuda.is_available() or need <= cuda_free(dev)[0]


def check_fits(need: int, device, what: str, fix: str) -> None:
    """On a CUDA ``device``, one line (a :class:`PeagleError`) when ``need`` bytes exceed its free memory, naming
    both; on other devices nothing (the OS reports RAM too loosely to refuse on)."""
    if fits(need, device):
        return
    dev = torch.device(device or "cuda")
    free, total = cuda_free(dev)
    raise PeagleError(f"{what} needs {gib(need)} of GPU memory; {dev} has {gib(free)} free of {gib(total)}. "
                      f"Fix: {fix}")


def check_target_fits(config, dtype: torch.dtype, device, name: str) -> None:
    """Before a target's weights are read onto a GPU: its weights in ``dtype`` must fit the free memory."""
    from .precision import dtype_name

    fix = ("free the GPU (another notebook's kernel or a vLLM engine may hold it), use a larger GPU, or a smaller "
           "target" + ("; or PEAGLE_DTYPE=auto (bf16 / fp16 on CUDA, half of float32)" if dtype == torch.float32
                      else ""))
    check_fits(weights_bytes(config, dtype), device, f"target {name}'s weights in {dtype_name(dtype)}", fix)
