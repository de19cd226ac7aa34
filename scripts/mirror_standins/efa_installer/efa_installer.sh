#!/bin/bash
# STAND-IN for AWS's efa_installer.sh (tests only; the real installer is unreachable from this network).
# Same command-line interface as the real one for the switches the efa role uses; instead of AWS's packages it
# installs Debian's rdma-core, ibverbs-providers (which carries the EFA verbs provider), libfabric and Open MPI,
# and lays them out where the real installer puts its own (/opt/amazon/efa, /opt/amazon/openmpi).
set -euo pipefail
VERSION="@VERSION@"
yes=0 minimal=0 skip_kmod=0 skip_limit=0 verify=1 gdr=0
usage() { echo "usage: $0 -y [--minimal] [--skip-kmod] [--skip-limit-conf] [--no-verify] [--enable-gdr]"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -y|--yes) yes=1 ;;
    -m|--minimal) minimal=1 ;;
    -k|--skip-kmod) skip_kmod=1 ;;
    -l|--skip-limit-conf) skip_limit=1 ;;
    -n|--no-verify) verify=0 ;;
    -g|--enable-gdr) gdr=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "efa_installer.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "efa_installer.sh: must run as root" >&2; exit 1; }
[ "$yes" = 1 ] || { echo "efa_installer.sh: refusing to prompt; pass -y" >&2; exit 1; }
if [ "$skip_kmod" = 0 ]; then
  echo "efa_installer.sh (stand-in): cannot build the EFA kernel module here; pass --skip-kmod" >&2
  exit 1
fi
packages="rdma-core ibverbs-providers libibverbs1"
[ "$minimal" = 1 ] || packages="$packages libfabric1 libfabric-bin libfabric-dev openmpi-bin libopenmpi-dev"
export DEBIAN_FRONTEND=noninteractive
# apt (2.6) does not try again a fetch that a proxy answered 503 or cut mid-file (Acquire::Retries covers
# connection failures only): the install is tried again, keeping what it already downloaded.
for attempt in 1 2 3 4 5; do
  # shellcheck disable=SC2086 # a list of package names, split on purpose
  apt-get install -y -q --no-install-recommends $packages >/dev/null && break
  [ "$attempt" -lt 5 ] || { echo "efa_installer.sh (stand-in): apt-get install failed 5 times" >&2; exit 1; }
  echo "efa_installer.sh (stand-in): apt-get install failed (attempt $attempt of 5); trying again" >&2
  sleep $(( attempt * 2 ))
done
multiarch="$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
if [ "$minimal" = 0 ]; then
  install -d /opt/amazon/efa/bin /opt/amazon/efa/lib /opt/amazon/efa/include
  for tool in /usr/bin/fi_info /usr/bin/fi_pingpong; do [ -e "$tool" ] && ln -sfn "$tool" /opt/amazon/efa/bin/; done
  for lib in /usr/lib/"$multiarch"/libfabric.so*; do ln -sfn "$lib" /opt/amazon/efa/lib/; done
  ln -sfn /usr/include/rdma /opt/amazon/efa/include/rdma
  install -d /opt/amazon/openmpi
  ln -sfn /usr/lib/"$multiarch"/openmpi/include /opt/amazon/openmpi/include
  ln -sfn /usr/lib/"$multiarch"/openmpi/lib /opt/amazon/openmpi/lib
  install -d /opt/amazon/openmpi/bin
  for tool in mpirun mpicc; do ln -sfn /usr/bin/"$tool" /opt/amazon/openmpi/bin/; done
  echo /opt/amazon/efa/lib > /etc/ld.so.conf.d/000_efa.conf
  ldconfig
fi
if [ "$skip_limit" = 0 ]; then
  printf '*\tsoft\tmemlock\tunlimited\n*\thard\tmemlock\tunlimited\n' > /etc/security/limits.d/01_efa.conf
fi
{
  echo "# EFA installer version: $VERSION"
  echo "# Stand-in: scripts/mirror_standins (Debian packages, not AWS's)"
  echo "# Options: minimal=$minimal skip_kmod=$skip_kmod skip_limit_conf=$skip_limit verify=$verify enable_gdr=$gdr"
  # shellcheck disable=SC2086 # a list of package names, split on purpose
  dpkg-query -W $packages
} > /opt/amazon/efa_installed_packages
if [ "$verify" = 1 ]; then
  fi_info -p efa -t FI_EP_RDM || { echo "efa_installer.sh: no EFA device found (fi_info -p efa)" >&2; exit 1; }
fi
echo "EFA installer $VERSION (stand-in) done"
