#!/usr/bin/env bash
# Builds helm VERSION from its Go module (through the Go module proxy) into DIR: the chart's
# tests render and lint with it (tests/deploy). Uses the Go toolchain on PATH when there is
# one recent enough; otherwise the toolchain the Go module proxy serves as a module
# (golang.org/toolchain), unpacked into .cache/go-toolchain. Debian bookworm's golang-go
# (1.19) is too old for helm 3.22.
set -euo pipefail
version=${1:?usage: install-helm.sh VERSION DIR}
dest=${2:?usage: install-helm.sh VERSION DIR}
toolchain=1.26.8
proxy=${GOPROXY:-https://proxy.golang.org}
proxy=${proxy%%,*}

go_ok() { "$1" version 2>/dev/null | grep -Eq 'go1\.(2[4-9]|[3-9][0-9])'; }

go=$(command -v go || true)
if [ -z "$go" ] || ! go_ok "$go"; then
  case "$(uname -m)" in x86_64) arch=amd64 ;; aarch64 | arm64) arch=arm64 ;; *) arch=$(uname -m) ;; esac
  root=.cache/go-toolchain/go$toolchain.linux-$arch
  go=$root/bin/go
  if ! go_ok "$go"; then
    echo "make helm: no Go >= 1.24 on PATH; fetching Go $toolchain from $proxy (golang.org/toolchain)"
    mkdir -p "$root"
    curl -fsSL --retry 3 -o "$root.zip" "$proxy/golang.org/toolchain/@v/v0.0.1-go$toolchain.linux-$arch.zip"
    python3 - "$root.zip" "$root" <<'PY'
import os, stat, sys, zipfile
zip_path, root = sys.argv[1:]
prefix = f"golang.org/toolchain@v0.0.1-{os.path.basename(root)}/"
with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
        name = info.filename[len(prefix):] if info.filename.startswith(prefix) else info.filename
        if not name or name.endswith("/"):
            continue
        target = os.path.join(root, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as out:
            out.write(src.read())
        mode = info.external_attr >> 16
        if mode & stat.S_IXUSR or "/bin/" in f"/{name}" or "/pkg/tool/" in f"/{name}":
            os.chmod(target, 0o755)
PY
    rm -f "$root.zip"
  fi
fi
echo "make helm: building helm $version with $("$go" version | cut -d' ' -f3)"
GOBIN=$(realpath -m "$dest") GOFLAGS=-mod=mod GOTOOLCHAIN=local "$go" install helm.sh/helm/v3/cmd/helm@"$version"
"$dest/helm" version --short
