#!/usr/bin/env bash
# local-up.sh brings up a local cluster on this machine: a real control plane
# on 127.0.0.1 and nodekit node agents (examples/nodeagent) on containerd, or
# on the fake runtime when containerd cannot run here (see
# e2e/cmd/localcluster for the flags, e.g. -nodes=3 -runtime=fakecri). It
# prints the admin kubeconfig and runs until Ctrl-C, then removes everything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go -C e2e run ./cmd/localcluster up "$@"
