# chromium.mk: Debian's chromium for the console's browser tests (included by the Makefile).
#
#   make chromium   apt-get install chromium unless a chromium is on PATH
#
# Playwright drives this system browser (tests/console/browser.py launches it by path, BERTH_CHROMIUM
# overrides): no Playwright browser download, which machines without internet could not make anyway.
# Needs root (or sudo-less apt) only when it installs.

.PHONY: chromium

chromium:
	@command -v chromium >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "chromium is needed: install Debian's chromium"; exit 1; }; \
	  echo "installing Debian's chromium (the console's tests drive a real browser)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium >/dev/null; }
	@command -v chromium >/dev/null
