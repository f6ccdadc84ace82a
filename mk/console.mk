# console.mk: the console's one third-party asset, htmx (npm package `htmx.org`, 0BSD), committed under
# console/static/ so that `berth up` serves the console with no network (included by the Makefile).
#
#   make console-assets   re-derive console/static/htmx.min.js from the registry package and check its SHA-256
#
# The file is committed (the API serves it; sites without internet never fetch it); this target shows it is
# exactly the registry's dist/htmx.min.js, and is how a version bump is made (change both lines below).
# tests/console/test_assets.py checks the committed file against the same digest.

HTMX_VERSION ?= 2.0.11
HTMX_SHA256 := d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717

.PHONY: console-assets

console-assets:
	@command -v npm >/dev/null || { echo "npm is needed to fetch htmx.org (apt-get install npm)"; exit 1; }
	@d=$$(mktemp -d) && cd $$d && npm pack -q htmx.org@$(HTMX_VERSION) >/dev/null && tar xzf htmx.org-$(HTMX_VERSION).tgz && \
	  echo "$(HTMX_SHA256)  package/dist/htmx.min.js" | sha256sum -c --quiet - && \
	  cp package/dist/htmx.min.js $(CURDIR)/console/static/htmx.min.js && cp package/LICENSE $(CURDIR)/console/static/htmx.LICENSE && \
	  rm -rf $$d && echo "console/static/htmx.min.js is htmx.org@$(HTMX_VERSION)"
