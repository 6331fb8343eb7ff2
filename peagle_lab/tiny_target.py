"""Tiny targets for CI and for trying the workbook on other shapes, built offline in seconds from random weights,
each with its own byte-level BPE vocabulary trained on the project's prompts and its own chat template, saved as a
plain Hugging Face folder (``config.json``, ``model.safetensors``, tokenizer files with ``chat_template``) that
``PEAGLE_TARGET=<dir>``, every ``peagle-lab`` command and vLLM load. Three architectures (``--arch``):

- ``qwen3``: ``Qwen3ForCausalLM`` (q/k norm, tied embeddings, grouped-query attention), ChatML template;
- ``gpt-oss``: ``GptOssForCausalLM``, the architecture of the published P-EAGLE heads' headline target: layers
  alternating sliding-window (window 16) and full attention, attention sinks, a mixture of experts (4 experts,
  top-2), GPT-OSS's YaRN RoPE, untied embeddings, a harmony-style template (``<|start|>role<|message|>...<|end|>``);
- ``qwen3-moe``: ``Qwen3MoeForCausalLM`` (Qwen3-Coder-30B-A3B's architecture): 8 experts, top-2, on every layer.

Everything that can differ from the embedded SmolLM2-135M does: architecture, hidden size (256 vs 576), layers,
heads, head dim (64, given explicitly), vocabulary (its own 3,072 ids vs 49,152), mask token (``<|mask|>``, the last
special token, vs 16), RoPE. The weights are random, so the answers are noise; what a tiny target proves is that
nothing in the workbook assumes SmolLM2's shape, and (GPT-OSS) that the loop stays lossless past a sliding window.
Seeded: the same arch and seed give the same files, byte for byte.

    peagle-lab make-tiny-target --arch gpt-oss --out build/tiny-gpt-oss
    PEAGLE_TARGET=build/tiny-gpt-oss PEAGLE_CI=1 make test
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .atomic import atomic_directory
from .errors import PeagleError
from .settings import data_path

CHATML_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
HARMONY_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|start|>' + message['role'] + '<|message|>' + message['content'] + '<|end|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start|>assistant<|message|>' }}{%- endif %}"
)
# ids 0..3 in this order: the padding/end-of-text token, ChatML's two markers, and a token that never occurs in
# chat text (the mask token a head for this target picks: vocab.pick_mask_token_id takes the last such one)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>")
HARMONY_SPECIAL_TOKENS = ("<|endoftext|>", "<|start|>", "<|message|>", "<|end|>", "<|mask|>")


@dataclass(frozen=True)
class Chat:
    """A tiny target's chat format: its special tokens (ids 0.., the mask token last), template, end of turn."""

    specials: tuple[str, ...]
    template: str
    eos: str


CHATS = {"chatml": Chat(SPECIAL_TOKENS, CHATML_TEMPLATE, "<|im_end|>"),
         "harmony": Chat(HARMONY_SPECIAL_TOKENS, HARMONY_TEMPLATE, "<|end|>")}
ARCHS = ("qwen3", "gpt-oss", "qwen3-moe")
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
    arch: str = "qwen3"
    sliding_window: int = 16  # gpt-oss: its sliding layers see the last 16 positions (prompts are longer)
    num_experts: int = 8  # the MoE architectures
    num_experts_per_tok: int = 2

    @property
    def chat(self) -> Chat:
        return CHATS["harmony" if self.arch == "gpt-oss" else "chatml"]


def spec_for(arch: str = "qwen3", seed: int = 0) -> TinyTargetSpec:
    """The default tiny target of ``arch`` (one of :data:`ARCHS`)."""
    if arch not in ARCHS:
        raise PeagleError(f"Unknown tiny-target architecture {arch!r}. Fix: pick one of {', '.join(ARCHS)}.")
    if arch == "gpt-oss":
        return TinyTargetSpec(arch=arch, seed=seed, num_hidden_layers=4, num_experts=4, intermediate_size=256)
    if arch == "qwen3-moe":
        return TinyTargetSpec(arch=arch, seed=seed, num_hidden_layers=6, intermediate_size=128)
    return TinyTargetSpec(seed=seed)


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


