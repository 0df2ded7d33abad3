#!/usr/bin/env bash
# Installs what Overture's build, demo and tests need on a Debian machine, as root. Idempotent:
# it installs only what is missing.
set -euo pipefail

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v sqlite3 >/dev/null || need+=(sqlite3)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
if ((${#need[@]})); then
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null; then
    echo "setup: cargo is missing; install a Rust toolchain (1.85 or newer) with rustup first" >&2
    exit 1
fi

# The sandbox must work here: a step's isolation is not optional.
if ! bwrap --unshare-pid --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib \
        --symlink usr/lib64 /lib64 --proc /proc --dev /dev /bin/true; then
    echo "setup: bubblewrap cannot create sandboxes on this machine (it needs user or mount namespaces)" >&2
    exit 1
fi
