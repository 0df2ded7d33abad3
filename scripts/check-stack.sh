#!/usr/bin/env bash
# The serverless stack's template must pass cfn-lint (CloudFormation's own resource schemas and
# rules): a template that lints clean can still fail to deploy, but one that does not would.
set -euo pipefail
cd "$(dirname "$0")/.."
cfn-lint infra/aws/template.yaml
echo "check-stack: infra/aws/template.yaml passes cfn-lint"
