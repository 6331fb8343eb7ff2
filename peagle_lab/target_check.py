"""Can a P-EAGLE / EAGLE-3 head serve this target here? Checked when the target loads (``models.load_target``),
before its weights are read and before any long work, each problem as one line naming the target, the problem
and the fix:

- a **chat template** (every prompt is distilled, trained on and served through it: ``prompts.chat_ids``);
- a **Llama-family decoder layout**: ``model.model.layers`` (decoder layers that take the residual stream, whose
  input is what a tap reads), ``model.model.norm`` (RMSNorm), token embeddings and an lm_head, RMS-norm and
  attention-head fields in the config (the head is built from them: ``PEagleConfig.from_target``);
- a **KV cache the loop can roll back**: attention layers only (full, sliding-window, chunked), no layer with a
  running state (:func:`peagle_lab.kv_cache.check_cache_rollback`).

Whether a given head fits the target (vocabulary, hidden size, taps, fingerprint) is
:func:`peagle_lab.drafter.heads.head_fit_problems`.
"""

from __future__ import annotations

from .errors import PeagleError

# what PEagleConfig.from_target and the loop read from the target's config
_CONFIG_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size",
                  "rms_norm_eps")


def _fail(name, problem: str, fix: str):
    raise PeagleError(f"target {name}: {problem}. Fix: {fix}")


def check_config(config, name) -> None:
    """The config-level checks (no weights needed): decoder-only, the fields a head is built from, a KV cache
    that rolls back."""
    from .kv_cache import check_cache_rollback

    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    if getattr(config, "is_encoder_decoder", False):
        _fail(name, f"{type(config).__name__} is an encoder-decoder model; EAGLE-3 / P-EAGLE heads draft for "
                    "decoder-only causal LMs", "use a decoder-only target (Llama, Qwen3, SmolLM2, Mistral, ...)")
    missing = [f for f in _CONFIG_FIELDS if getattr(cfg, f, None) is None]
    if missing:
        _fail(name, f"its config ({type(cfg).__name__}) lacks {', '.join(missing)}: not a Llama-family decoder "
                    "(RMSNorm, rotary attention, gated MLP), the layout the head is built from",
              "use a Llama-family target (Llama, Qwen2/3, Mistral, SmolLM2, ...)")
    try:
        check_cache_rollback(config)
    except PeagleError as exc:
        raise PeagleError(f"target {name}: {exc}") from None


def check_layout(model, name) -> None:
    """The module layout the taps and the head read: ``model.model.layers`` (a list of decoder layers),
    ``model.model.norm``, input embeddings and an lm_head."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    problems = []
    if layers is None or not hasattr(layers, "__len__") or len(layers) != model.config.num_hidden_layers:
        problems.append("no decoder layer list at model.model.layers")
    if getattr(inner, "norm", None) is None:
        problems.append("no final norm at model.model.norm")
    if model.get_output_embeddings() is None:
        problems.append("no lm_head")
    if problems:
        _fail(name, f"{type(model).__name__} has " + ", ".join(problems) + ": not the Llama-family layout the "
                    "taps and the head read", "use a Llama-family target (Llama, Qwen2/3, Mistral, SmolLM2, ...)")


def check_chat_template(tokenizer, name) -> None:
    if not getattr(tokenizer, "chat_template", None):
        _fail(name, "its tokenizer has no chat template; heads are distilled, trained and served on chat-formatted "
                    "prompts", "use an instruct/chat model, or save the template it was tuned with beside the "
                    "tokenizer (tokenizer.chat_template = ...; tokenizer.save_pretrained(DIR))")


def check_on_meta(config, name) -> None:
    """:func:`check_layout` on a weightless (meta-device) instance of ``config``: no weights are read."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError) as exc:
        _fail(name, f"transformers has no causal-LM class for {type(config).__name__} ({exc})",
              "use a decoder-only causal LM of the Llama family")
    check_layout(model, name)
