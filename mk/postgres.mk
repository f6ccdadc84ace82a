# postgres.mk: Debian's PostgreSQL server binaries (initdb, pg_ctl) for the tests that run the store on a
# real PostgreSQL (included by the Makefile).
#
#   make postgres   apt-get install postgresql unless an initdb is found (on PATH or /usr/lib/postgresql/*/bin)
#
# Nothing here starts a server: each test session makes its own instance in a tmp dir on a free loopback
# port (stack/postgres.py) and removes it. Needs root (or sudo-less apt) only when it installs.

.PHONY: postgres

postgres:
	@command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null || { echo "PostgreSQL's initdb is needed: install Debian's postgresql"; exit 1; }; \
	  echo "installing Debian's postgresql (the store's tests run a real PostgreSQL)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    postgresql >/dev/null; }
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null
