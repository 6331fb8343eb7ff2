"""The ``mask_hidden='context'`` variant of a head at inference (:class:`ContextMaskDrafter`): its mask slots take
the last context slot's hidden state. :func:`drafting_head` is what drafts for a head, the variant applied."""

from __future__ import annotations

from torch import nn

from ..errors import PeagleError
from .network import PEagleDrafter


class ContextMaskDrafter(nn.Module):
    """The ``mask_hidden='context'`` variant at inference: mask slots copy the last context slot's fused hidden
    ``fc(h_context)`` instead of ``fc(mask_hidden)`` (notebook 02's experiment; not a vLLM layout).

    A view of ``head``: it holds the head as its only submodule (the same parameters, nothing copied; training or
    loading the head shows here) and overrides ``fuse`` / ``mask_slot_hidden`` only; everything else (``config``,
    ``forward``, ``new_cache``, ``to_target_logits``, ...) is the head's. The head itself is left as it is."""

    def __init__(self, head: PEagleDrafter):
        super().__init__()
        self.head = head
        self._last = None

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)  # parameters, buffers, submodules (``head``) of this module
        except AttributeError:
            if name == "head":
                raise
            return getattr(self.head, name)

    def forward(self, *args, **kwargs):
        return self.head(*args, **kwargs)

    def fuse(self, taps):
        out = self.head.fuse(taps)
        self._last = out.reshape(-1, out.shape[-1])[-1:].reshape(1, 1, -1)
        return out

    def mask_slot_hidden(self):
        if self._last is None:
            raise PeagleError("ContextMaskDrafter.mask_slot_hidden() needs a fuse() of the context first.")
        return self._last


def as_context_drafter(head: PEagleDrafter) -> ContextMaskDrafter:
    """The ``context`` variant of ``head`` (shares its parameters); ``head`` keeps its class and behaviour."""
    return head if isinstance(head, ContextMaskDrafter) else ContextMaskDrafter(head)


def drafting_head(head: PEagleDrafter):
    """The module that drafts for ``head``: the head itself, or for a head trained with ``mask_hidden='context'``
    (``config.extra['mask_hidden_variant']``) its :class:`ContextMaskDrafter` view."""
    if head.config.extra.get("mask_hidden_variant") == "context":
        return as_context_drafter(head)
    return head
