"""The head layouts other writers use, read as vLLM reads them and mapped onto this package's one layout.

A head in vLLM's eagle3 layout comes from several writers: this package (``save_pretrained``, ``export_vllm``),
vllm-project/speculators (``speculators_model_type`` ``eagle3`` / ``peagle`` with a nested
``transformer_layer_config``) and the published P-EAGLE heads (a flat ``LlamaForCausalLMEagle3`` config with
``ptd_token_id``). vLLM reads all of them the same way (``llama_eagle3.py``, ``configs/speculators/``,
the parallel-drafting proposer); so does :func:`flat_config` (the config) and :func:`canonical_tensors` (the
weights' names), and :func:`unsupported_variants` names what vLLM computes for a head that this drafter does not,
so such a head is refused instead of drafting another function.
"""

from __future__ import annotations

from ..errors import PeagleError

# what vLLM reads of a speculators config besides transformer_layer_config (configs/speculators/algos.py)
_SPECULATORS_FIELDS = ("draft_vocab_size", "target_hidden_size", "norm_before_residual", "norm_before_fc", "fc_norm",
                       "norm_output", "eagle_aux_hidden_state_layer_ids", "mask_token_id")
# vLLM's default for norm_before_residual when a speculators config does not say, by speculators_model_type
_NORM_BEFORE_RESIDUAL_DEFAULT = {"eagle3": True, "peagle": False}
_SPECULATORS_MODES = {"eagle3": "sequential", "peagle": "parallel"}


def flat_config(d: dict) -> dict:
    """The flat (vLLM eagle3) form of a head's config.json: a speculators config becomes its
    ``transformer_layer_config`` plus the fields vLLM copies from the top level (the mask token, the taps, the
    norms, the draft vocabulary), with the drafting mode, trained K and target under ``peagle`` as this package
    writes them; any other config is returned as it is."""
    kind = d.get("speculators_model_type")
    if kind is None:
        return d
    if kind not in _SPECULATORS_MODES:
        raise PeagleError(f"config.json is a speculators '{kind}' head: only eagle3 and peagle heads draft here. "
                          "Fix: pass an EAGLE-3 or P-EAGLE head.")
    layer = d.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise PeagleError("config.json is a speculators head without a transformer_layer_config object. Fix: re-save "
                          "the head with speculators, or correct config.json.")
    flat = {**layer, **{k: d[k] for k in _SPECULATORS_FIELDS if d.get(k) is not None}}
    flat.setdefault("norm_before_residual", _NORM_BEFORE_RESIDUAL_DEFAULT[kind])
    spec = d.get("speculators_config") or {}
    methods = spec.get("proposal_methods") or [{}]
    peagle = {"mode": _SPECULATORS_MODES[kind], "target": (spec.get("verifier") or {}).get("name_or_path") or ""}
    k = methods[0].get("speculative_tokens")
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        peagle["num_speculative_tokens"] = k
    flat["peagle"] = {**peagle, **(d.get("peagle") or {})}
    return flat


def unsupported_variants(d: dict) -> list[str]:
    """What a flat config asks vLLM to compute that this drafter does not (empty: nothing): another layer type
    (Qwen3's q/k norms), biases, norms before or after ``fc``, no ``fc`` at all."""
    out = []
    kind = d.get("model_type")
    if kind not in (None, "llama"):
        out.append(f"model_type '{kind}' (layers other than Llama's, e.g. Qwen3's q/k norms)")
    out += [f"{name}: true" for name in ("attention_bias", "mlp_bias", "norm_before_fc", "fc_norm", "norm_output")
            if d.get(name)]
    if (d.get("eagle_config") or {}).get("use_aux_hidden_state") is False:
        out.append("eagle_config.use_aux_hidden_state: false (no fc over target taps)")
    return out


def check_supported(d: dict) -> None:
    """Refuse, in one line naming the fields, a head whose config asks for what this drafter does not compute."""
    found = unsupported_variants(d)
    if found:
        raise PeagleError("This head asks for " + "; ".join(found) + ", which this drafter (vLLM's Llama eagle3 "
                          "head) does not compute: it would draft another function. Fix: use a head with plain "
                          "Llama layers (vLLM's LlamaForCausalLMEagle3 without these options).")


def canonical_tensors(tensors: dict, where: str = "the head") -> dict:
    """``tensors`` (name -> tensor or shape) under this package's names: vLLM's and speculators' ``layers.0.``
    is ``midlayer.`` (vLLM maps ``midlayer.`` to ``layers.0.``); a head that stores both is refused."""
    out = {}
    for name, value in tensors.items():
        new = "midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name
        if new in out:
            raise PeagleError(f"{where} stores layer 0 twice ({new} and layers.0.{new[len('midlayer.'):]}). Fix: "
                              "keep one of the two names (vLLM reads either).")
        out[new] = value
    return out
