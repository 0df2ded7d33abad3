#!/usr/bin/env bash
# The domain and the event schema must build without tokio, AWS, SQLite or any network crate;
# a function deployed as a Lambda links no SQLite and none of the embedded engine's adapters;
# and each Lambda links only the function it runs (docs/decisions/0006): no Lambda but the api's
# links the HTTP framework (axum, utoipa), none but the runner's links the step kinds.
set -euo pipefail
status=0
for crate in overture-events overture-domain; do
    impure=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' \
        | grep -E '^(tokio|mio|rusqlite|libsqlite3-sys|aws-|hyper|reqwest|h2|socket2|esrs) ' || true)
    if [ -n "$impure" ]; then
        echo "check-pure: $crate depends on: $impure" >&2
        status=1
    else
        echo "check-pure: $crate is pure"
    fi
done
lambdas=$(cargo metadata --no-deps --format-version 1 \
    | python3 -c 'import json,sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"] if p["name"].endswith("-lambda")))')
for crate in $lambdas; do
    embedded=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' \
        | grep -E '^(rusqlite|libsqlite3-sys|overture-infra) ' | sort -u || true)
    if [ -n "$embedded" ]; then
        echo "check-pure: the Lambda $crate links: $embedded" >&2
        status=1
    else
        echo "check-pure: the Lambda $crate links no SQLite"
    fi
    linked=$(cargo tree -p "$crate" -e normal --prefix none --format '{p}' | cut -d' ' -f1 | sort -u)
    # What this Lambda must not link: what it is, then a pattern on the names `cargo tree` prints.
    forbidden=()
    [ "$crate" = overture-api-lambda ] || forbidden+=('the HTTP framework:axum.*|utoipa.*')
    [ "$crate" = overture-runner-lambda ] || forbidden+=('the step kinds:overture-runner|overture-sandbox')
    for rule in "${forbidden[@]}"; do
        what=${rule%%:*} pattern=${rule#*:}
        found=$(grep -xE "$pattern" <<<"$linked" | tr '\n' ' ' || true)
        if [ -n "$found" ]; then
            echo "check-pure: the Lambda $crate links $what (${found% }); only the function it runs may (docs/decisions/0006)" >&2
            status=1
        else
            echo "check-pure: the Lambda $crate links none of $what"
        fi
    done
done
exit $status
