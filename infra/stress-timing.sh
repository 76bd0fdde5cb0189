#!/usr/bin/env bash
# Runs the timing-sensitive tests N times in a row under a parallel CPU load (stress-ng), to show they hold on a busy 2-core machine: the platform drills, the no-hang, money, restart, re-drive, turns and languages tests (embedded and on the emulator), the local stack's 503/stale-plan/lost-answer tests, and the small chaos runs of infra/test.sh (their flags read from there). Stops at the first failure, naming the test and the run; prints a summary (runs, passes, time per run).
# Usage: infra/stress-timing.sh [N]          N runs (default 10; or STRESS_RUNS)
#   STRESS_CPU=2        stress-ng CPU workers beside the tests (default 2; 0 runs without load)
#   STRESS_ONLY=regex   only the entries whose name matches (names: swarm-tests/platform_drills, …, chaos/embedded, chaos/emulator)
#   STRESS_CHAOS=0      leaves out the two small chaos runs
#   MOTO_PORT=5200      the emulator's port (default 5200; the IAM-enforcing one on MOTO_IAM_PORT, default MOTO_PORT + 10)
#   SWARM_VENV=…        the Python venv with moto (as for infra/aws/*.sh)
# Needs stress-ng (Debian: `sudo apt-get install stress-ng`). Logs under target/stress-timing/.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
runs="${1:-${STRESS_RUNS:-10}}"
cpu="${STRESS_CPU:-2}"
only="${STRESS_ONLY:-}"
with_chaos="${STRESS_CHAOS:-1}"
# Never the ports infra/test.sh uses by default (5000, 5010): a developer's own run may hold them.
export MOTO_PORT="${MOTO_PORT:-5200}"
iam_port="${MOTO_IAM_PORT:-$((MOTO_PORT + 10))}"
logs="$root/target/stress-timing"
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if ! [[ "$runs" =~ ^[1-9][0-9]*$ ]]; then
    echo "usage: infra/stress-timing.sh [N]   (N a positive number of runs, got '$runs')" >&2
    exit 2
fi
if [[ "$cpu" != "0" ]] && ! command -v stress-ng >/dev/null; then
    echo "stress-ng is not installed: on Debian/Ubuntu \`sudo apt-get install stress-ng\` (or STRESS_CPU=0 to run without load)" >&2
    exit 2
fi

# The timing-sensitive test binaries: package and test target.
tests=(
    swarm-tests/platform_drills
    swarm-tests/no_hang
    swarm-tests/money
    swarm-tests/restart
    swarm-tests/redrive
    swarm-tests/turns
    swarm-tests/languages
    worker/no_hang
    swarm-local/retry_after_503
    swarm-local/stale_plan
    swarm-local/lost_answers
)
declare -A binary=() package_dir=()
mkdir -p "$logs"

echo "=== building the test binaries once (one cargo invocation: the features unify as in CI, nothing rebuilds twice)"
build=(cargo test --no-run --message-format=json)
for t in "${tests[@]}"; do build+=(-p "${t%%/*}" --test "${t#*/}"); done
if ! "${build[@]}" >"$logs/build.json" 2>"$logs/build.log"; then
    tail -30 "$logs/build.log" >&2
    exit 1
fi
for t in "${tests[@]}"; do
    [[ -n "$only" && ! "$t" =~ $only ]] && continue
    pkg="${t%%/*}" target="${t#*/}"
    # The test binary and its package's directory (cargo runs a test binary there).
    IFS=$'\t' read -r exe manifest < <(jq -r --arg pkg "$pkg" --arg target "$target" \
        'select(.reason == "compiler-artifact" and .executable != null and .target.kind == ["test"]
                and .target.name == $target and (.package_id | test("[/#]" + $pkg + "[@#]")))
         | "\(.executable)\t\(.manifest_path)"' "$logs/build.json" | tail -1)
    if [[ -z "${exe:-}" || ! -x "$exe" ]]; then
        echo "no test binary for $t in the build's output ($logs/build.json)" >&2
        exit 1
    fi
    binary[$t]="$exe"
    package_dir[$t]="$(dirname "$manifest")"
done
entries=()
for t in "${tests[@]}"; do [[ -n "${binary[$t]:-}" ]] && entries+=("$t"); done

