"""Megatron-style tensor parallelism of a Llama-family target, by hand, over ``torch.distributed`` ranks.

Each rank keeps its share of every decoder layer: the attention's whole KV-head groups (a KV head with the query
heads that read it; the groups may split unevenly, e.g. 2 and 1 of SmolLM2-135M's 3 over 2 ranks) with the matching
columns of ``o_proj``, and the MLP's share of the intermediate units (``gate_proj`` / ``up_proj`` split by output
rows, ``down_proj`` by input columns). ``o_proj`` and ``down_proj`` then give partial sums of the full output, which
one all-reduce each completes; the embedding, the norms and the lm_head stay whole on every rank. The model's own
modules run unchanged (its attention reads its head count from the projections' sizes; its RMSNorm and rotary
embedding are reused), so a :class:`~peagle_lab.decoding.target_runner.TargetRunner` drives a shard as it drives the
whole model, each rank's KV cache holding its own KV heads only.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ..errors import PeagleError


def split_sizes(n: int, parts: int) -> list[int]:
    """``n`` units over ``parts`` ranks, as even as they go, the larger shares first: ``split_sizes(3, 2) == [2, 1]``."""
    return [n // parts + (1 if r < n % parts else 0) for r in range(parts)]


def check_tp_size(tp: int, config, cores: int | None = None) -> None:
    """Refuse a tensor-parallel size the target cannot be split over (each rank needs at least one KV head) or that
    this machine cannot run one thread per rank for (more ranks than ``cores``), in one line with the fix."""
    kv = config.num_key_value_heads
    if not isinstance(tp, int) or tp < 1:
        raise PeagleError(f"tensor-parallel size {tp!r} is not a positive whole number. Fix: --tp 2.")
    if tp > kv:
        raise PeagleError(f"tensor-parallel size {tp} does not split the target's {kv} KV heads (each rank needs at "
                          f"least one whole KV-head group). Fix: --tp between 1 and {kv}.")
    if cores is not None and tp > cores:
        raise PeagleError(f"tensor-parallel size {tp} needs {tp} cores (one thread per rank); this machine lets "
                          f"this process use {cores}. Fix: --tp {min(cores, kv)} or a machine with more cores.")


class AllReduce(nn.Module):
    """A row-parallel linear: this rank's partial product, summed over the ranks by one all-reduce."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, x):
        out = self.linear(x)
        dist.all_reduce(out)
        return out


def _linear(weight, bias) -> nn.Linear:
    out = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        out.weight.copy_(weight)
        if bias is not None:
            out.bias.copy_(bias)
    return out


def rows(linear: nn.Linear, start: int, stop: int) -> nn.Linear:
    """The output units ``start:stop`` of ``linear`` (a column-parallel shard)."""
    bias = None if linear.bias is None else linear.bias[start:stop]
    return _linear(linear.weight[start:stop], bias)


def columns(linear: nn.Linear, start: int, stop: int, first: bool) -> AllReduce:
    """The input units ``start:stop`` of ``linear`` with the all-reduce after it (a row-parallel shard); the bias is
    added once, on the ``first`` rank."""
    return AllReduce(_linear(linear.weight[:, start:stop], linear.bias if first else None))


def _span(sizes: list[int], rank: int, unit: int = 1) -> tuple[int, int]:
    start = sum(sizes[:rank])
    return start * unit, (start + sizes[rank]) * unit


def shard_attention(attn, config, rank: int, world: int) -> None:
    """Keep this rank's KV-head groups of one attention module (in place)."""
    hd = attn.head_dim
    groups = config.num_attention_heads // config.num_key_value_heads
    sizes = split_sizes(config.num_key_value_heads, world)
    kv0, kv1 = _span(sizes, rank, hd)
    q0, q1 = _span(sizes, rank, hd * groups)
    attn.q_proj, attn.k_proj, attn.v_proj = rows(attn.q_proj, q0, q1), rows(attn.k_proj, kv0, kv1), \
        rows(attn.v_proj, kv0, kv1)
    attn.o_proj = columns(attn.o_proj, q0, q1, rank == 0)


def shard_mlp(mlp, config, rank: int, world: int) -> None:
    """Keep this rank's share of one gated MLP's intermediate units (in place)."""
    a, b = _span(split_sizes(config.intermediate_size, world), rank)
    mlp.gate_proj, mlp.up_proj = rows(mlp.gate_proj, a, b), rows(mlp.up_proj, a, b)
    mlp.down_proj = columns(mlp.down_proj, a, b, rank == 0)


@torch.no_grad()
def shard_model(model, rank: int, world: int):
    """Turn the loaded ``model`` (in place) into this rank's tensor-parallel shard of it, within the default process
    group of ``world`` ranks; returns the model. ``world == 1`` leaves it whole."""
    check_tp_size(world, model.config)
    if world == 1:
        return model
    for layer in model.model.layers:
        shard_attention(layer.self_attn, model.config, rank, world)
        shard_mlp(layer.mlp, model.config, rank, world)
    return model
