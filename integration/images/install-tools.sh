#!/bin/sh
# Usage: integration/images/install-tools.sh
#
# Installs the Debian packages the image tests need, when missing (as root; nothing to do when all
# are there): runc, crun (OCI runtimes), skopeo (pulls and pushes over the distribution API),
# umoci (builds test images), docker-registry (a registry on loopback), busybox-static (the one
# static binary the test images hold), prometheus (the External metrics source the HPA tests query on
# loopback; started by the tests themselves). apt is kept from starting docker-registry's system service
# and prometheus's system services (a policy-rc.d for the duration, only if none exists). The UML guest (integration/run-in-uml.sh)
# sees the host's / read-only, so what is installed here is what the guest runs.
set -eu
missing=""
need() {  # need COMMAND PACKAGE
  if ! command -v "$1" >/dev/null 2>&1 || ! dpkg -s "$2" >/dev/null 2>&1; then missing="$missing $2"; fi
}
need runc runc
need crun crun
need skopeo skopeo
need umoci umoci
need docker-registry docker-registry
need busybox busybox-static
need prometheus prometheus
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-tools: missing$missing; run as root to install them" >&2
  exit 1
fi
made_policy=""
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=yes
fi
trap '[ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d' EXIT
echo "install-tools: installing$missing" >&2
export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1 \
  || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $missing >/dev/null; }
