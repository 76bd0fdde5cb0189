#!/usr/bin/env bash
# Starts, stops or reports the local AWS emulator (moto's server: DynamoDB, SQS, …) used by the contract tests and `cargo lambda watch`.
# Usage: infra/aws/moto.sh start|stop|status    (port: MOTO_PORT, default 5000; MOTO_IAM=1 enforces IAM on that port)
# Clients talk to it with AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1;
# with MOTO_IAM=1 every request must be signed by an IAM user of the emulator (infra/aws/moto_server.py --iam).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
port="${MOTO_PORT:-5000}"
state="$root/target/moto"
pidfile="$state/moto-$port.pid"
logfile="$state/moto-$port.log"
url="http://127.0.0.1:$port"

answers() {
    # moto's dashboard API answers once the server is up; 2 s per try.
    curl -fsS -m 2 -o /dev/null "$url/moto-api/data.json" 2>/dev/null
}

running_pid() {
    [[ -f "$pidfile" ]] || return 1
    local pid
    pid="$(cat "$pidfile")"
    kill -0 "$pid" 2>/dev/null && echo "$pid"
}

case "${1:-}" in
start)
    if pid="$(running_pid)"; then
        echo "moto: already running (pid $pid) at $url"
        exit 0
    fi
    if answers; then
        echo "moto: something already answers at $url (not started by this script); using it"
        exit 0
    fi
    bin="$("$root/infra/aws/venv.sh")"
    mkdir -p "$state"
    # setsid: its own process group, so `stop` ends the server and its children only.
    # moto with DynamoDB requests serialised (infra/aws/moto_server.py says why).
    iam=()
    [[ "${MOTO_IAM:-0}" == "1" ]] && iam=(--iam)
    setsid "$bin/python" "$root/infra/aws/moto_server.py" -H 127.0.0.1 -p "$port" "${iam[@]}" >"$logfile" 2>&1 < /dev/null &
    echo $! > "$pidfile"
    for _ in $(seq 1 60); do   # at most 30 s
        if answers; then
            echo "moto: running (pid $(cat "$pidfile")) at $url, log $logfile"
            if [[ "${MOTO_IAM:-0}" == "1" ]]; then
                echo "moto: IAM enforced (administrator: infra/aws/moto_server.py ADMIN_KEY_ID); export SWARM_AWS_IAM_ENDPOINT=$url"
            else
                echo "export SWARM_AWS_ENDPOINT=$url AWS_ENDPOINT_URL=$url AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1"
            fi
            exit 0
        fi
        if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
            echo "moto: exited during start-up; last log lines:" >&2
            tail -20 "$logfile" >&2
            rm -f "$pidfile"
            exit 1
        fi
        sleep 0.5
    done
    echo "moto: no answer at $url within 30 s; see $logfile" >&2
    exit 1
    ;;
stop)
    if pid="$(running_pid)"; then
        kill -- "-$pid" 2>/dev/null || kill "$pid"
        for _ in $(seq 1 20); do   # at most 10 s, then force
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.5
        done
        kill -0 "$pid" 2>/dev/null && kill -9 -- "-$pid" 2>/dev/null
        echo "moto: stopped (pid $pid)"
    else
        echo "moto: not running (no live pid in $pidfile)"
    fi
    rm -f "$pidfile"
    ;;
status)
    if pid="$(running_pid)" && answers; then
        echo "moto: running (pid $pid) at $url"
    else
        echo "moto: not running at $url"
        exit 1
    fi
    ;;
*)
    echo "usage: $0 start|stop|status   (MOTO_PORT=$port)" >&2
    exit 2
    ;;
esac
