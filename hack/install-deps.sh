#!/usr/bin/env bash
# install-deps.sh installs what nodekit's test suite needs on a Debian
# (bookworm) machine and does nothing when it is all there already:
#
#   - Debian packages: containerd, runc (the e2e harness's containerd 1.6
#     lane), containernetworking-plugins (bridge, host-local, loopback),
#     busybox-static (the e2e busybox image), iptables, iproute2, git,
#     ca-certificates, and gcc, libc6-dev, pkg-config and libseccomp-dev, with
#     which the harness builds runc (cgo) for its containerd 2, and make, with
#     which it builds upstream busybox's ash for the conformance test images
#     (from Debian's busybox source package, which it downloads with apt-get);
#   - the Go modules of the library and of the e2e module.
#
# The Go toolchain itself is not installed here: put Go (the version in
# go.mod, or newer) on PATH. Installing packages needs root or sudo.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(containerd runc containernetworking-plugins busybox-static iptables iproute2 git ca-certificates gcc libc6-dev pkg-config libseccomp-dev make)

missing=()
for p in "${packages[@]}"; do
	if [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)" != "install ok installed" ]]; then
		missing+=("$p")
	fi
done

if ((${#missing[@]} > 0)); then
	sudo=()
	if [[ "$(id -u)" -ne 0 ]]; then
		if ! command -v sudo >/dev/null; then
			echo "install-deps: missing Debian packages ${missing[*]}; run as root (or install sudo)" >&2
			exit 1
		fi
		sudo=(sudo)
	fi
	echo "install-deps: installing ${missing[*]}"
	"${sudo[@]}" apt-get update -qq
	DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v go >/dev/null; then
	echo "install-deps: the go command is not on PATH; install Go $(awk '/^go /{print $2}' go.mod) or newer" >&2
	exit 1
fi
go mod download
(cd e2e && go mod download)
echo "install-deps: ok ($(go version | awk '{print $3}'), $(containerd --version | awk '{print $3}'), runc $(runc --version | awk 'NR==1{print $3}'))"
