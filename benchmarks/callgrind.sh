#!/usr/bin/env bash
# Instructions per reconcile, counted by valgrind's callgrind (repeatable where perf has no hardware
# counters): etcd, a devcluster, and one coordinator and one worker (deployment,replicaset, qps 1000, 50
# syncs) each under callgrind with instrumentation switched on only from "fleet ready" to "N Deployments
# x 4 all updated". Usage: N=100 benchmarks/callgrind.sh path/to/flotilla result.txt — the result has the
# rollout time, the leader's dispatch counters (reconciles = flotilla_dispatch_assigned_total summed) and
# each process's instruction total. Needs etcd, kubectl, curl, valgrind and bc.
set -u
BIN=$(realpath "$1"); OUT=$(realpath -m "$2"); N=${N:-100}
D=$(mktemp -d); cd $D
EP=2399$((RANDOM%10)); PP=2499$((RANDOM%10))
etcd --data-dir $D/etcd --listen-client-urls http://127.0.0.1:$EP --advertise-client-urls http://127.0.0.1:$EP --listen-peer-urls http://127.0.0.1:$PP > etcd.log 2>&1 &
ETCD=$!
sleep 2
$BIN devcluster --etcd-endpoints http://127.0.0.1:$EP --listen 127.0.0.1:0 --write-kubeconfig $D/kc > dev.log 2>&1 &
DEV=$!
for i in $(seq 1 50); do [ -s $D/kc ] && break; sleep 0.2; done
kubectl --kubeconfig $D/kc create namespace bench >/dev/null
COMMON="--insecure-plaintext --fleet cg --etcd-endpoints http://127.0.0.1:$EP --kubeconfig $D/kc --metrics-listen 127.0.0.1:0"
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$D/coord.cg $BIN coordinator --listen 127.0.0.1:0 --id c0 $COMMON > coord.log 2>&1 &
C=$!
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$D/worker.cg $BIN worker --controllers deployment,replicaset --worker-id w0 --kube-api-qps 1000 --kube-api-burst 1000 --concurrent-deployment-syncs 50 --concurrent-replicaset-syncs 50 $COMMON > worker.log 2>&1 &
W=$!
# ready: the worker says it is welcomed (readyz); give it time under valgrind
for i in $(seq 1 240); do grep -q "welcome\|Welcome\|welcomed" worker.log && break; sleep 0.5; done
sleep 5
callgrind_control -i on $C >/dev/null; callgrind_control -i on $W >/dev/null
START=$(date +%s.%N)
for i in $(seq 0 $((N-1))); do cat <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: {name: roll-$i, namespace: bench}
spec:
  replicas: 4
  selector: {matchLabels: {app: roll-$i}}
  template:
    metadata: {labels: {app: roll-$i}}
    spec: {containers: [{name: app, image: registry.k8s.io/pause:3.10}]}
---
YAML
done | kubectl --kubeconfig $D/kc create -f - >/dev/null
for i in $(seq 1 600); do
  U=$(kubectl --kubeconfig $D/kc -n bench get deploy -o jsonpath='{range .items[*]}{.status.updatedReplicas}{"\n"}{end}' | grep -c "^4$")
  [ "$U" -ge "$N" ] && break; sleep 1
done
END=$(date +%s.%N)
callgrind_control -i off $C >/dev/null; callgrind_control -i off $W >/dev/null
echo "updated=$U seconds=$(echo "$END - $START" | bc)" > $OUT
# reconciles: the worker's reconcile counts from its metrics
MW=$(grep -o "metrics=[0-9.:]*" worker.log | head -1 | cut -d= -f2)
curl -s http://$MW/metrics | grep -E "^workqueue_adds_total|^flotilla_reconcile|^flotilla_worker_items|^flotilla_.*done" >> $OUT
MC=$(grep -o "metrics=[0-9.:]*" coord.log | head -1 | cut -d= -f2)
curl -s http://$MC/metrics | grep -E "^flotilla_.*(assigned|done)" >> $OUT
kill $W; sleep 3; kill $C; sleep 3
for f in coord worker; do echo "$f $(callgrind_annotate $D/$f.cg 2>/dev/null | grep -m1 "PROGRAM TOTALS")" >> $OUT; done
kill $DEV $ETCD 2>/dev/null
echo "dir=$D" >> $OUT
