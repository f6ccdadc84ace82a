# redis.mk: Debian's redis-server for the tests of the counters several endpoint proxies share (included by
# the Makefile).
#
#   make redis   apt-get install redis-server unless a redis-server is on PATH
#
# Nothing here starts a server: each test session starts its own on a free loopback port in a tmp dir
# (tests/gateway/redis_server.py) and stops it. Needs root (or sudo-less apt) only when it installs.

.PHONY: redis

redis:
	@command -v redis-server >/dev/null || { \
	  command -v apt-get >/dev/null || { echo "redis-server is needed: install Debian's redis-server"; exit 1; }; \
	  echo "installing Debian's redis-server (the shared-counter tests run a real Redis)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    redis-server >/dev/null; }
	@command -v redis-server >/dev/null
