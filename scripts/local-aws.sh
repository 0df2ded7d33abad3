#!/usr/bin/env bash
# Overture's AWS form on this machine (`make local-aws`, `make local-aws-down`).
#
#   scripts/local-aws.sh up     starts what is not running yet, and says what already is:
#                               the AWS emulator, the stack in it (through CloudFormation),
#                               `cargo lambda watch` serving every function, the door of the
#                               submit function's URL (AWS_IAM: it checks each request's SigV4
#                               signature, as Lambda does, which cargo lambda does not), and the
#                               poller that delivers the stack's stream and queues to them; then writes
#                               .overture/local-aws.env and prints it
#   scripts/local-aws.sh down   stops them by their process groups' ids
#
# Everything listens on 127.0.0.1 only. Ports and names, overridable from the environment:
#   OVERTURE_LOCAL_AWS_PORT     the emulator           (default 4577)
#   OVERTURE_LOCAL_LAMBDA_PORT  cargo lambda watch     (default 9077)
#   OVERTURE_LOCAL_DOOR_PORT    the submit URL's door  (default: a free port; OVERTURE_SUBMIT_URL
#                               in the settings says which)
#   OVERTURE_LOCAL_STACK        the stack's name       (default overture-local)
#   OVERTURE_LOCAL_REGION       its region             (default eu-west-1)
#   OVERTURE_LOCAL_STATE        where PIDs, logs and checkpoints go (default .overture/local-aws;
#                               the settings go to the same path with .env added)
#   OVERTURE_LOCAL_CONCURRENCY  instances of a function, and batches of one queue, at once (default 4)
#   OVERTURE_LOCAL_AUTH_URL     a cloud's identity service (Keystone v3) for the stack's AuthUrl:
#                               the api function checks callers' tokens with it (default: none, and
#                               the api function does not start)
# PIDs are in .overture/local-aws/*.pid, logs in .overture/local-aws/*.log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
state=${OVERTURE_LOCAL_STATE:-.overture/local-aws}
env_file=$state.env
emulator_port=${OVERTURE_LOCAL_AWS_PORT:-4577}
lambda_port=${OVERTURE_LOCAL_LAMBDA_PORT:-9077}
stack=${OVERTURE_LOCAL_STACK:-overture-local}
region=${OVERTURE_LOCAL_REGION:-eu-west-1}
concurrency=${OVERTURE_LOCAL_CONCURRENCY:-4}
endpoint=http://127.0.0.1:$emulator_port
target=${CARGO_TARGET_DIR:-$root/target}
local_aws=$target/debug/overture-local-aws

say() { echo "local-aws: $*"; }

running() { # NAME: whether its recorded process is alive
    [[ -f $state/$1.pid ]] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null
}

start() { # NAME COMMAND...: in a process group of its own, its id recorded
    local name=$1
    shift
    # Not a group leader here (no job control), so setsid makes the new group without forking:
    # $! is the group's id.
    setsid "$@" >"$state/$name.log" 2>&1 </dev/null &
    echo $! >"$state/$name.pid"
}

wait_for() { # NAME SECONDS CHECK...: until CHECK passes, while NAME is alive
    local name=$1 seconds=$2
    shift 2
    local until=$((SECONDS + seconds))
    until "$@"; do
        if ! running "$name"; then
            say "$name stopped; the end of $state/$name.log:" >&2
            tail -n 20 "$state/$name.log" >&2 || true
            exit 1
        fi
        if ((SECONDS > until)); then
            say "$name did not answer within ${seconds}s; see $state/$name.log" >&2
            exit 1
        fi
        sleep 0.2
    done
}

answers() { curl -s -o /dev/null --max-time 2 "$1"; }

stop() { # NAME: its whole process group, then its records
    local name=$1
    if running "$name"; then
        local group
        group=$(cat "$state/$name.pid")
        kill -TERM -- "-$group" 2>/dev/null || true
        for _ in $(seq 50); do
            kill -0 -- "-$group" 2>/dev/null || break
            sleep 0.2
        done
        kill -KILL -- "-$group" 2>/dev/null || true
        say "$name stopped (process group $group)"
    fi
    rm -f "$state/$name.pid" "$state/$name.ready"
}

