#!/usr/bin/env bash
# The API server's instructions per pod create, counted by valgrind's callgrind (repeatable where perf has
# no hardware counters and the CPU seconds of a shared 2-core machine are noisy): etcd, a devcluster under
# callgrind with instrumentation on only around N pod creates (8 at a time, 4 namespaces), and either
# nothing else, WATCHERS plain `curl ?watch=true` clients on pods (plus OTHERS on configmaps), or FLEET=1:
# one coordinator and one worker (deployment,replicaset,garbagecollector) holding their informers' watches.
# Usage: N=1000 WATCHERS=1 OTHERS=28 benchmarks/api-callgrind.sh path/to/flotilla
#        N=1000 FLEET=1 benchmarks/api-callgrind.sh path/to/flotilla
# Prints the devcluster's instructions per create. Needs etcd, curl, python3 and valgrind.
set -u
BIN=$(realpath "$1"); N=${N:-1000}; WATCHERS=${WATCHERS:-0}; OTHERS=${OTHERS:-0}; FLEET=${FLEET:-0}
D=$(mktemp -d); cd "$D"
EP=2379$((RANDOM%10)); PP=2479$((RANDOM%10)); PORT=1843$((RANDOM%10))
etcd --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:$EP --advertise-client-urls http://127.0.0.1:$EP \
  --listen-peer-urls http://127.0.0.1:$PP > etcd.log 2>&1 &
ETCD=$!
sleep 2
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$D/dev.cg" "$BIN" devcluster \
  --etcd-endpoints http://127.0.0.1:$EP --listen 127.0.0.1:$PORT --write-kubeconfig "$D/kc" > dev.log 2>&1 &
DEV=$!
for _ in $(seq 1 300); do curl -sf http://127.0.0.1:$PORT/healthz > /dev/null && break; sleep 0.5; done
PIDS=()
if [ "$FLEET" = 1 ]; then
  COMMON="--insecure-plaintext --fleet cg --etcd-endpoints http://127.0.0.1:$EP --kubeconfig $D/kc --metrics-listen 127.0.0.1:0"
  "$BIN" coordinator --listen 127.0.0.1:0 --id c0 $COMMON > coord.log 2>&1 &
  PIDS+=($!)
  "$BIN" worker --controllers deployment,replicaset,garbagecollector --worker-id w0 --kube-api-qps 1000 \
    --kube-api-burst 1000 $COMMON > worker.log 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 240); do grep -q "welcomed" worker.log && break; sleep 0.5; done
  sleep 10
fi
for _ in $(seq 1 "$WATCHERS"); do
  curl -sN "http://127.0.0.1:$PORT/api/v1/pods?watch=true&allowWatchBookmarks=true" > /dev/null &
  PIDS+=($!)
done
for _ in $(seq 1 "$OTHERS"); do
  curl -sN "http://127.0.0.1:$PORT/api/v1/configmaps?watch=true&allowWatchBookmarks=true" > /dev/null &
  PIDS+=($!)
done
sleep 2
python3 - "$PORT" "$DEV" "$N" <<'PY'
import http.client, json, subprocess, sys, threading
port, pid, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def post(c, path, body):
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse(); r.read()
    return r.status
c = http.client.HTTPConnection("127.0.0.1", port)
for i in range(4):
    post(c, "/api/v1/namespaces", {"metadata": {"name": f"cg-{i}"}})
todo, lock, failed = iter(range(n)), threading.Lock(), []
def creates():
    c = http.client.HTTPConnection("127.0.0.1", port)
    while True:
        with lock:
            i = next(todo, None)
        if i is None:
            return
        pod = {"metadata": {"name": f"bare-{i}", "labels": {"bench": "memory"}},
               "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}
        if post(c, f"/api/v1/namespaces/cg-{i % 4}/pods", pod) != 201:
            failed.append(i)
subprocess.run(["callgrind_control", "-i", "on", pid], stdout=subprocess.DEVNULL)
threads = [threading.Thread(target=creates) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
subprocess.run(["sleep", "1"])
subprocess.run(["callgrind_control", "-i", "off", pid], stdout=subprocess.DEVNULL)
if failed:
    sys.exit(f"{len(failed)} creates failed")
PY
for p in "${PIDS[@]}"; do kill "$p" 2> /dev/null; done
sleep 1
kill -INT $DEV; wait $DEV; kill $ETCD
callgrind_annotate "$D/dev.cg" 2> /dev/null | grep -m1 "PROGRAM TOTALS" |
  awk -v n="$N" '{gsub(",", "", $1); printf "devcluster instructions per pod create: %.0f\n", $1 / n}'
rm -rf "$D"
