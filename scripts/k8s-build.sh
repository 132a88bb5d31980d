#!/usr/bin/env bash
# Builds the Kubernetes that shoal's Kubernetes tests run against, from the Go module proxy
# (docs/kubernetes.md, "The test cluster"): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl, kwok and CoreDNS. Nothing of it ships with shoal; it is a test harness.
#
# Everything is cached outside the clone, in $SHOAL_K8S_CACHE (default ~/.cache/shoal/k8s): the
# Go module and build caches and the binaries, one folder per version. A second run finds the
# stamp and returns at once; a cold build is about 10 CPU-minutes (6-8 min wall on 2 cores).
#
# Without Go it says so and exits 0: the Kubernetes tests then skip with that reason.
# Usage: scripts/k8s-build.sh [--kueue]   (--kueue also builds Kueue for bench/kubernetes.py)
set -euo pipefail

K8S_VERSION=${SHOAL_K8S_VERSION:-v1.35.4}
STAGING_VERSION=v0.${K8S_VERSION#v1.}
ETCD_VERSION=v3.6.16
KWOK_VERSION=v0.8.0
KUEUE_VERSION=v0.17.0
COREDNS_VERSION=v1.14.7
CACHE=${SHOAL_K8S_CACHE:-$HOME/.cache/shoal/k8s}
BIN=$CACHE/bin-$K8S_VERSION
STAMP=$BIN/.built

say() { echo "k8s-build: $*"; }

if ! command -v go >/dev/null; then
    say "go is not on the PATH: the Kubernetes test cluster is not built and its tests skip" \
        "(install Go 1.25 or newer, then run make k8s)"
    exit 0
fi

export GOMODCACHE=$CACHE/gomod GOCACHE=$CACHE/gocache GOFLAGS=-modcacherw CGO_ENABLED=0
export GOTOOLCHAIN=local
LDFLAGS="-s -w"
mkdir -p "$BIN" "$CACHE/src"

build_kubernetes() {
    local src=$CACHE/src/kubernetes-$K8S_VERSION
    mkdir -p "$src"
    cd "$src"
    if [ ! -f go.mod ]; then
        cat >go.mod <<EOF
module shoal.test/k8sbuild

go 1.25.0

require k8s.io/kubernetes $K8S_VERSION
EOF
        cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
        # k8s.io/kubernetes replaces its staging modules with ./staging/...; a module that depends
        # on it must name the published versions of the same modules instead.
        go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
        local mod=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod
        grep -oE '^\s*k8s\.io/[a-z0-9-]+ => \./staging' "$mod" | awk '{print $1}' | sort -u |
            while read -r m; do echo "replace $m => $m $STAGING_VERSION"; done >>go.mod
        go mod tidy
    fi
    for cmd in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do
        if [ ! -x "$BIN/$cmd" ]; then
            say "building $cmd $K8S_VERSION"
            go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
            mv "$BIN/$cmd.tmp" "$BIN/$cmd"
        fi
    done
}

build_etcd() {
    [ -x "$BIN/etcd" ] && return 0
    local src=$CACHE/src/etcd-$ETCD_VERSION
    mkdir -p "$src"
    cd "$src"
    if [ ! -f go.mod ]; then
        cat >go.mod <<EOF
module shoal.test/etcdbuild

go 1.25.0

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
        cat >main.go <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
        go mod tidy
    fi
    say "building etcd $ETCD_VERSION"
    go build -trimpath -ldflags "$LDFLAGS" -o "$BIN/etcd.tmp" .
    mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_kwok() {
    if [ ! -x "$BIN/kwok" ]; then
        say "building kwok $KWOK_VERSION"
        GOBIN=$BIN go install -trimpath -ldflags "$LDFLAGS" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    fi
    # kwok needs stages (how fake nodes and Pods move); the module ships them as kustomize parts.
    local stage=$GOMODCACHE/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage
    {
        cat "$stage/node/fast/node-initialize.yaml"
        echo "---"
        cat "$stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml"
        for f in "$stage"/pod/fast/*.yaml; do
            echo "---"
            cat "$f"
        done
    } >"$BIN/kwok-stages.yaml"
}

build_coredns() {
    # cluster DNS, for the pod-network mode's Service names (docs/kubernetes.md)
    [ -x "$BIN/coredns" ] && return 0
    say "building coredns $COREDNS_VERSION"
    GOBIN=$BIN go install -trimpath -ldflags "$LDFLAGS" "github.com/coredns/coredns@$COREDNS_VERSION"
}

build_kueue() {
    [ -x "$BIN/kueue" ] && return 0
    say "building kueue $KUEUE_VERSION"
    GOBIN=$BIN go install -trimpath -ldflags "$LDFLAGS" "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
    ln -sfn "$GOMODCACHE/sigs.k8s.io/kueue@$KUEUE_VERSION/config" "$BIN/kueue-config"
}

if [ "${1:-}" = --kueue ]; then
    build_kueue
    exit 0
fi
if [ -f "$STAMP" ] && [ -x "$BIN/coredns" ]; then
    say "cached in $BIN"
    exit 0
fi
start=$(date +%s)
build_etcd
build_kubernetes
build_kwok
build_coredns
touch "$STAMP"
say "built in $(($(date +%s) - start)) s into $BIN"
