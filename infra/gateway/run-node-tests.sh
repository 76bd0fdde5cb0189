#!/usr/bin/env bash
# Runs the tool gateway's tests that need Node 20: federation with @modelcontextprotocol/server-everything and the
# MCP conformance suite. Installs the pinned npm packages (npm ci, from package-lock.json) when they are missing.
# Usage: infra/gateway/run-node-tests.sh            (from anywhere; CI calls it as is)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

command -v node >/dev/null || { echo "node is not on PATH (Node 20 is required)" >&2; exit 1; }
major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$major" -ge 20 ] || { echo "Node $major found; Node 20 or newer is required" >&2; exit 1; }

if [ ! -d "$here/node_modules/@modelcontextprotocol/server-everything" ] \
   || [ ! -d "$here/node_modules/@modelcontextprotocol/conformance" ]; then
  echo "installing npm packages in infra/gateway (npm ci)"
  (cd "$here" && npm ci --no-audit --no-fund)
fi

cd "$root"
# SWARM_SKIP_NODE must not be set here: these tests exist to run.
env -u SWARM_SKIP_NODE cargo test -p tool-gateway --test node_federation --test node_conformance -- --nocapture