up() {
    mkdir -p "$state"
    command -v moto_server >/dev/null && command -v cargo-lambda >/dev/null ||
        { say "moto and cargo-lambda are missing: run make setup" >&2; exit 1; }

    if running emulator; then
        say "emulator already running on $endpoint (pid $(cat $state/emulator.pid))"
    else
        # A new emulator holds a new stream: a poller reading the old one must start again.
        stop poller
        rm -rf "$state/checkpoints"
        start emulator python3 scripts/aws-emulator.py --port "$emulator_port"
        wait_for emulator 60 answers "$endpoint/moto-api/"
        say "emulator started on $endpoint"
    fi

    say "building overture-local-aws and the overture program (target/debug/overture)"
    cargo build --quiet -p overture-local-aws -p overture
    if running door; then
        say "submit URL's door already running on $(cat "$state/door.address") (pid $(cat $state/door.pid))"
    else
        rm -f "$state/door.address"
        start door "$local_aws" --region "$region" urls --invoke "http://127.0.0.1:$lambda_port" \
            --listen "127.0.0.1:${OVERTURE_LOCAL_DOOR_PORT:-0}" --address-file "$state/door.address"
        wait_for door 30 test -s "$state/door.address"
        say "submit URL's door started on $(cat "$state/door.address")"
    fi
    "$local_aws" --endpoint "$endpoint" --region "$region" --stack "$stack" \
        stack --submit-url "http://$(cat "$state/door.address")/lambda-url/submit" \
        ${OVERTURE_LOCAL_AUTH_URL:+--auth-url "$OVERTURE_LOCAL_AUTH_URL"} >"$env_file.new"
    mv "$env_file.new" "$env_file"
    say "stack $stack is in the emulator"

    if ! running watch; then
        # Built now rather than on their first invocation (as cargo lambda watch would), so the
        # first deployment is not held up by a build; a function without a binary yet is skipped.
        for function in $("$local_aws" functions); do
            if cargo build --quiet --bin "$function" 2>/dev/null; then
                say "function $function built"
            else
                say "function $function: no binary builds yet (cargo build --bin $function)"
            fi
        done
    fi
    if running watch; then
        say "cargo lambda watch already running on 127.0.0.1:$lambda_port (pid $(cat $state/watch.pid))"
    else
        # The functions are given the stack's settings, as Lambda gives them the stack's.
        # The app id marks the functions' requests in the emulator's counts (the cost figures).
        start watch bash -c '. "$1"; shift; exec "$@"' settings "$env_file" \
            env AWS_SDK_UA_APP_ID=overture-functions \
            cargo lambda watch --ignore-changes \
            --invoke-address 127.0.0.1 --invoke-port "$lambda_port" \
            --concurrency "$concurrency"
        wait_for watch 120 answers "http://127.0.0.1:$lambda_port/"
        say "cargo lambda watch started on 127.0.0.1:$lambda_port"
    fi

    if running poller; then
        say "poller already running (pid $(cat $state/poller.pid))"
    else
        rm -f "$state/poller.ready"
        start poller env AWS_SDK_UA_APP_ID=overture-local-poller "$local_aws" --endpoint "$endpoint" --region "$region" --stack "$stack" \
            poll --invoke "http://127.0.0.1:$lambda_port" --queue-pollers "$concurrency" \
            --checkpoints "$state/checkpoints" --invocations-file "$state/invocations.json" \
            --ready-file "$state/poller.ready"
        wait_for poller 60 test -f "$state/poller.ready"
        say "poller started: $(grep -c 'delivering' "$state/poller.log" || true) triggers"
    fi

    echo
    cat "$env_file"
    echo
    say "written to $env_file; use it with: source $env_file"
}

down() {
    stop poller
    stop door
    rm -f "$state/door.address"
    stop watch
    stop emulator
    rm -f "$env_file"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
    echo "usage: $0 up|down" >&2
    exit 2
    ;;
esac
