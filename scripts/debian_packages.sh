#!/usr/bin/env bash
# debian_packages.sh: every Debian package the suite needs that this machine lacks, in ONE apt-get update and ONE
# apt-get install (make test runs it beside the pip and npm set-up: mk/debian.mk).
#
# Each line of NEEDS is "CHECK PACKAGE...": CHECK is a command that succeeds when the packages are there. The
# single targets (make postgres, make slurm, ...) keep their own check and install; this only does them all at
# once: on a fresh CI machine five apt-get updates and five installs, one after the other and after the venvs,
# were minutes of a 30-minute budget.
set -euo pipefail

NEEDS=(
    "command -v initdb || ls /usr/lib/postgresql/*/bin/initdb|postgresql"
    "command -v redis-server|redis-server"
    "command -v prometheus|prometheus"
    "command -v chromium|chromium"
    "command -v slurmctld && command -v slurmd && command -v sbatch && command -v sacct|slurm-wlm"
    "command -v slurmdbd|slurmdbd"
    "command -v mariadbd && command -v mariadb-install-db|mariadb-server"
    "command -v munged|munge"
)

missing=()
for need in "${NEEDS[@]}"; do
    check=${need%%|*}
    if ! bash -c "$check" >/dev/null 2>&1; then
        read -r -a packages <<<"${need#*|}"
        missing+=("${packages[@]}")
    fi
done
if ((${#missing[@]} == 0)); then
    exit 0
fi
command -v apt-get >/dev/null || { echo "these Debian packages are needed: ${missing[*]}" >&2; exit 1; }
echo "installing Debian's ${missing[*]} (one apt-get for all)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
