#!/usr/bin/env bash
# CI of the AWS side: starts the emulator and a second one enforcing IAM (stopped on exit), runs the adapters' tests and the contract suites (embedded and AWS adapters) against it, lints the template; prints timings, exits non-zero on any failure.
# Usage: infra/aws/ci.sh          SWARM_SAM_BUILD=1 also runs infra/aws/sam-build.sh (long: a release arm64 build).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
port="${MOTO_PORT:-5000}"
iam_port="${MOTO_IAM_PORT:-$((port + 10))}"
total_start=$SECONDS
declare -a report=()
failed=0

step() {
    local name="$1"; shift
    local start=$SECONDS rc=0
    echo "::: $name"
    "$@" || rc=$?
    local took=$((SECONDS - start))
    if [[ $rc -eq 0 ]]; then
        report+=("ok    ${took}s  $name")
    else
        report+=("FAIL  ${took}s  $name (exit $rc)")
        failed=1
    fi
    return $rc
}

finish() {
    infra/aws/moto.sh stop >/dev/null 2>&1 || true
    MOTO_PORT="$iam_port" infra/aws/moto.sh stop >/dev/null 2>&1 || true
    echo
    echo "AWS-side CI summary (total $((SECONDS - total_start)) s):"
    for line in "${report[@]}"; do echo "  $line"; done
}
trap finish EXIT

if ! step "start the emulator (moto, port $port)" infra/aws/moto.sh start; then
    exit 1
fi
if ! step "start the emulator enforcing IAM (moto, port $iam_port)" env MOTO_PORT="$iam_port" MOTO_IAM=1 infra/aws/moto.sh start; then
    exit 1
fi
export SWARM_AWS_ENDPOINT="http://127.0.0.1:$port" SWARM_AWS_IAM_ENDPOINT="http://127.0.0.1:$iam_port"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
# CI never skips the AWS side.
unset SWARM_SKIP_AWS

step "cargo test -p swarm-adapters -p swarm-local --all-features --tests (contract suites on the emulator)" \
    cargo test -p swarm-adapters -p swarm-local --all-features --tests
step "template lint (cfn-lint, sam validate --lint, expanded template, key settings)" infra/aws/lint.sh
if [[ "${SWARM_SAM_BUILD:-0}" == "1" ]]; then
    step "sam build (arm64, cargo-lambda)" infra/aws/sam-build.sh
fi

exit $failed
