#!/usr/bin/env bash
# Installs, from Debian's packages, what the local stack runs and mcq builds with:
# PostgreSQL 15 (server), OpenLDAP (slapd, ldap-utils), a Java 17 JDK (mcq's Connect
# transform is compiled: jvm/connect-transforms), Maven, Chromium (the console's browser
# tests drive it headless through Playwright: no browser download), Samba's AD domain
# controller, etcd (the Kubernetes API server's store) and Python's venv module. Only what is missing is installed, so a second run is a no-op.
set -euo pipefail

need=()
have_file() { [ -e "$1" ]; }
have_cmd() { command -v "$1" >/dev/null 2>&1; }

have_file /usr/lib/postgresql/15/bin/postgres || need+=(postgresql-15)
have_file /usr/sbin/slapd || need+=(slapd)
have_cmd ldapsearch || need+=(ldap-utils)
have_cmd javac || need+=(openjdk-17-jdk-headless)
have_cmd mvn || need+=(maven)
have_cmd chromium || need+=(chromium)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
# Samba's Active Directory domain controller (`mcq stack up --with ad`, the AD tests): the
# daemon, its directory database modules, the provisioning data and the ACL module it needs
have_file /usr/sbin/samba || need+=(samba)
have_file /usr/lib/x86_64-linux-gnu/samba/ldb/samba_dsdb.so || need+=(samba-dsdb-modules)
have_file /usr/share/samba/setup/provision.ldif || need+=(samba-ad-provision)
have_file /usr/lib/x86_64-linux-gnu/samba/vfs/acl_xattr.so || need+=(samba-vfs-modules)
# etcd for the Kubernetes API server the chart's real install test runs against
# (`mcq stack up --with kubernetes`; kube-apiserver itself is built by `make kube`)
have_cmd etcd || need+=(etcd-server)

if [ ${#need[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if have_cmd sudo; then sudo="sudo"; else
    echo "system packages: missing ${need[*]} and not root (no sudo): install them, then rerun" >&2
    exit 1
  fi
fi

echo "system packages: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive  # slapd asks debconf questions otherwise
# The package postinst scripts must not start system-wide servers: the stack runs its own.
if ! $sudo apt-get install -y -q --no-install-recommends "${need[@]}"; then
  $sudo apt-get update -q
  $sudo apt-get install -y -q --no-install-recommends "${need[@]}"
fi
