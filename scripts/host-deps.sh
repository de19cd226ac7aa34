#!/usr/bin/env bash
# Install the system packages trainstack needs on the controller (and lab host).
# Refuses, before changing anything, unless run as root on Debian or Ubuntu; a second run installs nothing.
set -euo pipefail

# ansible-test sanity lints the shell scripts only where shellcheck is installed.
PACKAGES=(lxc lxc-templates lxc-dev debootstrap packer rsync iproute2 openssh-client openssh-server
          python3-venv make git curl ca-certificates apt-cacher-ng xz-utils buildah docker-registry
          shellcheck)

fail() { echo "host-deps: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || fail "must run as root (lab containers, bridges and packages need it); try: sudo make setup"
[ -r /etc/os-release ] || fail "cannot read /etc/os-release; supported hosts are Debian 12+ and Ubuntu 22.04+"
# shellcheck disable=SC1091
. /etc/os-release
case "${ID:-}" in
  debian|ubuntu) ;;
  *) fail "unsupported host OS '${ID:-unknown}': supported hosts are Debian 12+ and Ubuntu 22.04+" ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "host-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "host-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# apt-cacher-ng and sshd must not start as system services: the lab runs its own instances on the lab bridge
# (the package proxy, and the power service of elastic nodes).
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.trainstack
chmod 0755 /usr/sbin/policy-rc.d.trainstack
had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
[ "$had_policy" -eq 1 ] || cp /usr/sbin/policy-rc.d.trainstack /usr/sbin/policy-rc.d
trap '[ "$had_policy" -eq 1 ] || rm -f /usr/sbin/policy-rc.d; rm -f /usr/sbin/policy-rc.d.trainstack' EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
