"""Loading a head builds its network on the meta device and takes the checkpoint's tensors: no random init of
a full-vocabulary embedding and lm_head that the checkpoint then overwrites, the same head and logits as a
randomly initialised network with the same tensors copied in, nothing left on meta, tensors in memory of their own
(not views into the file's buffer), a head that saves and loads again."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import make_tiny_llama
from peagle_lab.drafter import PEagleConfig, PEagleDrafter
from peagle_lab.settings import REPO_ROOT

SHIPPED = ["smollm2-135m-peagle", "smollm2-135m-eagle3"]


@pytest.fixture
def random_draws(monkeypatch):
    """The elements of real (not meta) tensors filled with random numbers while the fixture is active."""
    drawn = []
    for name in ("normal_", "uniform_"):
        real = getattr(torch.Tensor, name)

        def counted(self, *a, _real=real, **k):
            if not self.is_meta:
                drawn.append(self.numel())
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return drawn


def _shipped(name):
    path = REPO_ROOT / "data" / "heads" / name
    if not (path / "model.safetensors").exists():
        pytest.skip(f"{path} is not here")
    return path


def _logits(head):
    taps = torch.randn(1, 6, head.config.num_taps * head.config.target_hidden_size,
                       generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return head(torch.tensor([[1, 504, 3458, 314, 253, 1691]]), head.fuse(taps), torch.arange(3, 9)[None])[0]


def test_building_a_head_the_ordinary_way_is_what_the_counter_sees(random_draws, tiny_llama):
    PEagleDrafter(PEagleConfig.from_target(tiny_llama().config, num_hidden_layers=1, mask_token_id=3))
    assert sum(random_draws) >= 96 * 32  # the embedding at least: the counter can fail the tests below


@pytest.mark.parametrize("name", SHIPPED)
def test_loading_a_shipped_head_draws_no_random_numbers(name, smollm2, random_draws):
    PEagleDrafter.from_pretrained(_shipped(name), target=smollm2[0], device="cpu")
    assert random_draws == []


@pytest.mark.parametrize("name", SHIPPED)
def test_a_loaded_shipped_head_equals_a_random_network_with_its_tensors_copied_in(name, smollm2):
    target = smollm2[0]
    head = PEagleDrafter.from_pretrained(_shipped(name), target=target, device="cpu").eval()
    held = list(head.named_parameters()) + list(head.named_buffers())
    assert not [n for n, t in held if t.is_meta] and head.rotary.hf.inv_freq.device.type == "cpu"
    assert all(isinstance(p, torch.nn.Parameter) and p.requires_grad for p in head.parameters())
    ordinary = PEagleDrafter(head.config)  # random init, then every tensor copied in: today's network
    ordinary.load_state_dict(head.state_dict())
    assert torch.equal(_logits(head), _logits(ordinary.eval()))
    stored = load_file(str(_shipped(name) / "model.safetensors"))
    emb = target.get_input_embeddings().weight.detach().clone()
    emb[head.config.mask_token_id] = stored.get("mask_embedding", emb[head.config.mask_token_id])
    assert torch.equal(head.embed_tokens.weight, emb)  # shared with the target, the mask row stored
    assert torch.equal(head.lm_head.weight, stored["lm_head.weight"]) and torch.equal(head.d2t, stored["d2t"])
    assert torch.equal(head.mask_hidden, stored["mask_hidden"].reshape(head.mask_hidden.shape)
                       if "mask_hidden" in stored else torch.zeros_like(head.mask_hidden))  # EAGLE-3: none


def test_a_full_vocabulary_fp32_head_loads_into_memory_of_its_own_with_its_logits(tmp_path, random_draws):
    """No maps stored: the unset ones. Stored in fp32, the file's tensors are views at odd offsets of its buffer;
    the head copies them (aligned memory: the same kernels, the same logits as the head that was saved)."""
    target = make_tiny_llama(hidden=32, layers=2, vocab=96)
    torch.manual_seed(0)
    cfg = PEagleConfig.from_target(target.config, num_hidden_layers=3, mask_token_id=3, embed_shared_with_target=False)
    saved = PEagleDrafter(cfg).to(torch.bfloat16).float().eval()  # values bf16 stores exactly
    saved.save_pretrained(tmp_path / "a")
    weights = tmp_path / "a" / "model.safetensors"
    stored = load_file(str(weights))
    assert "d2t" not in stored and "embed_tokens.weight" in stored
    save_file({k: v.float() for k, v in stored.items()}, str(weights))
    random_draws.clear()
    head = PEagleDrafter.from_pretrained(tmp_path / "a", target=target).eval()
    assert random_draws == []
    assert torch.equal(head.d2t, torch.zeros(96, dtype=torch.long)) and bool(head.t2d.all())
    for t in head.state_dict().values():
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size() and t.data_ptr() % 64 == 0
    ids, taps = torch.tensor([5, 17, 42, 8, 77, 3, 9, 11]), torch.randn(8, 96, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(head.one_pass_logits(ids, taps, 4), saved.one_pass_logits(ids, taps, 4))
