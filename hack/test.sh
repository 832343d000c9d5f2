#!/usr/bin/env bash
# test.sh is nodekit's whole test command, the one CI runs (.ci/run):
#
#   1. install dependencies (hack/install-deps.sh);
#   2. gofmt check: fails listing the files that need formatting;
#   3. go vet of the library and of the e2e module;
#   4. unit tests of the library with the race detector;
#   4b. hack/defaultscheck: podsource.SetDefaults against the API server's
#      own pod defaulting (k8s.io/kubernetes), a module of its own;
#   4c. every fuzz target of the library (func Fuzz* in a _test.go file) for
#      FUZZ_TIME each (default 2000x, 2,000 inputs): the decoders of outside input
#      (KubeletConfiguration, flags, static pod manifests, cgroup names)
#      and the CRI runtime's replies (runtime.FuzzCRIReplies); started in the
#      background at nice 19 after the unit tests, waited for at the end;
#   5. build (or reuse from $NODEKIT_CACHE, default ~/.cache/nodekit; started
#      in the background at nice 5 after go vet, waited for here) the
#      control plane: about 20 minutes cold on a 2-core machine, seconds cached,
#      and kubeadm (e2e/kubeadm_test.go), containerd 2, runc and crictl (the
#      e2e suite's runtime; a few minutes cold); the control plane is built
#      statically linked, so kubeadm init's images (e2e/kubeadm_init_test.go)
#      hold the same binaries; then upstream's e2e.test, ginkgo and agnhost for the conformance
#      subset (e2e/conformance_test.go), and upstream busybox's ash for its busybox images
#      (Debian's busybox source package, fetched with apt-get; about a minute to build);
#      and what e2e tests would otherwise build while the suite runs, slowing
#      every test beside them: the upstream kubelet (the handover tests) and
#      metrics-server (the node API test);
#   6. the e2e suite (e2e/): agents against the real control plane, on
#      containerd 2 (and its 1.6 lane, Debian's containerd) and on the fake
#      runtime.
#
# A cold run is CPU-bound on two cores, so what makes it short is compiling
# each package as few times as possible: every build but the race detector's
# runs with CGO_ENABLED=0, as the control plane is built, and the library
# requires the e2e module's versions of what both build from
# (e2e/cluster TestLibraryModulesMatchE2E), so go vet, the e2e tests, the
# agent binary and the e2e images share one compile of the library and its
# dependencies, and e2e.test shares the control plane's. The background
# steps fill the CPU the others leave idle (links, downloads, tests
# waiting): the control plane build at nice 5, the fuzz targets, whose
# instrumented build shares nothing, at nice 19.
#
# Every step runs even if an earlier one failed; the script ends with each
# step's result and go test's closing lines, and exits non-zero if any step
# failed. Under CI=true no e2e test may skip: one that cannot run fails.
#
# Environment: E2E_TIMEOUT (default 30m) bounds the e2e go test run;
# FUZZ_TIME (default 2000x) bounds each fuzz target: a count, not a
# duration, because go1.26's fuzz coordinator can report its own
# -fuzztime deadline as a failure ("context deadline exceeded", no input
# written; golang/go#75804, fixed in go1.27) when its workers are starved,
# which a loaded CI machine does;
# TEST_LOG_DIR (default a new temporary directory) keeps the full logs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

e2e_timeout="${E2E_TIMEOUT:-30m}"
logs="${TEST_LOG_DIR:-$(mktemp -d -t nodekit-test-XXXXXX)}"
mkdir -p "$logs"

results=()
failed=0
run_step() {
	local name="$1"
	shift
	local start=$SECONDS
	echo
	echo "==> $name"
	if "$@"; then
		results+=("ok    $name ($((SECONDS - start))s)")
	else
		results+=("FAIL  $name ($((SECONDS - start))s)")
		failed=1
	fi
}

deps() {
	if ! hack/install-deps.sh; then
		echo "test.sh: dependencies are missing; the steps that need them will fail or, outside CI, skip" >&2
		return 1
	fi
}

format() {
	local files
	files="$(find . -path ./.git -prune -o -name testdata -prune -o -name vendor -prune -o -name '*.go' -print0 | xargs -0 gofmt -l)"
	if [[ -n "$files" ]]; then
		echo "these files need gofmt -w:"
		echo "$files"
		return 1
	fi
}

vet() {
	go vet ./... && (cd e2e && go vet ./...)
}

# The race detector needs cgo.
unit() {
	CGO_ENABLED=1 go test -race ./... 2>&1 | tee "$logs/unit.log"
}

