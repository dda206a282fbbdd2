#!/usr/bin/env bash
# The local demo from a fresh clone: installs protoc and etcd when missing, builds every binary, and runs
# `flotilla up` (etcd + the local Kubernetes API + 2 coordinators + 3 workers running the greeting
# example), printing progress until the sample Greetings are reconciled. Extra arguments go to
# `flotilla up` (e.g. --keep-running).
set -euo pipefail
cd "$(dirname "$0")/../.."
./deploy/dev/prerequisites.sh
cargo build --workspace --bins
exec ./target/debug/flotilla up "$@"
