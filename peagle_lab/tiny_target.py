"""A second target for CI and for trying the workbook on another shape: a tiny, randomly initialised Qwen3
(``Qwen3ForCausalLM``: q/k norm, tied embeddings, grouped-query attention) with its own byte-level BPE vocabulary
trained on the project's prompts and a ChatML chat template, built offline in seconds and saved as a plain
Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files with ``chat_template``) that
``PEAGLE_TARGET=<dir>``, every ``peagle-lab`` command and vLLM load.

Everything that can differ from the embedded SmolLM2-135M does: architecture (Qwen3 vs Llama), hidden size (256
vs 576), layers (8 vs 30), heads (4 query / 2 KV vs 9 / 3), head dim (64, given explicitly, vs 64 derived),
vocabulary (its own 3,072 ids vs 49,152), mask token (``<|mask|>``, id 3, vs 16), tied embeddings, RoPE theta.
The weights are random, so its answers are noise; what it proves is that nothing in the workbook assumes
SmolLM2's shape. Seeded: the same seed gives the same files, byte for byte.

    peagle-lab make-tiny-target --out build/tiny-qwen3
    PEAGLE_TARGET=build/tiny-qwen3 PEAGLE_CI=1 make test
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import PeagleError
from .settings import data_path

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# ids 0..3 in this order: the padding/end-of-text token, ChatML's two markers, and a token that never occurs in
# chat text (the mask token a head for this target picks: vocab.pick_mask_token_id takes the last such one)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
MARKER = "peagle_tiny_target.json"  # what was built and how, beside the model


@dataclass(frozen=True)
class TinyTargetSpec:
    """The shape of the tiny target (defaults: unlike SmolLM2-135M in every field that could matter)."""

    vocab_size: int = 3072
    hidden_size: int = 256
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 512
    max_position_embeddings: int = 4096
    rope_theta: float = 1_000_000.0
    initializer_range: float = 0.05  # wider than transformers' 0.02: peakier logits, fewer exact ties
    seed: int = 0


CORPUS_PROMPTS = 6000  # enough text for a few thousand merges; the whole 30k-prompt mix only makes the build slower


def prompt_texts(limit: int = CORPUS_PROMPTS) -> list[str]:
    """The corpus the vocabulary is trained on: the first ``limit`` prompts of ``data/prompts/*.jsonl``, files in
    name order, lines in file order."""
    texts = []
    files = sorted(data_path("prompts").glob("*.jsonl"))
    if not files:
        raise PeagleError(f"No prompt files in {data_path('prompts')}: the tiny target's vocabulary is trained on "
                          "them. Fix: run from a peagle-lab checkout, or set PEAGLE_DATA to its data/ folder.")
    for f in files:
        for line in f.read_text(encoding="utf-8").splitlines():
            if line.strip():
                texts.append(json.loads(line)["prompt"])
    return texts[:limit]


def train_tokenizer(texts: list[str], vocab_size: int):
    """A byte-level BPE tokenizer of ``vocab_size`` ids (special tokens first) with the ChatML template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer=trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                  additional_special_tokens=["<|im_start|>", "<|mask|>"])
    tok.chat_template = CHATML_TEMPLATE
    return tok


def build_model(spec: TinyTargetSpec, vocab_size: int, eos_id: int, pad_id: int):
    """A randomly initialised ``Qwen3ForCausalLM`` of ``spec``'s shape, fp32, from ``spec.seed``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=vocab_size, hidden_size=spec.hidden_size,
                         intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
                         num_attention_heads=spec.num_attention_heads,
                         num_key_value_heads=spec.num_key_value_heads, head_dim=spec.head_dim,
                         max_position_embeddings=spec.max_position_embeddings, tie_word_embeddings=True,
                         rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
                         initializer_range=spec.initializer_range, rms_norm_eps=1e-6, use_sliding_window=False,
                         bos_token_id=None, eos_token_id=eos_id, pad_token_id=pad_id, dtype="float32")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = Qwen3ForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    return model


def make_tiny_target(out, spec: TinyTargetSpec = TinyTargetSpec(), overwrite: bool = False) -> Path:
    """Build the tiny target into the directory ``out`` (written under a temporary name, then renamed: a
    half-built target is never picked up); return ``out``. An existing ``out`` is kept when it was built with
    the same ``spec``, refused otherwise unless ``overwrite``."""
    import os
    import shutil
    import tempfile

    out = Path(out)
    if out.exists():
        marker = out / MARKER
        same = marker.is_file() and json.loads(marker.read_text()).get("spec") == asdict(spec)
        if same and not overwrite:
            return out
        if not overwrite:
            raise PeagleError(f"{out} exists and {'holds another build' if marker.is_file() else 'is not a tiny target'}"
                              f". Fix: pass another --out, or --overwrite to replace it.")
        if not marker.is_file() and any(out.iterdir()):
            raise PeagleError(f"{out} is not a tiny target built here (no {MARKER}): refusing to replace it. "
                              "Fix: pass another --out.")
    texts = prompt_texts()
    tok = train_tokenizer(texts, spec.vocab_size)
    model = build_model(spec, len(tok), tok.eos_token_id, tok.pad_token_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a one-file "writing shards" bar only clutters logs
        try:
            model.save_pretrained(staging)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        tok.save_pretrained(staging)
        record = {"spec": asdict(spec), "architecture": "Qwen3ForCausalLM", "vocab_size": len(tok),
                  "mask_token": "<|mask|>", "mask_token_id": tok.convert_tokens_to_ids("<|mask|>"),
                  "corpus": f"data/prompts/*.jsonl, first {CORPUS_PROMPTS} prompts", "corpus_prompts": len(texts),
                  "command": "peagle-lab make-tiny-target"}
        (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n")
        os.chmod(staging, 0o777 & ~_umask())
        for f in staging.iterdir():  # the usual permissions, not the temporary files' 0600
            os.chmod(f, 0o666 & ~_umask())
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _umask() -> int:
    from .atomic import umask

    return umask()


def is_tiny_target(path) -> bool:
    """Whether ``path`` is a directory built by :func:`make_tiny_target`."""
    return (Path(str(path)).expanduser() / MARKER).is_file()


# ------------------------------------------------------------------------------------------ CLI
def register_cli(sub):
    p = sub.add_parser("make-tiny-target",
                       help="build a tiny random Qwen3 target (own BPE vocabulary, ChatML template) for CI")
    p.add_argument("--out", required=True, help="output directory (a Hugging Face model folder)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a tiny target built with other settings")
    p.set_defaults(func=_run_cli)


def _run_cli(args):
    import time

    t0 = time.perf_counter()
    out = make_tiny_target(args.out, TinyTargetSpec(seed=args.seed), overwrite=args.overwrite)
    rec = json.loads((out / MARKER).read_text())
    s = rec["spec"]
    print(f"{out}: Qwen3ForCausalLM, {s['num_hidden_layers']} layers, hidden {s['hidden_size']}, "
          f"{s['num_attention_heads']} heads ({s['num_key_value_heads']} KV), vocab {rec['vocab_size']}, "
          f"mask token {rec['mask_token']} = {rec['mask_token_id']}; {time.perf_counter() - t0:.1f} s")
    return 0
