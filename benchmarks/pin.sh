#!/usr/bin/env bash
# Run beside a benchmark to keep the two sides of a 2-core machine apart:
#   benchmarks/pin.sh flotilla & flotilla bench memory --runs 3; kill %1
# Every 0.2 s it pins the fleet's processes (coordinators, workers) of the binary named NAME to CPU 1, and
# the API server's side (devcluster, etcd, the benchmark process and its client) to CPU 0, all threads.
# A measurement aid, not part of the benchmark: BENCHMARKS.md says which runs used it.
set -u
name=${1:?usage: pin.sh BINARY-NAME}
while true; do
  for p in $(pgrep -f "$name coordinator") $(pgrep -f "$name worker"); do taskset -a -p 2 "$p" >/dev/null 2>&1; done
  for p in $(pgrep -f "$name devcluster") $(pgrep -f "$name bench") $(pgrep -x etcd); do taskset -a -p 1 "$p" >/dev/null 2>&1; done
  sleep 0.2
done
