#!/usr/bin/env bash
# new-module.sh v1.<minor>.<patch>: write the module that builds an older
# Kubernetes release's control plane for `make test-compat`, in v1.<minor>/:
# a go.mod that requires k8s.io/kubernetes at the release and replaces each
# staging module that release's own go.mod names (read from the Go module
# proxy) with the same module at v0.<minor>.<patch>, etcd's main, and
# `go mod tidy`, which picks the etcd that the release pins.
set -euo pipefail
version=${1:?usage: new-module.sh v1.<minor>.<patch>}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "new-module.sh: $version is not v1.<minor>.<patch>" >&2; exit 2; }
minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
dir=$(dirname "$0")/v1.$minor
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}
mod=$(curl -fsS "$proxy/k8s.io/kubernetes/@v/$version.mod") || { echo "new-module.sh: the module proxy has no k8s.io/kubernetes $version" >&2; exit 1; }
# sample-* are examples nothing needs (and the proxy refuses some of them).
staging=$(sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p' <<<"$mod" | grep -v '^k8s.io/sample-')
[ -n "$staging" ] || { echo "new-module.sh: no staging replaces in k8s.io/kubernetes $version's go.mod" >&2; exit 1; }
mkdir -p "$dir/etcd"
cat >"$dir/etcd/main.go" <<'GO'
// Command etcd is etcd's own server main, built at the version that the
// pinned Kubernetes release requires.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
{
	cat <<MOD
// Module v1.$minor builds the control plane of Kubernetes $version (etcd,
// kube-apiserver, kube-scheduler, kube-controller-manager; no kubelet: the
// compatibility subset runs on simulated nodes) for \`make test-compat\`.
// Written by new-module.sh; build it with
// \`make controlplane-compat K8S_COMPAT=$version\`.
module github.com/dra-exporter/dra-exporter/test/controlplane/compat/v1.$minor

go 1.26.0

require k8s.io/kubernetes $version

tool (
	k8s.io/kubernetes/cmd/kube-apiserver
	k8s.io/kubernetes/cmd/kube-controller-manager
	k8s.io/kubernetes/cmd/kube-scheduler
)

// k8s.io/kubernetes replaces its staging modules with ./staging; a module
// that depends on it must name each of them at the matching release.
replace (
MOD
	for m in $staging; do printf '\t%s => %s v0.%s.%s\n' "$m" "$m" "$minor" "$patch"; done
	echo ")"
} >"$dir/go.mod"
(cd "$dir" && GOFLAGS=-mod=mod go mod tidy)
echo "$dir: k8s.io/kubernetes $version, $(grep -c ' => ' "$dir/go.mod") staging replaces, $(grep -m1 'go.etcd.io/etcd/server/v3 ' "$dir/go.mod" | awk '{print "etcd", $2}')"