def train_tokenizer(texts: list[str], vocab_size: int, chat: Chat = CHATS["chatml"]):
    """A byte-level BPE tokenizer of ``vocab_size`` ids (``chat``'s special tokens first) with ``chat``'s template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(chat.specials), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(texts, trainer=trainer)
    others = [t for t in chat.specials if t not in (chat.eos, "<|endoftext|>")]
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=chat.eos, pad_token="<|endoftext|>",
                                  additional_special_tokens=others)
    tok.chat_template = chat.template
    return tok


def _config(spec: TinyTargetSpec, vocab_size: int, eos_id: int, pad_id: int):
    """The transformers config of ``spec``'s architecture and shape."""
    from transformers import GptOssConfig, Qwen3Config, Qwen3MoeConfig

    common = dict(vocab_size=vocab_size, hidden_size=spec.hidden_size, num_hidden_layers=spec.num_hidden_layers,
                  num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
                  head_dim=spec.head_dim, max_position_embeddings=spec.max_position_embeddings,
                  initializer_range=spec.initializer_range, rms_norm_eps=1e-6, bos_token_id=None,
                  eos_token_id=eos_id, pad_token_id=pad_id, dtype="float32")
    rope = {"rope_type": "default", "rope_theta": spec.rope_theta}
    if spec.arch == "gpt-oss":
        kinds = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(spec.num_hidden_layers)]
        # GPT-OSS's own RoPE (YaRN, factor 32 over 4,096 positions: 131,072), as vLLM's GptOss reads it
        yarn = {**GptOssConfig().rope_parameters, "rope_theta": spec.rope_theta}
        return GptOssConfig(**{**common, "max_position_embeddings": 32 * yarn["original_max_position_embeddings"]},
                            intermediate_size=spec.intermediate_size, layer_types=kinds,
                            sliding_window=spec.sliding_window, num_local_experts=spec.num_experts,
                            num_experts_per_tok=spec.num_experts_per_tok, tie_word_embeddings=False,
                            rope_parameters=yarn)
    if spec.arch == "qwen3-moe":
        return Qwen3MoeConfig(**common, intermediate_size=spec.intermediate_size * 4,
                              moe_intermediate_size=spec.intermediate_size, num_experts=spec.num_experts,
                              num_experts_per_tok=spec.num_experts_per_tok, decoder_sparse_step=1, mlp_only_layers=[],
                              tie_word_embeddings=False, rope_parameters=rope, use_sliding_window=False)
    return Qwen3Config(**common, intermediate_size=spec.intermediate_size, tie_word_embeddings=True,
                       rope_parameters=rope, use_sliding_window=False)


def build_model(spec: TinyTargetSpec, vocab_size: int, eos_id: int, pad_id: int):
    """A randomly initialised causal LM of ``spec``'s architecture and shape, fp32, from ``spec.seed``."""
    import torch
    from transformers import AutoModelForCausalLM

    config = _config(spec, vocab_size, eos_id, pad_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = AutoModelForCausalLM.from_config(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = eos_id
    model.generation_config.pad_token_id = pad_id
    model.generation_config.bos_token_id = None
    return model


def make_tiny_target(out, spec: TinyTargetSpec = TinyTargetSpec(), overwrite: bool = False) -> Path:
    """Build the tiny target into the directory ``out`` (written under a temporary name, then renamed: a
    half-built target is never picked up); return ``out``. An existing ``out`` is kept when it was built with
    the same ``spec``, refused otherwise unless ``overwrite``."""
    out = Path(out)
    if out.exists():
        marker = out / MARKER
        same = marker.is_file() and _recorded_spec(marker) == asdict(spec)
        if same and not overwrite:
            return out
        if not overwrite:
            raise PeagleError(f"{out} exists and {'holds another build' if marker.is_file() else 'is not a tiny target'}"
                              f". Fix: pass another --out, or --overwrite to replace it.")
        if not marker.is_file() and any(out.iterdir()):
            raise PeagleError(f"{out} is not a tiny target built here (no {MARKER}): refusing to replace it. "
                              "Fix: pass another --out.")
    texts = prompt_texts()
    tok = train_tokenizer(texts, spec.vocab_size, spec.chat)
    model = build_model(spec, len(tok), tok.eos_token_id, tok.pad_token_id)
    with atomic_directory(out) as staging:
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a one-file "writing shards" bar only clutters logs
        try:
            model.save_pretrained(staging)
        finally:
            if bars:
                hf_logging.enable_progress_bar()
        tok.save_pretrained(staging)
        record = {"spec": asdict(spec), "architecture": type(model).__name__, "vocab_size": len(tok),
                  "mask_token": "<|mask|>", "mask_token_id": tok.convert_tokens_to_ids("<|mask|>"),
                  "corpus": f"data/prompts/*.jsonl, first {CORPUS_PROMPTS} prompts", "corpus_prompts": len(texts),
                  "command": f"peagle-lab make-tiny-target --arch {spec.arch}"}
        (staging / MARKER).write_text(json.dumps(record, indent=1) + "\n")
    return out


def _recorded_spec(marker: Path) -> dict:
    """The spec a tiny target was built with (fields added since it was built take their defaults)."""
    return {**asdict(TinyTargetSpec()), **(json.loads(marker.read_text()).get("spec") or {})}
