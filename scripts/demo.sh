#!/usr/bin/env bash
# Brings a local cloud up and deploys the HelloWorld service onto two servers behind a bastion,
# with a user's token, showing the status, the audit trail (the pinned host keys and each step's
# network policy among it), the grants ledger and each web
# server's answer. On the same cloud, the haproxy cluster: services registered once they answer
# their checks, steps waiting for them at run time, and a scale-out that re-runs only the
# watching haproxy step, then its destroy; brings the cloud down again. Then runs the hello-world example (status, a
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

# What the first haproxy-cluster deployment's load balancer answers, asked N times from its bastion.
ask_haproxy() {
    local bastion_ns lb
    read -r bastion_ns lb < <(python3 - "$cloud" "$($overture --data-dir "$data" status "$first" --json)" <<'PY'
import json, subprocess, sys
outputs = json.loads(sys.argv[2])["steps"]["servers"]["outputs"]
cloud = json.loads(subprocess.run(["target/release/overture", "cloud", "status", "--dir", sys.argv[1], "--json"],
                                  check=True, capture_output=True, text=True).stdout)
namespace = {s["address"]: s["namespace"] for p in cloud["projects"] for s in p["servers"]}
print(namespace[outputs["bastion"]], outputs["lb-1"])
PY
)
    for _ in $(seq "$1"); do
        ip netns exec "$bastion_ns" curl -sS --max-time 5 "http://$lb:8080/"
        echo
    done
}

echo
echo "== overture deploy examples/haproxy-cluster/blueprint.yaml (a database, two application servers and haproxy; steps wait for services at run time)"
$overture --data-dir "$data" deploy examples/haproxy-cluster/blueprint.yaml --token-file "$data/token"
first=$(newest)
echo
echo "== what haproxy answered the deployment's two checks (round robin over both application servers)"
$overture --data-dir "$data" status "$first" --json \
    | python3 -c 'import json,sys; s=json.load(sys.stdin)["steps"]; [print(c, s[c]["outputs"]) for c in ("check-1","check-2")]'
echo
echo "== the db and app-install steps ran side by side; app waited for the db's registration"
$overture --data-dir "$data" events "$first" --type StepStarted,StepSucceeded,StepAwaitingServices,ServiceRegistered \
    | grep -E "(started|succeeded): (db|app)|awaiting services: app|needs: service db|registered: db" || true
echo
echo "== overture services (the tenant's registry: instances that answered their checks)"
$overture --data-dir "$data" services
echo
echo "== overture deploy examples/haproxy-cluster/scale-out.yaml (a third application server, in a second deployment)"
$overture --data-dir "$data" deploy examples/haproxy-cluster/scale-out.yaml --token-file "$data/token"
second=$(newest)
echo
echo "== overture events $first --type StepRerunRequested,ServicesResolved (only lb ran again, and why)"
$overture --data-dir "$data" events "$first" --type StepRerunRequested,ServicesResolved
echo
echo "== haproxy now answers from three application servers (asked six times)"
ask_haproxy 6
echo
echo "== overture destroy $second --token-file (its instance is deregistered; lb runs again with two)"
$overture --data-dir "$data" destroy "$second" --token-file "$data/token"
echo
echo "== overture services"
$overture --data-dir "$data" services
echo
echo "== haproxy answers from two again (asked four times)"
ask_haproxy 4

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