# The small chaos runs exactly as infra/test.sh runs them (its arrays `chaos_embedded`, `chaos_emulator`),
# with the swarm-chaos binary the build above made for swarm-local's tests.
if [[ "$with_chaos" == "1" ]]; then
    eval "$(sed -n -e '/^chaos_embedded=(/,/)$/p' -e '/^chaos_emulator=(/,/)$/p' infra/test.sh)"
    if [[ ${#chaos_embedded[@]} -eq 0 || ${#chaos_emulator[@]} -eq 0 ]]; then
        echo "infra/test.sh no longer defines chaos_embedded and chaos_emulator: update this script" >&2
        exit 1
    fi
    chaos="$(jq -r 'select(.reason == "compiler-artifact" and .target.name == "swarm-chaos" and .target.kind == ["bin"]) | .executable' "$logs/build.json" | tail -1)"
    if [[ -z "$chaos" || ! -x "$chaos" ]]; then
        echo "the build made no swarm-chaos binary ($logs/build.json)" >&2
        exit 1
    fi
    for t in chaos/embedded chaos/emulator; do [[ -z "$only" || "$t" =~ $only ]] && entries+=("$t"); done
fi
if [[ ${#entries[@]} -eq 0 ]]; then
    echo "STRESS_ONLY='$only' matches no entry" >&2
    exit 2
fi

load="stress-ng --cpu $cpu"
[[ "$cpu" == "0" ]] && load="none (STRESS_CPU=0)"
stress_pid=""
finish() {
    [[ -n "$stress_pid" ]] && kill -- "-$stress_pid" 2>/dev/null
    infra/aws/moto.sh stop >/dev/null 2>&1 || true
    MOTO_PORT="$iam_port" infra/aws/moto.sh stop >/dev/null 2>&1 || true
}
trap finish EXIT
trap 'exit 130' INT TERM

echo "=== the AWS emulator on 127.0.0.1:$MOTO_PORT (and enforcing IAM on $iam_port)"
infra/aws/moto.sh start || exit 1
MOTO_PORT="$iam_port" MOTO_IAM=1 infra/aws/moto.sh start || exit 1
export SWARM_AWS_ENDPOINT="http://127.0.0.1:$MOTO_PORT" SWARM_AWS_IAM_ENDPOINT="http://127.0.0.1:$iam_port"
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset SWARM_SKIP_AWS LLM_BASE_URL LLM_API_KEY LLM_MODEL

if [[ "$cpu" != "0" ]]; then
    # Its own process group, so the trap ends stress-ng and its workers only.
    setsid stress-ng --cpu "$cpu" --quiet >"$logs/stress-ng.log" 2>&1 </dev/null &
    stress_pid=$!
    echo "=== load: stress-ng --cpu $cpu (pid $stress_pid)"
else
    echo "=== load: none (STRESS_CPU=0)"
fi

run_entry() {
    local t="$1" log="$2"
    case "$t" in
        chaos/embedded) "$chaos" "${chaos_embedded[@]}" ;;
        chaos/emulator) "$chaos" --aws-endpoint "$SWARM_AWS_IAM_ENDPOINT" --iam "${chaos_emulator[@]}" ;;
        *) (cd "${package_dir[$t]}" && CARGO_MANIFEST_DIR="${package_dir[$t]}" "${binary[$t]}") ;;
    esac >"$log" 2>&1
}

declare -A total=() worst=()
declare -a run_times=()
start_all=$SECONDS
for ((run = 1; run <= runs; run++)); do
    run_start=$SECONDS
    echo
    echo "=== run $run of $runs"
    for t in "${entries[@]}"; do
        log="$logs/${t//\//-}.run$run.log"
        start=$SECONDS
        if run_entry "$t" "$log"; then
            took=$((SECONDS - start))
            total[$t]=$(( ${total[$t]:-0} + took ))
            if [[ -z "${worst[$t]:-}" ]] || (( took > worst[$t] )); then worst[$t]=$took; fi
            printf '  ok    %4ss  %s\n' "$took" "$t"
        else
            rc=$?
            took=$((SECONDS - start))
            printf '  FAIL  %4ss  %s (exit %s)\n' "$took" "$t" "$rc"
            echo
            echo "FAILED in run $run of $runs: $t; log $log"
            grep -E '^test .* FAILED$|^---- .* ----$|panicked at|^verdict|^FAIL' "$log" | head -40
            echo "... last lines of the log:"
            tail -25 "$log"
            echo
            echo "Summary: $((run - 1)) of $runs runs passed before run $run failed in $t ($((SECONDS - start_all)) s; load: $load)"
            exit 1
        fi
    done
    run_times+=("$((SECONDS - run_start))")
done

echo
echo "Summary: $runs of $runs runs passed, load: $load, $((SECONDS - start_all)) s in all"
echo "  time per run (s): ${run_times[*]}"
for t in "${entries[@]}"; do
    printf '  %-28s  %2s passes  mean %4ss  worst %4ss\n' "$t" "$runs" "$(( total[$t] / runs ))" "${worst[$t]}"
done
