#!/usr/bin/env bash
# Lints template.yaml four ways (plus the timing table's rules, the local stack's wiring and the lint's own tests) and exits non-zero on any finding: cfn-lint, `sam validate --lint`, cfn-lint on the SAM-expanded template, and the key-settings check, which also holds the local wiring (`swarm-local wiring --json`, built with cargo) against the template.
# Usage: infra/aws/lint.sh   (installs the pinned tools into .venv on first use)
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin="$("$root/infra/aws/venv.sh")" || { echo "lint: cannot set up the venv" >&2; exit 1; }
# sam and the translator want a region; no call leaves this machine.
export AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}" SAM_CLI_TELEMETRY=0

failed=0
step() {
    local name="$1"; shift
    local start=$SECONDS
    if "$@"; then
        echo "lint: ok   $name ($((SECONDS - start)) s)"
    else
        echo "lint: FAIL $name ($((SECONDS - start)) s)"
        failed=1
    fi
}

expanded="$(mktemp --suffix=.json)"
wiring="$(mktemp --suffix=.json)"
trap 'rm -f "$expanded" "$wiring"' EXIT

step "cfn-lint template.yaml" "$bin/cfn-lint" template.yaml
step "sam validate --lint" timeout 300 "$bin/sam" validate --lint --template-file template.yaml
step "SAM translation" sh -c "'$bin/python' infra/aws/translate.py template.yaml > '$expanded'"
step "cfn-lint on the expanded template" "$bin/cfn-lint" "$expanded"
step "the local stack's wiring (swarm-local wiring --json)" sh -c "cargo run -q -p swarm-local -- wiring --json > '$wiring'"
step "the emulator's copy of the IAM policies is current (iam-policies.json)" \
    sh -c "'$bin/python' infra/aws/iam_policies.py template.yaml | diff -u infra/aws/iam-policies.json - >&2 \
        || { echo 'regenerate: .venv/bin/python infra/aws/iam_policies.py template.yaml > infra/aws/iam-policies.json' >&2; exit 1; }"
step "key settings, the timing table and the local wiring (check_template.py)" \
    "$bin/python" infra/aws/check_template.py template.yaml samconfig.toml --wiring "$wiring"
step "the lint's own tests (test_check_template.py, on the local wiring)" \
    env SWARM_WIRING_JSON="$wiring" "$bin/python" -m unittest -q infra/aws/test_check_template.py

if [[ $failed -ne 0 ]]; then
    echo "lint: template.yaml has findings (see above)"
    exit 1
fi
echo "lint: template.yaml clean"
