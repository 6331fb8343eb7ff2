"""Deploy a P-EAGLE head with vLLM: export it to vLLM's eagle3 drafter layout (``export``, checked by
``validation``), run it offline (``engine``: ``make_llm``, ``spec_metrics``; ``batch``: one timed greedy batch) or
behind the OpenAI-compatible server (``server``), read the spec-decode counters (``metrics``), and load the server
at several concurrencies (``sweep``). vllm is imported only where it is used: it is an optional package.
"""

from .engine import (VLLM_INSTALL_CPU, VLLM_INSTALL_GPU, Speculation, check_gpu_memory, engine_kwargs, make_llm,
                     require_vllm, spec_metrics, speculative_config)
from ..drafter.config import EAGLE3_ARCH
from .batch import timed_greedy_batch
from .export import export_target, export_vllm, read_head, target_embedding
from .metrics import parse_prometheus, spec_metrics_from_prometheus, summarise_spec
from .server import Server, client_snippet, serve, server_command
from .validation import validate_head
