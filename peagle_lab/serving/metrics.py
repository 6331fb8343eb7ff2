"""Spec-decode counters in numbers: acceptance length (with the +1 bonus) and per-position rates, the
difference between two readings, and the ``vllm:spec_decode_*`` counters of a server's Prometheus ``/metrics``
page (read with ``prometheus_client``'s parser)."""

from __future__ import annotations

from ..errors import PeagleError


def unconditional_acceptance(drafts: int, accepted_per_position) -> list[float]:
    """P(position i accepted) per draft (vLLM's per-position rate): accepted at i / drafts (0 with no drafts)."""
    return [int(a) / int(drafts) if drafts else 0.0 for a in accepted_per_position]


def conditional_acceptance(drafts: int, accepted_per_position) -> list[float]:
    """P(position i accepted | position i-1 accepted): accepted at i / accepted at i-1 (vLLM drafts K every
    round, so a position is attempted exactly when the one before it was accepted); NaN where never attempted.
    ``SpecStats.conditional_acceptance`` is the same rate for our loop."""
    per_pos = [int(x) for x in accepted_per_position]
    rates = unconditional_acceptance(drafts, per_pos)
    return [rates[0] if i == 0 else (per_pos[i] / per_pos[i - 1] if per_pos[i - 1] else float("nan"))
            for i in range(len(per_pos))]


def summarise_spec(drafts: float, draft_tokens: float, accepted: float, per_pos) -> dict:
    """Acceptance length (with the +1 bonus) and per-position rates from vLLM's counters. Keys:
    ``unconditional_acceptance`` and ``conditional_acceptance``; ``per_position_acceptance`` is the
    unconditional rate again, under the key the committed serving results use."""
    drafts, per_pos = int(drafts), [int(x) for x in per_pos]
    rates = unconditional_acceptance(drafts, per_pos)
    return {
        "acceptance_length": 1.0 + accepted / drafts if drafts else 1.0,
        "unconditional_acceptance": rates,  # P(position i accepted) per draft, vLLM's definition
        "per_position_acceptance": rates,  # the same, under its former key
        "conditional_acceptance": conditional_acceptance(drafts, per_pos),  # P(i accepted | i-1 accepted)
        "accepted_per_position": per_pos,
        "drafts": drafts, "draft_tokens": int(draft_tokens), "accepted": int(accepted),
    }


def spec_diff(now: dict, since: dict | None) -> dict:
    if not since:
        return now
    pp = [a - b for a, b in zip(now["accepted_per_position"], since["accepted_per_position"])]
    return summarise_spec(now["drafts"] - since["drafts"], now["draft_tokens"] - since["draft_tokens"],
                          now["accepted"] - since["accepted"], pp)


def parse_prometheus(text: str) -> list[tuple[str, dict, float]]:
    """(name, labels, value) for every sample of a Prometheus text exposition (``prometheus_client``'s parser:
    counters keep their ``_total`` suffix, histograms give their ``_bucket``/``_sum``/``_count`` samples)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [(s.name, dict(s.labels), float(s.value))
                for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as e:
        raise PeagleError(f"the server's /metrics page is not valid Prometheus text ({e}). Fix: check that the "
                          "URL is vLLM's metrics endpoint (http://HOST:PORT/metrics).") from e


def spec_metrics_from_prometheus(text: str) -> dict:
    """The ``vllm:spec_decode_*`` counters of a ``/metrics`` page, summarised like ``spec_metrics``."""
    c = {"drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0}
    names = {"vllm:spec_decode_num_drafts_total": "drafts",
             "vllm:spec_decode_num_draft_tokens_total": "draft_tokens",
             "vllm:spec_decode_num_accepted_tokens_total": "accepted"}
    pos: dict[int, float] = {}
    for name, labels, value in parse_prometheus(text):
        if name in names:
            c[names[name]] += value
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total":
            p = int(labels.get("position", 0))
            pos[p] = pos.get(p, 0.0) + value
    per_pos = [pos[i] for i in sorted(pos)]
    return summarise_spec(c["drafts"], c["draft_tokens"], c["accepted"], per_pos)
