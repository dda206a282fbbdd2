#!/usr/bin/env bash
# Every check CI runs, from a fresh clone: installs protoc, etcd and the chart checks' tools when
# missing, checks formatting, builds every target with clippy's lints denied, checks the Helm chart and
# the Dockerfile (deploy/helm/check.sh), builds and runs an image of the binary (deploy/image/check.sh),
# and runs every test with cargo-nextest (falling back to cargo test).
#
# Lints run while compiling, not in a separate `cargo clippy` pass: clippy-driver wraps rustc for the
# workspace's own crates (RUSTC_WORKSPACE_WRAPPER, with CLIPPY_ARGS as `cargo clippy` passes them), so
# each crate is linted and built in one compilation and the dependencies are compiled once, for the
# binaries and the tests alike (a `cargo clippy` pass compiles every dependency a second time, in check
# mode). One cargo profile (dev) throughout, so nothing builds twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/dev/prerequisites.sh
cargo fmt --all -- --check
clippy_driver="$(command -v clippy-driver || true)"
if [ -z "$clippy_driver" ]; then
  clippy_driver="$(dirname "$(rustup which rustc)")/clippy-driver"
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
# Every target: the binaries (the end-to-end tests start them as processes), the tests, the examples.
cargo build --workspace --all-targets --locked
# The Helm chart and the Dockerfile: lint, render, check the renders against the binaries just built.
./deploy/helm/check.sh
# An image of the binary just built, run with buildah: `flotilla --version` and `flotilla rbac` inside it.
./deploy/image/check.sh
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
