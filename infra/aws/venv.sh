#!/usr/bin/env bash
# Ensures the project's Python venv (.venv at the repo root) holds the pinned tools: the AWS side's (infra/aws/requirements.txt: emulator, template lint, sam build) and the checks' (infra/aws/requirements-checks.txt: the OpenAPI validator, cargo shear, cargo deny, all wheels); prints the venv's bin dir.
# Usage: infra/aws/venv.sh            (idempotent; reinstalls a list only when it changed)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${SWARM_VENV:-$root/.venv}"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "venv: creating $venv" >&2
    python3 -m venv "$venv" >&2
fi

# install <requirements file> <stamp name>: pip-installs the file's pins when they changed since the last install.
install() {
    local req="$1" stamp="$venv/$2"
    local want
    want="$(sha256sum "$req" | cut -d' ' -f1)"
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
        echo "venv: installing $(grep -cv '^#' "$req") pinned packages from ${req#"$root"/} (first time: a few minutes)" >&2
        # Bounded: pip gives up on a dead index instead of waiting forever.
        timeout 900 "$venv/bin/pip" install --disable-pip-version-check -q --timeout 60 -r "$req" >&2
        echo "$want" > "$stamp"
    fi
}
install "$root/infra/aws/requirements.txt" .swarm-requirements.sha256
install "$root/infra/aws/requirements-checks.txt" .swarm-checks.sha256
echo "$venv/bin"
