# slurm.mk: Debian's Slurm (slurmctld, slurmd, slurmdbd, the client commands), MariaDB for slurmdbd's accounting
# (what `sacct` shows of each job step) and MUNGE, for the Slurm placement backend's tests (issue 35; included by
# the Makefile).
#
#   make slurm   apt-get install slurm-wlm slurmdbd mariadb-server munge unless their commands are on PATH
#
# Nothing here configures or starts a cluster: each test session writes its own slurm.conf and gres.conf into a
# tmp dir and starts munged (its own key and socket), a private mariadbd and slurmdbd, slurmctld and two slurmd
# on loopback ports (stack/slurm_cluster.py), and stops them after. Needs root (or sudo-less apt) only when it installs.

.PHONY: slurm

SLURM_COMMANDS = slurmctld slurmd slurmdbd sbatch squeue scancel sacct sacctmgr sinfo scontrol munged mariadbd \
	mariadb-install-db

slurm:
	@for c in $(SLURM_COMMANDS); do command -v $$c >/dev/null || missing=1; done; [ -z "$$missing" ] || { \
	  command -v apt-get >/dev/null || { echo "Slurm is needed: install Debian's slurm-wlm and munge"; exit 1; }; \
	  echo "installing Debian's slurm-wlm, slurmdbd, mariadb-server and munge (the Slurm backend's tests run a one-machine cluster)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    slurm-wlm slurmdbd mariadb-server munge >/dev/null; }
	@for c in $(SLURM_COMMANDS); do command -v $$c >/dev/null || { echo "$$c is missing after install"; exit 1; }; done
