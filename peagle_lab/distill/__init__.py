"""Making the training data: self-distillation (the target answers the training prompts itself) and its file
format. ``data`` (:func:`distill`, resumable, and :func:`read_distilled`, the reader every step uses: features,
training, the experiments), ``engines`` (what writes the answers: transformers' generate, or vLLM)."""

from .data import (FORMAT, MAX_SEQ_LEN, VERSION, DistillSettings, distill, distilled_data, distilled_records,
                   prompt_sha, read_distilled, select_split, shipped_distilled_path)

__all__ = ["FORMAT", "MAX_SEQ_LEN", "VERSION", "DistillSettings", "distill", "distilled_data", "distilled_records",
           "prompt_sha", "read_distilled", "select_split", "shipped_distilled_path"]
