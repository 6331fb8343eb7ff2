"""Looking inside the target's residual stream: every layer's input, cosine similarity, logit lens.

``residual_stream(model, ids)[i]`` is the stream ENTERING decoder layer ``i`` (= tap ``i``) for ``i < L``, and
``[L]`` is the last layer's output before the final norm. (transformers' ``hidden_states[L]`` is AFTER the final
norm, so it is replaced here by the pre-norm state: then the logit lens at ``L`` reproduces the model's logits.)
"""

from __future__ import annotations

import torch


@torch.no_grad()
def residual_stream(model, input_ids) -> torch.Tensor:
    """``(L + 1, T, H)`` states of one sequence: inputs of layers ``0..L-1``, then the pre-norm last output."""
    ids = torch.as_tensor(input_ids, dtype=torch.long).reshape(1, -1).to(model.device)
    captured = {}
    handle = model.model.layers[-1].register_forward_hook(lambda mod, args, out: captured.setdefault("last", out))
    try:
        hs = model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    finally:
        handle.remove()
    last = captured["last"][0] if isinstance(captured["last"], tuple) else captured["last"]
    return torch.stack([*hs[:-1], last])[:, 0]


def cosine_matrix(states: torch.Tensor, skip_first: int = 0) -> torch.Tensor:
    """``(n, n)`` cosine similarity between states ``(n, T, H)``, averaged over positions ``skip_first..T-1``.

    Position 0 is usually an attention sink with a huge norm in a few channels; ``skip_first=1`` leaves it out.
    """
    unit = torch.nn.functional.normalize(states[:, skip_first:].float(), dim=-1)
    return torch.einsum("ith,jth->ijt", unit, unit).mean(-1)


@torch.no_grad()
def logit_lens(model, states: torch.Tensor, k: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Read states through the target's final norm and ``lm_head``: top-``k`` (probabilities, token ids)."""
    head = model.get_output_embeddings()
    logits = head(model.model.norm(states.to(head.weight.dtype)))
    probs, ids = logits.float().softmax(-1).topk(k, dim=-1)
    return probs, ids


def plot_similarity(matrix, labels=None, title: str = "", highlight=(), ax=None, annotate: bool = False):
    """Heatmap of a :func:`cosine_matrix`; ``highlight`` indices (e.g. the taps) get bold red tick labels,
    ``annotate`` writes the values into the cells."""
    import matplotlib.pyplot as plt

    matrix = matrix.detach().cpu().float().numpy() if hasattr(matrix, "detach") else matrix
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5.5))
    im = ax.imshow(matrix, cmap="viridis", vmin=min(0.0, float(matrix.min())), vmax=1.0)
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
    n = matrix.shape[0]
    labels = [str(i) for i in range(n)] if labels is None else [str(x) for x in labels]
    ax.set_xticks(range(n), labels, fontsize=7, rotation=90 if n > 12 else 0)
    ax.set_yticks(range(n), labels, fontsize=7)
    for i in highlight:
        for tick in (ax.get_xticklabels()[i], ax.get_yticklabels()[i]):
            tick.set_color("red")
            tick.set_fontweight("bold")
    if annotate:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{matrix[i, j]:.2f}", ha="center", va="center", fontsize=9,
                        color="white" if matrix[i, j] < 0.6 else "black")
    ax.set_title(title, fontsize=10)
    return ax
