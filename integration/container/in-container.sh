#!/bin/sh
# The image's command (integration/Containerfile): run the integration suite against the cgroups
# of this container (private cgroup namespace). Arguments are added to pytest's command line.
#
# Excluded here: integration/test_systemd_uml.py and its integration/systemd_uml/ (they boot a
# User-Mode-Linux guest, downloading its kernel package on first use: run them on the host, `make
# integration`; the whole suite in a cgroup v2 guest is `make integration-v2`).
set -eu
cd "$(dirname "$0")/../.."

echo "== container: kernel $(uname -r), cgroups:"
grep -E ' cgroup2? ' /proc/self/mounts | awk '{print "   " $2, $3, $4}'
sed 's/^/   self: /' /proc/self/cgroup

# Docker mounts the cgroup filesystems read-only unless --privileged; the capability workaround
# used on hosts whose bounding set lacks CAP_SYS_RESOURCE (integration/container/run.sh) is not
# --privileged, so remount them writable (CAP_SYS_ADMIN and no AppArmor: allowed).
grep -E ' cgroup2? ' /proc/self/mounts | while read -r _ point _ opts _; do
  case ",$opts," in *,ro,*) mount -o remount,bind,rw "$point" && echo "   remounted $point rw" ;; esac
done

# cgroup v2: the namespace root is an ordinary (non-root) cgroup of the host, so the "no internal
# processes" rule applies: it cannot enable controllers for children while it holds processes
# itself. Move this container's processes into a leaf, as systemd and kind do; the agent's and the
# tests' cgroups then go beside it.
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -q . /sys/fs/cgroup/cgroup.procs \
   && ! grep -q . /sys/fs/cgroup/cgroup.subtree_control; then
  mkdir -p /sys/fs/cgroup/init
  for pid in $(cat /sys/fs/cgroup/cgroup.procs); do
    echo "$pid" > /sys/fs/cgroup/init/cgroup.procs 2>/dev/null || true   # gone already: fine
  done
  echo "   moved this container's processes to /sys/fs/cgroup/init (no internal processes rule)"
fi

exec .venv/bin/pytest integration -q -p no:cacheprovider \
  --ignore=integration/test_systemd_uml.py --ignore=integration/systemd_uml "$@"
