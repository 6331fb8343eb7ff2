"""The P-EAGLE drafter (an EAGLE-3 head that can also draft K tokens in one forward pass), in these parts:

* :mod:`.config`: :class:`PEagleConfig` (from a target, to/from ``config.json``, validation), RoPE parameters;
* :mod:`.network`: the modules (attention with its 2H-input first layer, layers, rotary tables) and
  :class:`PEagleDrafter`'s forward, with its KV cache :class:`DrafterCache`;
* :mod:`.checkpoint`: ``save_pretrained`` / ``from_pretrained`` in vLLM's eagle3 names (docs/checkpoint-format.md);
* :mod:`.context`: the ``mask_hidden='context'`` variant at inference (:func:`drafting_head`);
* :mod:`.vocab`: the draft vocabulary (``d2t`` / ``t2d``) and the mask token;
* :mod:`.layouts`: the head layouts other writers use (speculators, the published heads), read as vLLM reads them;
* :mod:`.hub`: heads given by hub id, and the P-EAGLE heads published for the seed's targets;
* :mod:`.heads`: the shipped heads, ``load_head``, fresh (untrained) heads and the head for a target.

``from peagle_lab.drafter import PEagleConfig, PEagleDrafter`` is all most code needs.
"""

from .config import (CONFIG, WEIGHTS, PEagleConfig, normalise_rope_parameters, supported_rope_types,
                     target_rope_parameters, validate_config_dict)
from .network import (MLP, Attention, DecoderLayer, DrafterCache, PEagleDrafter, RMSNorm, RotaryTables,
                      rope_cos_sin)

__all__ = ["CONFIG", "WEIGHTS", "Attention", "DecoderLayer", "DrafterCache", "MLP", "PEagleConfig", "PEagleDrafter",
           "RMSNorm", "RotaryTables", "normalise_rope_parameters", "rope_cos_sin", "supported_rope_types",
           "target_rope_parameters", "validate_config_dict"]
