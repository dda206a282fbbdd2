#!/usr/bin/env bash
# Every check CI runs, from a fresh clone: installs protoc and etcd when missing, checks formatting and
# lints, builds every binary (the end-to-end tests start them as processes), and runs every test with
# cargo-nextest (falling back to cargo test). One cargo profile (dev) throughout, so nothing builds twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/dev/prerequisites.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --bins --locked
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
