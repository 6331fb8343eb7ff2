"""What writes the target's answers for self-distillation: a serving engine (vLLM, as the reference trainers
regenerate their data) or transformers' ``generate``. Both are greedy and return, per prompt, the response token
ids up to and including the first EOS (or ``max_new_tokens`` of them).

The engine only writes the text: labels for training come later from the target's own forward at extraction
(``greedy_next``), so small numeric differences between the engines cost nothing.
"""

from __future__ import annotations

import gc
import sys
import time

import torch

from ..errors import PeagleError
from ..lifetime import guard_descendants
from ..precision import dtype_name

ENGINES = ("auto", "vllm", "transformers")


def vllm_available() -> bool:
    try:
        import vllm  # noqa: F401
    except Exception:  # an ImportError, or a broken install that fails on import
        return False
    return True


def choose_engine(requested: str | None) -> str:
    """``auto`` -> ``vllm`` where it imports, else ``transformers`` (said in one line); an explicit ``vllm`` that
    does not import is an error naming the install command."""
    requested = requested or "auto"
    if requested not in ENGINES:
        raise PeagleError(f"--engine must be one of {', '.join(ENGINES)}, got {requested!r}. Fix: pass --engine vllm "
                          "or --engine transformers.")
    if requested == "transformers":
        return requested
    if vllm_available():
        return "vllm"
    if requested == "vllm":
        from ..serving.engine import VLLM_INSTALL_CPU, VLLM_INSTALL_GPU
        raise PeagleError(f"--engine vllm: vLLM is not installed. Fix: `{VLLM_INSTALL_CPU}` (CPU) or "
                          f"`{VLLM_INSTALL_GPU}` (GPU), or use --engine transformers.")
    print("[peagle-lab] distill: vLLM is not installed; the target's answers come from transformers' generate "
          "(slower).", file=sys.stderr)
    return "transformers"


def _cut(row: list[int], eos_ids: set[int]) -> list[int]:
    end = next((j + 1 for j, t in enumerate(row) if t in eos_ids), len(row))
    return list(row[:end])


class TransformersEngine:
    """Left-padded batched ``generate`` with a KV cache on the loaded target."""

    name = "transformers"

    def __init__(self, model, pad_id: int, eos_ids: set[int]):
        self.model, self.pad_id, self.eos_ids = model, pad_id, eos_ids

    @torch.no_grad()
    def generate(self, prompts_ids: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        device = next(self.model.parameters()).device
        L = max(len(p) for p in prompts_ids)
        ids = torch.full((len(prompts_ids), L), self.pad_id, dtype=torch.long)
        att = torch.zeros((len(prompts_ids), L), dtype=torch.long)
        for i, p in enumerate(prompts_ids):
            ids[i, L - len(p):] = torch.tensor(p)
            att[i, L - len(p):] = 1
        out = self.model.generate(input_ids=ids.to(device), attention_mask=att.to(device),
                                  max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=self.pad_id,
                                  eos_token_id=sorted(self.eos_ids), use_cache=True, temperature=None, top_p=None,
                                  top_k=None)
        return [_cut(row, self.eos_ids) for row in out[:, L:].tolist()]

    def close(self):
        pass


class VllmEngine:
    """An offline ``vllm.LLM`` on the target directory: the engine batches and schedules the prompts itself. Its
    EngineCore and worker processes are watched by this process's :func:`~peagle_lab.lifetime.guard_descendants`: they end with
    this process however it ends."""

    name = "vllm"

    def __init__(self, target_dir: str, eos_ids: set[int], max_model_len: int, dtype: torch.dtype, seed: int = 0):
        from ..serving.engine import engine_kwargs, require_vllm

        vllm = require_vllm()
        self.eos_ids = eos_ids
        self.version = getattr(vllm, "__version__", "?")
        t0 = time.perf_counter()
        kw = engine_kwargs(max_model_len=max_model_len, seed=seed, disable_log_stats=True)
        kw["dtype"] = dtype_name(dtype)
        guard_descendants()  # the engine's processes die with this one, kill -9 included
        self.llm = vllm.LLM(model=target_dir, **kw)
        self.start_s = time.perf_counter() - t0

    def generate(self, prompts_ids: list[list[int]], max_new_tokens: int) -> list[list[int]]:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=sorted(self.eos_ids),
                                ignore_eos=False, detokenize=False)
        outs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts_ids], params,
                                 use_tqdm=False)
        return [_cut(list(o.outputs[0].token_ids), self.eos_ids) for o in outs]

    def close(self):
        del self.llm
        gc.collect()
