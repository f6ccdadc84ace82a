# openapi-client.mk: openapi-python-client in its own virtualenv under .tools (included by the Makefile), for the
# test that generates a client from the API's /openapi.json (tests/server/test_generated_client.py).
#
#   make openapi-client   .tools/openapi-python-client with openapi-python-client==$(OPENAPI_CLIENT_VERSION)
#
# Its own venv because every release pins typer below 0.28 (0.29.1: typer<0.28), and Berth's CLI help texts,
# pinned by tests/cli, are rendered by the typer Berth installs. The generated package needs only httpx and
# attrs, both in Berth's venv, so the test imports it there.

OPENAPI_CLIENT_VERSION ?= 0.29.1
OPENAPI_CLIENT_VENV ?= .tools/openapi-python-client
OPENAPI_CLIENT_STAMP := $(OPENAPI_CLIENT_VENV)/.berth-openapi-client-$(OPENAPI_CLIENT_VERSION).stamp

.PHONY: openapi-client

openapi-client: $(OPENAPI_CLIENT_STAMP)

$(OPENAPI_CLIENT_STAMP): mk/openapi-client.mk
	@test -x $(OPENAPI_CLIENT_VENV)/bin/python || $(PY) -m venv $(OPENAPI_CLIENT_VENV)
	$(OPENAPI_CLIENT_VENV)/bin/python -m pip install -q --upgrade pip
	$(OPENAPI_CLIENT_VENV)/bin/python -m pip install -q 'openapi-python-client==$(OPENAPI_CLIENT_VERSION)'
	$(OPENAPI_CLIENT_VENV)/bin/openapi-python-client --version >/dev/null
	touch $@
