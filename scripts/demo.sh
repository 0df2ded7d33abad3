#!/usr/bin/env bash
# Runs the hello-world example on the embedded engine, in a fresh data directory, and shows
# its status, a step's log and the audit trail; then deploys the Terraform example for real
# and tears it down again with `overture destroy`.
set -euo pipefail
cd "$(dirname "$0")/.."
overture=target/release/overture
data=$(mktemp -d /tmp/overture-demo.XXXXXX)

echo "== overture deploy examples/hello-world/blueprint.yaml (data in $data)"
export DEMO_API_TOKEN="demo-token-$RANDOM$RANDOM"
deployed=0
$overture --data-dir "$data" deploy examples/hello-world/blueprint.yaml \
    --param name=Overture --secret api_token=DEMO_API_TOKEN || deployed=$?
id=$($overture --data-dir "$data" list --json | sed -n 's/.*"id": "\([0-9a-f-]*\)".*/\1/p' | head -n 1)

echo
echo "== overture status $id"
$overture --data-dir "$data" status "$id"
echo
echo "== overture events $id (the audit trail)"
$overture --data-dir "$data" events "$id"
echo
echo "== overture logs $id publish (its output; the token is masked)"
$overture --data-dir "$data" logs "$id" publish
echo
echo "== overture graph $id"
$overture --data-dir "$data" graph "$id"
echo
echo "== overture tenants"
$overture --data-dir "$data" tenants
echo
echo "== overture replay --check"
$overture --data-dir "$data" replay --check
if grep -rqF "$DEMO_API_TOKEN" "$data"; then
    echo "the secret was found in the data directory!" >&2
    exit 1
fi
echo "(the secret token appears nowhere in $data)"
[[ $deployed == 0 ]] || exit $deployed

echo
echo "== overture deploy examples/terraform/blueprint.yaml (real terraform, built-in resources only)"
$overture --data-dir "$data" deploy examples/terraform/blueprint.yaml --param environment=demo
tf=$($overture --data-dir "$data" list --json | sed -n 's/.*"id": "\([0-9a-f-]*\)".*/\1/p' | head -n 1)
echo
echo "== overture logs $tf network (terraform's own output)"
$overture --data-dir "$data" logs "$tf" network | tail -n 12
echo
echo "== overture destroy $tf"
$overture --data-dir "$data" destroy "$tf"
echo
echo "== overture logs $tf network --destroy"
$overture --data-dir "$data" logs "$tf" network --destroy | tail -n 6
