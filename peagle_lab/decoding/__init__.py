"""Speculative decoding, in its parts: the loop (``speculative``: draft K -> verify in one target pass -> accept ->
roll back), the target with its KV cache (``target_runner``), what proposes the drafts (``draft_sources``), the
EAGLE shift (``slots``), sampling and the acceptance rules (``sampling``) and the lossless checks against plain
greedy decoding (``divergence``). The position-indexed caches of both models are :mod:`peagle_lab.kv_cache`.
"""
