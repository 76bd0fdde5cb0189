#!/usr/bin/env bash
# Ensures the project's Python venv (.venv at the repo root) holds the pinned AWS-side tools of infra/aws/requirements.txt; prints the venv's bin dir.
# Usage: infra/aws/venv.sh            (idempotent; reinstalls only when requirements.txt changed)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${SWARM_VENV:-$root/.venv}"
req="$root/infra/aws/requirements.txt"
stamp="$venv/.swarm-requirements.sha256"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating $venv" >&2
    python3 -m venv "$venv" >&2
fi
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "venv: installing $(grep -cv '^#' "$req") pinned packages from infra/aws/requirements.txt (first time: a few minutes)" >&2
    # Bounded: pip gives up on a dead index instead of waiting forever.
    timeout 900 "$venv/bin/pip" install --disable-pip-version-check -q --timeout 60 -r "$req" >&2
    echo "$want" > "$stamp"
fi
echo "$venv/bin"
