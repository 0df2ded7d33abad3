#!/usr/bin/env bash
# The domain and the event schema must build without tokio, AWS, SQLite or any network crate.
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
exit $status
