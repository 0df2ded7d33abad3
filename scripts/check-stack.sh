#!/usr/bin/env bash
# The serverless stack's template must pass cfn-lint (CloudFormation's resource schemas and
# rules): it finds a wrong property, type or reference before a deployment does. A template that
# lints clean can still fail to deploy; infra/aws/tests/stack.rs creates it in the emulator too.
set -euo pipefail
cd "$(dirname "$0")/.."
cfn-lint infra/aws/template.yaml
echo "check-stack: infra/aws/template.yaml passes cfn-lint"
