"""What each notebook holds on its device at its peak, for a target config and a dtype, counted on the meta device
(no weights, no GPU): the question a user with a 24 GiB card (A10G, L4) and an 8B target asks before opening the
workbook. ``peagle-lab memory-plan`` prints it; a CPU test holds Llama-3.1-8B in bf16 to 24 GiB per notebook.

The parts, each sized from the real modules built on the meta device:

- ``target``: the target's weights in the dtype (:func:`peagle_lab.memory.weights_bytes`);
- ``head``: one head for inference, in the target's dtype (the loop converts a head to it);
- ``trainer``: one head in training: its fp32 weights (the frozen embedding and ``fc`` included), and for each
  trainable parameter its gradient and AdamW's two moments; plus the activations of one packed row at every depth
  (the anchors COD keeps per depth, bf16 autocast, fp32 logits over the draft vocabulary);
- ``loop``: the KV cache of a prompt and its answer (``CONTEXT_TOKENS``) and one verification forward;
- ``forward``: one forward over a whole sequence with every layer's hidden states kept (``SEQUENCE_TOKENS``), as
  feature extraction and the lens run it;
- ``vllm``: vLLM's engine, which reserves ``gpu_memory_utilization`` of the GPU, run only after the notebook has
  freed its own copy of the target (notebook 08 says so when it does).

Estimates of what is allocated, not measurements: the allocator's cache and CUDA's context (~0.5 GiB) come on top;
the GPU check's memory stage measures the loads on a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..training.cod import cod_sizes
from ..memory import GIB, dtype_bytes, forward_bytes, gib, kv_cache_bytes, weights_bytes

CONTEXT_TOKENS = 1024  # a prompt and its answer in the loop (the notebooks' prompts and 64 new tokens fit)
SEQUENCE_TOKENS = 2048  # one distilled sequence read for its taps
DRAFT_VOCAB = 8192  # the largest draft vocabulary a notebook trains or loads (notebook 03's and 04's)
DEPTHS, ROW_TOKENS = 8, 512  # the notebooks' training shape (TrainConfig num_depths, row_tokens)
VLLM_SHARE = 0.9  # vLLM's default gpu_memory_utilization (serving.engine.VLLM_GPU_UTILIZATION)

# notebook -> its phases, each (what runs, "part + 2 part + ..."): the phases follow one another, each freeing
# what the one before held; a trainer only runs when the target has no stored head (ensure_head / ensure_heads
# make them one at a time, before any head is loaded)
MADE = ("a head made for the target when none is stored", "target + trainer")
PHASES = {
    "00_overview": [MADE, ("the loop with its head", "target + head + loop")],
    "01_hidden_states": [("one forward keeping every layer's hidden states", "target + forward")],
    "02_mask_tokens": [("the shipped heads beside the drafter from scratch", "target + 2 head + loop")],
    "03_training_data": [("the features of the training sequences", "target + forward")],
    "04_train_head": [("the features of the training sequences, read back", "target + forward"),
                      ("one trainer at a time (each freed before the next)", "target + trainer")],
    "05_scale_and_acceptance": [MADE, ("both heads evaluated by the loop", "target + 2 head + loop")],
    "06_parallel_vs_sequential": [MADE, ("the shipped head and the list-request pair, with the loop",
                                        "target + 3 head + loop")],
    "07_what_it_takes": [MADE, ("both heads with the loop", "target + 2 head + loop")],
    "08_vllm_deploy": [MADE, ("our loop, before vLLM starts", "target + head + loop"),
                       ("vLLM's engine, after our copy is freed", "vllm")],
    "09_explorer": [("both heads on offer and the loop", "target + 2 head + loop")],
    "10_your_own_model": [("the target, for its chat template (the tiny target's head is small)", "target")],
    "11_past_one_machine": [("the tiny target only (this run's target is read for its shape, its trainers run in "
                             "their own processes)", "")],
    "12_results": [("committed files and recorded rows only: no model", "")],
}


@dataclass(frozen=True)
class Peak:
    notebook: str
    phase: str
    parts: dict = field(default_factory=dict)  # part name -> bytes (a part held twice is named twice: "head x2")

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def line(self) -> str:
        parts = ", ".join(f"{k} {gib(v)}" for k, v in self.parts.items())
        return f"{self.notebook:26s} {gib(self.total):>9s}  {self.phase}: {parts}"


def _head_modules(config, draft_vocab: int):
    from ..drafter import PEagleConfig, PEagleDrafter
    from ..training.objective import DraftTrainer

    hcfg = PEagleConfig.from_target(config, num_hidden_layers=1, draft_vocab_size=min(draft_vocab, config.vocab_size),
                                    mask_token_id=0, mode="parallel", num_speculative_tokens=DEPTHS)
    with torch.device("meta"):
        head = PEagleDrafter(hcfg)
        trainer = DraftTrainer(head, "parallel")
    return head, trainer


def trainer_bytes(config, draft_vocab: int = DRAFT_VOCAB) -> int:
    """One head in training: fp32 weights, gradients and AdamW moments of the trainable ones, one row's
    activations (:data:`ROW_TOKENS` x :data:`DEPTHS` elements)."""
    _, trainer = _head_modules(config, draft_vocab)
    weights = sum(p.numel() for p in trainer.parameters()) * 4
    trainable = sum(p.numel() for p in trainer.parameters() if p.requires_grad)
    H, inter = config.hidden_size, config.intermediate_size
    per_element = 2 * (7 * H + 4 * inter) + 10 * min(draft_vocab, config.vocab_size)  # bf16 layer, fp32 logits
    elements = sum(cod_sizes(ROW_TOKENS, DEPTHS))  # COD keeps fewer anchors deeper (TrainConfig's ratios)
    return weights + trainable * 12 + elements * per_element


def part_sizes(config, dtype: torch.dtype, gpu_bytes: int, vllm_share: float = VLLM_SHARE) -> dict:
    """Bytes of each part (see the module's list) for ``config`` in ``dtype``."""
    head, _ = _head_modules(config, DRAFT_VOCAB)
    return {
        "target": weights_bytes(config, dtype),
        "head": sum(p.numel() for p in head.parameters()) * dtype_bytes(dtype),
        "trainer": trainer_bytes(config),
        "loop": kv_cache_bytes(config, CONTEXT_TOKENS, dtype) + forward_bytes(config, DEPTHS + 1, dtype),
        "forward": forward_bytes(config, SEQUENCE_TOKENS, dtype),
        "vllm": int(vllm_share * gpu_bytes),
    }


def _phase_parts(recipe: str, sizes: dict) -> dict:
    parts = {}
    for item in filter(None, recipe.split(" + ")):
        count, _, name = item.rpartition(" ")
        parts[f"{name} x{count}" if count else name] = sizes[name] * int(count or 1)
    return parts


def notebook_peaks(config, dtype: torch.dtype, gpu_bytes: int = 24 * GIB, vllm_share: float = VLLM_SHARE
                   ) -> list[Peak]:
    """Each notebook's peak (the largest of its phases) on a GPU of ``gpu_bytes``."""
    sizes = part_sizes(config, dtype, gpu_bytes, vllm_share)
    peaks = []
    for notebook, phases in PHASES.items():
        all_phases = [Peak(notebook, what, _phase_parts(recipe, sizes)) for what, recipe in phases]
        peaks.append(max(all_phases, key=lambda p: p.total))
    return peaks


def vllm_problem(config, dtype: torch.dtype, gpu_bytes: int, vllm_share: float = VLLM_SHARE) -> str | None:
    """Why vLLM's share of the GPU cannot hold the target and the head with room for a KV cache (None: it can)."""
    sizes = part_sizes(config, dtype, gpu_bytes, vllm_share)
    need = sizes["target"] + sizes["head"] + kv_cache_bytes(config, CONTEXT_TOKENS, dtype)
    if need <= sizes["vllm"]:
        return None
    return (f"vLLM's share ({vllm_share:g} of {gib(gpu_bytes)} = {gib(sizes['vllm'])}) cannot hold the target and "
            f"the head with one sequence's KV cache ({gib(need)})")


def plan_lines(config, dtype: torch.dtype, gpu_bytes: int, vllm_share: float = VLLM_SHARE) -> list[str]:
    """The plan as printed: one line per notebook, marked where its peak is over ``gpu_bytes``, then vLLM's."""
    lines = []
    for peak in notebook_peaks(config, dtype, gpu_bytes, vllm_share):
        over = peak.total - gpu_bytes
        lines.append(("OVER " if over > 0 else "fits ") + peak.line()
                     + (f"  (over by {gib(over)})" if over > 0 else ""))
    problem = vllm_problem(config, dtype, gpu_bytes, vllm_share)
    lines.append(f"vLLM: {problem}" if problem else f"vLLM: its {vllm_share:g} share holds the target, the head and "
                                                    "a KV cache")
    return lines
