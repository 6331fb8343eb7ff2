"""Where a head given by name comes from: a local directory, or a Hugging Face hub id downloaded with
``huggingface_hub`` where the hub is reachable (offline: one error saying how to fetch it, never a retry).

:data:`PUBLISHED_HEADS` are the P-EAGLE heads published for the seed's targets (model cards on the hub; the vLLM
P-EAGLE blog post), by target id; :func:`published_head_for` names the one of a target.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..errors import PeagleError

# target id -> the P-EAGLE head published for it (the ids as the model cards' own `vllm serve` lines spell them)
PUBLISHED_HEADS = {
    "openai/gpt-oss-20b": "amazon/GPT-OSS-20B-P-EAGLE",
    "openai/gpt-oss-120b": "amazon/gpt-oss-120b-p-eagle",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct": "amazon/Qwen3-Coder-30B-A3B-Instruct-P-EAGLE",
}
# the K (parallel tokens) each published head was trained for, as its model card states it (the config.json does
# not say); heads whose card gives none are absent
PUBLISHED_TRAINED_K = {"amazon/GPT-OSS-20B-P-EAGLE": 10, "amazon/gpt-oss-120b-p-eagle": 8}
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
# what a head directory needs from the hub (config, weights, the card)
_HEAD_FILES = ["config.json", "*.safetensors", "*.safetensors.index.json", "README.md"]


def published_head_for(target) -> str | None:
    """The hub id of the P-EAGLE head published for ``target`` (a hub id, or a local directory named like its
    last part, any case); None when there is none."""
    name = str(target or "").rstrip("/")
    for tid, head in PUBLISHED_HEADS.items():
        if name.lower() == tid.lower() or Path(name).name.lower() == tid.split("/")[1].lower():
            return head
    return None


def card_trained_k(path) -> int | None:
    """The K a published head was trained for, by its model card (:data:`PUBLISHED_TRAINED_K`), for a head
    directory that is a copy of it: a hub cache folder (``models--amazon--GPT-OSS-20B-P-EAGLE/...``) or a folder
    named like the repository (``--local-dir .../GPT-OSS-20B-P-EAGLE``); None for any other head."""
    parts = [p.lower() for p in Path(str(path)).parts]
    for hub_id, k in PUBLISHED_TRAINED_K.items():
        name, cache = hub_id.split("/")[1].lower(), "models--" + hub_id.replace("/", "--").lower()
        if name in parts or cache in parts:
            return k
    return None


def is_hub_id(spec) -> bool:
    """Whether ``spec`` reads as a hub id (``owner/name``) and is not a local path."""
    s = str(spec)
    return bool(_HUB_ID.match(s)) and not Path(s).exists()


def fetch_hint(hub_id: str) -> str:
    """The commands that fetch a hub head by hand and pass it."""
    local = "heads/" + hub_id.split("/")[1]
    return (f"`hf download {hub_id} --local-dir {local}` (`huggingface-cli download` with huggingface_hub < 1.0), "
            f"then `--head {local}`")


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set: the hub is not to be asked."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def head_path(spec) -> Path:
    """The local directory of a head given as a directory or a hub id: a hub id is downloaded (config, weights,
    card) into the Hugging Face cache, or found there when offline; anything else is returned as a path (its
    absence is named by the caller)."""
    if not is_hub_id(spec):
        return Path(str(spec))
    from huggingface_hub import snapshot_download

    offline = hub_offline()
    try:
        return Path(snapshot_download(str(spec), allow_patterns=_HEAD_FILES, local_files_only=offline))
    except Exception as exc:  # noqa: BLE001 - any hub failure (offline, no network, no such repo) is one error
        why = "the hub is offline here (HF_HUB_OFFLINE)" if offline else \
            f"it could not be downloaded ({type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:160]})"
        raise PeagleError(f"The head '{spec}' is not a local directory and {why}. Fix: on a machine with the hub, "
                          f"{fetch_hint(str(spec))}.") from None


def cached_head(hub_id: str) -> Path | None:
    """The local copy of a hub head when it is already in the Hugging Face cache (nothing is downloaded), else
    None."""
    from huggingface_hub import snapshot_download

    try:
        path = Path(snapshot_download(hub_id, allow_patterns=_HEAD_FILES, local_files_only=True))
    except Exception:  # noqa: BLE001 - not cached (or no hub library state): there is no local copy
        return None
    return path if (path / "config.json").is_file() else None
