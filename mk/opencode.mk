# opencode.mk: the OpenCode coding agent (npm package `opencode-ai`, a self-contained Bun binary) under
# .tools/opencode, for the OpenCode catalog entry and the real-client tests (included by the Makefile).
#
#   make opencode   npm install opencode-ai@$(OPENCODE_VERSION) into $(OPENCODE_PREFIX); checks `--version`
#
# The package's postinstall links the platform binary (opencode-linux-x64[-baseline|-musl]) to
# bin/opencode.exe; node_modules/.bin/opencode points at it. Stamp-driven: a second run does nothing.
# OpenCode bundles its provider SDKs (@ai-sdk/openai-compatible included): nothing is fetched at run time.

OPENCODE_VERSION ?= 1.18.33
OPENCODE_PREFIX ?= .tools/opencode
OPENCODE_BIN := $(OPENCODE_PREFIX)/node_modules/.bin/opencode
OPENCODE_STAMP := $(OPENCODE_PREFIX)/.berth-opencode-$(OPENCODE_VERSION).stamp

.PHONY: opencode

opencode: $(OPENCODE_STAMP)

$(OPENCODE_STAMP): mk/opencode.mk
	@command -v npm >/dev/null || { echo "npm is needed to install OpenCode (apt-get install npm)"; exit 1; }
	mkdir -p $(OPENCODE_PREFIX)
	npm install --prefix $(OPENCODE_PREFIX) --no-audit --no-fund --no-save opencode-ai@$(OPENCODE_VERSION)
	test "$$($(OPENCODE_BIN) --version)" = "$(OPENCODE_VERSION)"
	touch $@
