"""Residual stream, cosine similarity and logit lens on a tiny random Llama; the course diagram draws."""

from __future__ import annotations

import torch

from peagle_lab.workbook.lens import cosine_matrix, logit_lens, plot_similarity, residual_stream


def test_residual_stream_is_every_layer_input_then_the_prenorm_output(tiny_llama, random_ids):
    model = tiny_llama(hidden=32, layers=4)
    ids = random_ids(length=9)
    out = model(ids, output_hidden_states=True)
    states = residual_stream(model, ids[0])
    assert states.shape == (5, 9, 32)
    for i in range(4):
        assert torch.equal(states[i], out.hidden_states[i][0])
    # transformers' last entry is after the final norm; ours is before it, so the lens reproduces the logits
    assert torch.equal(model.model.norm(states[4]), out.hidden_states[4][0])
    probs, top = logit_lens(model, states[4], k=3)
    assert torch.equal(top[:, 0], out.logits[0].argmax(-1))
    assert torch.allclose(probs, out.logits[0].softmax(-1).topk(3).values, atol=1e-6)


def test_cosine_matrix_is_symmetric_with_unit_diagonal(tiny_llama, random_ids):
    model = tiny_llama(hidden=32, layers=4)
    sim = cosine_matrix(residual_stream(model, random_ids(length=7)[0]), skip_first=1)
    assert sim.shape == (5, 5)
    assert torch.allclose(sim.diagonal(), torch.ones(5), atol=1e-5)
    assert torch.allclose(sim, sim.T, atol=1e-6)


def test_figures_draw():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from peagle_lab.workbook.diagrams import draw_drafting_schemes

    fig = draw_drafting_schemes(k=5)
    assert len(fig.axes) == 1
    ax = plot_similarity(torch.eye(3), labels=[2, 15, 27], highlight=[1], annotate=True)
    assert ax.get_xticklabels()[1].get_color() == "red"
    plt.close("all")
