#!/usr/bin/env bash
# make image: the Dockerfile's two images, built without a Docker engine or a registry.
#   1. the tools, from Debian's packages when missing: buildah, podman, mmdebstrap, runc;
#   2. the base: Debian bookworm (minbase, documentation left out, as the -slim images do),
#      made by mmdebstrap from Debian's archive and imported as localhost/mcq-base:bookworm
#      (once; MCQ_IMAGE_FRESH_BASE=1 makes it again);
#   3. the wheelhouse the Dockerfile installs from (make wheelhouse);
#   4. buildah bud of the targets `listener` (slim: no JRE, no Spark) and `full`, tagged
#      localhost/mcq-listener:<version> and localhost/mcq:<version>; their virtualenv stages are
#      tagged localhost/mcq-stage:<stage> so the next build reuses them as its cache;
#   5. what earlier builds left (untagged images labelled org.opencontainers.image.title=mcq:
#      the images a rebuild's tags moved away from, stages no tag holds) is removed, before the
#      build and after it, so rebuilds do not fill the disk.
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

# the leftovers of earlier builds: untagged images of this Dockerfile's stages
prune_leftovers() {
  podman image prune -f --filter label=org.opencontainers.image.title=mcq >/dev/null
}
prune_leftovers

# the two targets with their stages take about 4 GB while they are written
store=$(podman info --format '{{.Store.GraphRoot}}')
free_kb=$(df -Pk "$store" | awk 'NR == 2 {print $4}')
if [ "$free_kb" -lt 5000000 ]; then
  echo "make image: $((free_kb / 1000)) MB free under $store, the build needs about 5,000 MB:" \
    "free some (podman image prune; podman system df shows what the images take), then rerun" >&2
  exit 1
fi

for target in listener-venv listener full-venv full; do
  case $target in
    *-venv) name=localhost/mcq-stage:$target ;;
    listener) name=localhost/mcq-listener:$version ;;
    full) name=localhost/mcq:$version ;;
  esac
  [[ $target == *-venv ]] || echo "make image: $name (target $target)"
  started=$(date +%s)
  # chroot isolation: RUN steps without an OCI runtime's cgroups; the host's network (apt);
  # --force-rm: a failed step leaves no working container behind
  buildah bud --quiet --layers --force-rm --isolation chroot --network host \
    --build-arg BASE_IMAGE="$base" --target "$target" -t "$name" -f Dockerfile . >/dev/null
  [[ $target == *-venv ]] && continue
  size=$(podman image inspect --format '{{.Size}}' "$name")
  echo "make image: $name, $((size / 1000000)) MB, built in $(( $(date +%s) - started )) s"
done
prune_leftovers
