#!/usr/bin/env bash
# make image: the Dockerfile's two images, built without a Docker engine or a registry.
#   1. the tools, from Debian's packages when missing: buildah, podman, mmdebstrap, runc;
#   2. the base: Debian bookworm (minbase, documentation left out, as the -slim images do),
#      made by mmdebstrap from Debian's archive and imported as localhost/mcq-base:bookworm
#      (once; MCQ_IMAGE_FRESH_BASE=1 makes it again);
#   3. the wheelhouse the Dockerfile installs from (make wheelhouse);
#   4. buildah bud of the targets `listener` (slim: no JRE, no Spark) and `full`, tagged
#      localhost/mcq-listener:<version> and localhost/mcq:<version>.
# Usage: scripts/build-image.sh VERSION [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: build-image.sh VERSION}
here=$PWD
export CONTAINERS_CONF="$here/scripts/image/containers.conf"

need=()
for tool in buildah podman mmdebstrap runc newuidmap; do
  command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
if [ ${#need[@]} -gt 0 ]; then
  packages=$(printf '%s\n' "${need[@]}" | sed 's/^newuidmap$/uidmap/' | sort -u | tr '\n' ' ')
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "make image: missing $packages and not root (no sudo): install them, then rerun" >&2; exit 1; }
    sudo=sudo
  fi
  echo "make image: installing $packages from Debian's packages"
  export DEBIAN_FRONTEND=noninteractive
  # shellcheck disable=SC2086
  $sudo apt-get install -y -q --no-install-recommends $packages >/dev/null \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q --no-install-recommends $packages >/dev/null; }
fi

base=localhost/mcq-base:bookworm
if [ "${MCQ_IMAGE_FRESH_BASE:-0}" = 1 ] || ! podman image exists "$base"; then
  echo "make image: the base, Debian bookworm from its archive (mmdebstrap)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mirror=http://deb.debian.org/debian
  mmdebstrap --quiet --variant=minbase --include=ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    bookworm "$tmp/rootfs.tar" \
    "deb $mirror bookworm main" "deb $mirror bookworm-updates main" "deb http://deb.debian.org/debian-security bookworm-security main"
  podman import -q "$tmp/rootfs.tar" "$base" >/dev/null
fi

for target in listener full; do
  name=localhost/mcq-$target:$version
  [ "$target" = full ] && name=localhost/mcq:$version
  echo "make image: $name (target $target)"
  started=$(date +%s)
  # chroot isolation: RUN steps without an OCI runtime's cgroups; the host's network (apt)
  buildah bud --quiet --layers --isolation chroot --network host \
    --build-arg BASE_IMAGE="$base" --target "$target" -t "$name" -f Dockerfile . >/dev/null
  size=$(podman image inspect --format '{{.Size}}' "$name")
  echo "make image: $name, $((size / 1000000)) MB, built in $(( $(date +%s) - started )) s"
done
