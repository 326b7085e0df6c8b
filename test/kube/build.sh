#!/usr/bin/env bash
# build.sh builds kube-apiserver, kubectl and etcd from the module in
# apiserver/ (fetched through the Go module proxy) into a cache directory
# outside the repository, and builds nothing that is already there: the
# first run compiles for about 20 minutes on two cores, later runs start at
# once.
#
# It prints the directory holding the programs. TOOLGATE_KUBE_CACHE
# overrides the default, ${XDG_CACHE_HOME:-$HOME/.cache}/toolgate/kube-<version>.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
version=v1.37.2
etcd_version=v3.7.0
cache=${TOOLGATE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/toolgate/kube-$version}
mkdir -p "$cache"

build() { # build NAME PACKAGE LDFLAGS
	local name=$1 pkg=$2 ldflags=$3
	if [[ -x $cache/$name ]]; then
		return
	fi
	echo "build.sh: building $name ($pkg) into $cache; the first time takes minutes" >&2
	local start=$SECONDS
	(cd "$here/apiserver" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$cache/$name.tmp" "$pkg")
	mv "$cache/$name.tmp" "$cache/$name"
	echo "build.sh: $name built in $((SECONDS - start))s" >&2
}

kube_version="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
build etcd go.etcd.io/etcd/server/v3 "-X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_version"
build kubectl k8s.io/kubernetes/cmd/kubectl "$kube_version -X k8s.io/client-go/pkg/version.gitVersion=$version"
echo "$cache"
