#!/usr/bin/env bash
# `make test-clusters`' set-up (root only): Debian's Slurm (slurm-wlm: slurmctld, slurmd, the
# client commands) and munge, its authentication, when they are missing. Nothing is started or
# configured here: each test module starts its own private cluster on 127.0.0.1 and stops it
# (tests/clusters/slurm_cluster.py, ray_cluster.py). Ray comes from the ray extra (.venv).
set -euo pipefail

PACKAGES=(slurm-wlm munge)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' \
        || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "test-clusters: packages already installed: ${PACKAGES[*]}"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "test-clusters: ${missing[*]} missing and not root: apt-get install ${missing[*]}" >&2
    exit 1
fi
# without systemd, a postinst would start the machine-wide daemons through their init scripts;
# a policy-rc.d that says "no" (101) keeps them stopped (the tests start their own)
policy=/usr/sbin/policy-rc.d own_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
fi
log=$(mktemp)
echo "test-clusters: apt-get install ${missing[*]} (log: $log)"
rc=0
{
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
        || { apt-get update && DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "${missing[@]}"; }
} >>"$log" 2>&1 || rc=$?
[ "$own_policy" -eq 0 ] || rm -f "$policy"
if [ "$rc" -ne 0 ]; then
    echo "test-clusters: apt-get install ${missing[*]} failed: $(tail -n 5 "$log")" >&2
    exit 1
fi
