#!/usr/bin/env bash
# Brings a local cloud up and deploys the HelloWorld service onto two servers behind a bastion,
# with a user's token, showing the status, the audit trail (the pinned host keys and each step's
# network policy among it), the grants ledger and each web
# server's answer; brings the cloud down again. Then runs the hello-world example (status, a
# step's log, the audit trail) and deploys the Terraform example and tears it down.
set -euo pipefail
cd "$(dirname "$0")/.."
overture=target/release/overture
data=$(mktemp -d /tmp/overture-demo.XXXXXX)
cloud="$data/cloud"

# The newest deployment's id in the demo's data directory.
newest() {
    $overture --data-dir "$data" list --json | sed -n 's/.*"id": "\([0-9a-f-]*\)".*/\1/p' | head -n 1
}

echo "== overture cloud up (a local OpenStack-like cloud: servers are network namespaces)"
$overture cloud up --dir "$cloud"
trap '$overture cloud down --dir "$cloud" >/dev/null 2>&1 || true' EXIT
OS_AUTH_URL=$(sed -n 's/.*"auth_url": *"\([^"]*\)".*/\1/p' "$cloud/cloud.json")
export OS_AUTH_URL
$overture cloud token --dir "$cloud" --project demo --out "$data/token"

echo
echo "== overture deploy examples/hello-world-cloud/blueprint.yaml --token-file (tenant: the token's project)"
$overture --data-dir "$data" deploy examples/hello-world-cloud/blueprint.yaml --token-file "$data/token"
cid=$(newest)
echo
echo "== what each web server answers (through the bastion)"
$overture --data-dir "$data" status "$cid" --json \
    | sed -n 's/.*"greeting": "\(.*\)".*/\1/p'
echo
echo "== overture events $cid (the audit trail)"
$overture --data-dir "$data" events "$cid"
echo
echo "== the host keys pinned from each server's console, and each step's network policy"
$overture --data-dir "$data" events "$cid" --type HostKeysPinned,StepNetworkPolicyApplied
echo
echo "== overture grants (every temporary access, opened and closed)"
$overture --data-dir "$data" grants
echo
echo "== overture cloud status (the bastion's group has no rule left)"
$overture cloud status --dir "$cloud"
if grep -rqF "$(cat "$data/token")" "$data" --exclude-dir=cloud --exclude=token; then
    echo "the token was found in the data directory!" >&2
    exit 1
fi
echo "(the token appears nowhere in the data directory)"
echo
echo "== overture cloud down"
$overture cloud down --dir "$cloud"
trap - EXIT

echo "== overture deploy examples/hello-world/blueprint.yaml (data in $data)"
export DEMO_API_TOKEN="demo-token-$RANDOM$RANDOM"
deployed=0
$overture --data-dir "$data" deploy examples/hello-world/blueprint.yaml \
    --param name=Overture --secret api_token=DEMO_API_TOKEN || deployed=$?
id=$(newest)

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
tf=$(newest)
echo
echo "== overture logs $tf network (terraform's own output)"
$overture --data-dir "$data" logs "$tf" network | tail -n 12
echo
echo "== overture destroy $tf"
$overture --data-dir "$data" destroy "$tf"
echo
echo "== overture logs $tf network --destroy"
$overture --data-dir "$data" logs "$tf" network --destroy | tail -n 6
