#!/usr/bin/env bash
# Builds kube-apiserver VERSION from the Kubernetes Go module (through the Go module proxy)
# into DIR, for the chart's real install test (`mcq stack up --with kubernetes`, tests/kube).
# k8s.io/kubernetes replaces its 31 staging modules (k8s.io/api, k8s.io/apiserver, ...) with
# paths inside its own repository, which a dependency cannot use: a module of our own requires
# it and pins each staging module to the matching v0.x. Cold: about 6 minutes and 2 GB on two
# cores; Go's build cache (outside the clone) makes a rebuild a link. The binary reports
# VERSION (helm refuses charts with `kubeVersion` against the default v0.0.0-master).
set -euo pipefail
version=${1:?usage: install-kube-apiserver.sh VERSION DIR}   # e.g. v1.34.4
dest=$(realpath -m "${2:?usage: install-kube-apiserver.sh VERSION DIR}")
go=$(command -v go || ls .cache/go-toolchain/*/bin/go 2>/dev/null | head -1 || true)
[ -n "$go" ] || { echo "make kube: no Go toolchain (run \`make helm\` first, it fetches one)" >&2; exit 1; }
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}
minor=${version#v1.}; minor=${minor%%.*}
patch=${version##*.}
staging="v0.$minor.$patch"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
mods=$(curl -fsSL --retry 3 "$proxy/k8s.io/kubernetes/@v/$version.mod" | sed -n 's|^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*|\1|p')
[ "$(echo "$mods" | wc -l)" -ge 20 ] || { echo "make kube: no staging modules listed for $version" >&2; exit 1; }
{
  echo "module mcq.local/kube-apiserver"
  echo
  echo "go 1.24"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  for m in $mods; do echo "replace $m => $m $staging"; done
} > go.mod
cat > main.go <<'GO'
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
GO
echo "make kube: building kube-apiserver $version with $("$go" version | cut -d' ' -f3) (cold: minutes)"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
"$go" mod tidy >/dev/null 2>&1 || "$go" mod tidy
v=k8s.io/component-base/version
mkdir -p "$dest"
"$go" build -trimpath -o "$dest/kube-apiserver.tmp" \
  -ldflags "-s -w -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor" .
mv "$dest/kube-apiserver.tmp" "$dest/kube-apiserver"
"$dest/kube-apiserver" --version