# fuzz runs each fuzz target of the library for $FUZZ_TIME; a failure leaves
# its input in the package's testdata/fuzz, where the unit tests replay it.
fuzz() {
	local rc=0 file pkg target
	while IFS= read -r file; do
		pkg="./$(dirname "$file")"
		for target in $(grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //'); do
			echo "fuzz $pkg $target"
			go test -run='^$' -fuzz="^${target}\$" -fuzztime="${FUZZ_TIME:-2000x}" "$pkg" 2>&1 | tail -20 || rc=1
		done
	done < <(grep -rlE '^func Fuzz' --include='*_test.go' --exclude-dir=e2e --exclude-dir=hack --exclude-dir=.git . | sed 's|^\./||' | sort)
	return "$rc"
}

defaultscheck() {
	(cd hack/defaultscheck && go run .)
}

controlplane() {
	(cd e2e && go run ./cmd/localcluster build && go run ./cmd/conformance -build -agents=nodekit,kubelet)
}

# background_start NAME NICE FUNC runs FUNC in the background at nice NICE,
# its output kept in $logs/NAME.log; background_wait NAME waits for it,
# prints that output and returns its status.
declare -A background_pid background_started
background_start() {
	local name="$1" niceness="$2" fn="$3"
	(renice -n "$niceness" -p "$BASHPID" >/dev/null || true; "$fn") >"$logs/$name.log" 2>&1 &
	background_pid[$name]=$!
	background_started[$name]=$SECONDS
}

background_wait() {
	local name="$1" rc=0
	wait "${background_pid[$name]}" || rc=$?
	cat "$logs/$name.log"
	echo "$name: started $((SECONDS - ${background_started[$name]}))s ago"
	return "$rc"
}

# One e2e package at a time (-p 1): the suite's own package already runs 8
# tests at once against the control plane, and nodebench's quick run (its own
# control plane and agents) beside it only added load to a 2-core machine.
e2e() {
	(cd e2e && go test -p 1 -count=1 -timeout "$e2e_timeout" -v ./...) 2>&1 | tee "$logs/e2e.log"
}

# failed_tests prints each "--- FAIL" of a go test log with the last 12 lines
# that test logged: in a -v log attributed by go test's "=== RUN/CONT/NAME"
# marks, otherwise the indented lines that follow the "--- FAIL" line.
failed_tests() {
	awk -v label="$2" '
		/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; verbose = 1; next }
		/^(ok |FAIL|PASS)/ { cur = ""; after = 0; next }
		/^ *--- FAIL: / {
			fails[++n] = $0; owner[n] = $3
			if (!verbose) { after = n; cur = "#" n }
			next
		}
		/^ *--- (PASS|SKIP): / { if (!verbose) cur = ""; next }
		cur != "" { buf[cur, ++cnt[cur]] = $0 }
		END {
			if (n == 0) exit
			print label " failed tests:"
			for (i = 1; i <= n; i++) {
				print "  " fails[i]
				t = verbose ? owner[i] : "#" i
				from = cnt[t] - 11; if (from < 1) from = 1
				for (j = from; j <= cnt[t]; j++) print "      " buf[t, j]
			}
		}' "$1"
}

total=$SECONDS
export CGO_ENABLED=0
run_step "dependencies" deps
run_step "gofmt" format
run_step "go vet" vet
background_start controlplane 5 controlplane
run_step "unit tests (go test -race ./...)" unit
background_start fuzz 19 fuzz
run_step "pod defaults against the API server's (hack/defaultscheck)" defaultscheck
run_step "control plane build (waited for; started after go vet)" background_wait controlplane
run_step "e2e tests (e2e/: go test ./...)" e2e
run_step "fuzz (each target for ${FUZZ_TIME:-2000x}; waited for, started after the unit tests)" background_wait fuzz

echo
echo "==> summary (full logs in $logs)"
# Package results first, then every failed test with the last lines it
# logged, so the end of the output names what failed even when only the
# head and the tail of it are kept.
for log in unit e2e; do
	[[ -s "$logs/$log.log" ]] || continue
	echo "$log tests:"
	grep -E '^(ok |FAIL|panic:)' "$logs/$log.log" | sed 's/^/  /' || true
done
for log in unit e2e; do
	[[ -s "$logs/$log.log" ]] || continue
	failed_tests "$logs/$log.log" "$log"
done
printf '%s\n' "${results[@]}"
echo "total $((SECONDS - total))s"
if ((failed)); then
	echo "FAIL"
	exit 1
fi
echo "PASS"
