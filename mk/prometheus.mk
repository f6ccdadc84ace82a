# prometheus.mk: Debian's Prometheus server for the test that scrapes a simulated stack's processes and checks
# their figures through Prometheus's HTTP API (included by the Makefile).
#
#   make prometheus   apt-get install prometheus unless a prometheus is on PATH
#
# Nothing here starts a server: the test writes its own scrape config and starts Prometheus on a free loopback
# port in its tmp dir (tests/e2e/prometheus_server.py), and stops it. Debian's package also enables a system
# service; the test never uses it. Needs root (or sudo-less apt) only when it installs.

.PHONY: prometheus

prometheus:
	@command -v prometheus >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "prometheus is needed: install Debian's prometheus"; exit 1; }; \
	  echo "installing Debian's prometheus (the metrics test scrapes a stack with a real Prometheus)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    prometheus >/dev/null; }
	@command -v prometheus >/dev/null
