#!/usr/bin/env bash
# soak.sh runs the long versions of nodekit's reliability e2e tests, which
# hack/test.sh (CI) runs short: pod churn of 2,000 pods × 5 rounds on the fake
# runtime and 200 × 5 on containerd (TestChurn; CI: 100 × 3 and 20 × 2). It
# needs root and the control plane that hack/test.sh builds (cached in
# $NODEKIT_CACHE, default ~/.cache/nodekit); the fake runtime's subtest takes
# about 10 minutes on two cores (README has the last figures), the subtests
# run one after the other. Under CI=true nothing skips. Extra
# arguments go to go test, e.g.
#
#   hack/soak.sh -run 'TestChurn/containerd'
#
# Environment: SOAK_TIMEOUT (default 90m) bounds the go test run;
# NODEKIT_SOAK_PODS and NODEKIT_SOAK_ROUNDS, where set, replace the pods per
# round and the rounds of every subtest (a shorter soak), e.g.
#
#   NODEKIT_SOAK_PODS=1000 NODEKIT_SOAK_ROUNDS=3 hack/soak.sh -run 'TestChurn/fakecri'
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../e2e"
run='TestChurn'
for arg in "$@"; do
	[[ "$arg" == -run* ]] && run=''
done
NODEKIT_SOAK=1 CI="${CI:-true}" exec go test -count=1 -timeout "${SOAK_TIMEOUT:-90m}" -v ${run:+-run "$run"} ./ "$@"
