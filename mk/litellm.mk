# litellm.mk: the LiteLLM proxy's own virtualenv (included by the Makefile).
#
#   make litellm   .venv-litellm with litellm[proxy]==1.108.7 + prisma, pinned by scripts/litellm.lock.txt
#
# Its own venv because LiteLLM pins helper packages that clash with Berth's; newer [proxy] releases
# do not install from the registries reachable here. Without prisma an auth failure becomes a 500.

LITELLM_VENV ?= .venv-litellm
LITELLM_STAMP := $(LITELLM_VENV)/.berth-litellm.stamp

.PHONY: litellm

litellm: $(LITELLM_STAMP)

$(LITELLM_STAMP): scripts/litellm.lock.txt
	@test -x $(LITELLM_VENV)/bin/python || $(PY) -m venv $(LITELLM_VENV)
	$(LITELLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(LITELLM_VENV)/bin/python -m pip install -q -r scripts/litellm.lock.txt
	# The bundled cost map, as every LiteLLM Berth starts: no fetch from GitHub (CI has no network but the registries).
	LITELLM_LOCAL_MODEL_COST_MAP=True $(LITELLM_VENV)/bin/litellm --version >/dev/null
	touch $@
