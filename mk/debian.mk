# debian.mk: the Debian packages the suite needs, in one apt-get (included by the Makefile).
#
#   make debian-packages   install what scripts/debian_packages.sh finds missing: PostgreSQL, Redis, Prometheus,
#                          Chromium, Slurm (slurm-wlm, slurmdbd, MariaDB, MUNGE)
#
# `make test` runs it beside the pip and npm set-up (-j), then each single target (postgres, slurm, ...) only
# checks. Needs root (or sudo-less apt) only when it installs.

.PHONY: debian-packages

debian-packages:
	@bash scripts/debian_packages.sh
