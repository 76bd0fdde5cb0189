#!/usr/bin/env bash
# Builds the deployable artifacts once with `sam build` (arm64, BuildMethod rust-cargolambda: cargo-lambda + zig from the venv; SAM 1.170 builds it without beta flags) and prints how long it took.
# Usage: infra/aws/sam-build.sh [extra sam build args]     Output: .aws-sam/build (git-ignored)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
bin="$("$root/infra/aws/venv.sh")"
# cargo finds `cargo lambda` on PATH; cargo-zigbuild finds zig through the venv's `python -m ziglang`.
export PATH="$bin:$PATH"
export SAM_CLI_TELEMETRY=0 AWS_REGION="${AWS_REGION:-us-east-1}" AWS_DEFAULT_REGION="${AWS_DEFAULT_REGION:-us-east-1}"

if ! rustup target list --installed | grep -qx aarch64-unknown-linux-gnu; then
    echo "sam-build: adding the aarch64-unknown-linux-gnu std (rustup, at most 5 min)"
    timeout 300 rustup target add aarch64-unknown-linux-gnu
fi

start=$SECONDS
timeout "${SAM_BUILD_TIMEOUT_SECS:-3600}" "$bin/sam" build --template-file template.yaml "$@"
took=$((SECONDS - start))
echo "sam-build: built in ${took} s"
for f in .aws-sam/build/*/bootstrap; do
    [[ -f "$f" ]] && echo "sam-build: $(du -h "$f" | cut -f1) $f ($(file -b "$f" | cut -d, -f1-2))"
done
