"""A fast-path candidate measured by ``peagle-lab bench`` (``fastpath_ab.csv``: ``decode_lm_head`` and
``verify_lm_head`` rows), not applied by default:

* ``fp32_lm_head``: run a bf16 target's output layer on CPU from an fp32 copy of its weight. In isolation, a
  bf16 ``lm_head`` over 1-9 rows of the target's real hidden states was 10x slower than its fp32 copy on the
  2-core AMD EPYC (AVX512-BF16) host; inside a whole decode step and a whole verification the fp32 copy was
  slower instead (the extra 113 MB of weights read per step cost more than it saved). The bench keeps measuring
  it so another host can show otherwise. It keeps the module and its tie to the embeddings, so saving and
  exporting are unchanged; logits come out in fp32.
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F


def _fp32_forward(self, x):
    return F.linear(x.float(), self._peagle_fp32_weight)


def fp32_lm_head(model) -> bool:
    """Run ``model``'s output layer in fp32 from an fp32 copy of its weight (a no-op for fp32 models, on CUDA,
    or when already applied). Returns whether it was applied."""
    head = model.get_output_embeddings()
    if head is None or not isinstance(head, torch.nn.Linear) or head.bias is not None:
        return False
    if head.weight.dtype == torch.float32 or head.weight.device.type != "cpu":
        return False
    if getattr(head, "_peagle_fp32_weight", None) is None:
        head._peagle_fp32_weight = head.weight.detach().float().contiguous()
        head.forward = types.MethodType(_fp32_forward, head)
    return True


def undo_fp32_lm_head(model) -> None:
    """Back to the module's own forward (for A/B timings)."""
    head = model.get_output_embeddings()
    if getattr(head, "_peagle_fp32_weight", None) is not None:
        del head.forward
        head._peagle_fp32_weight = None
