#!/usr/bin/env bash
# Usage: integration/container/run.sh [PYTEST ARGS...]          (make integration-container)
#
# Builds integration/Containerfile and runs the integration suite in a container with a private
# cgroup namespace; exits with the suite's (pytest's) exit status. Two paths, chosen by
# NODEAGENT_IT_DOCKER (default auto):
#
#   system  An ordinary host: cgroup v2 and a running docker. The image is built FROM debian:12 and
#           run with `docker run --privileged --cgroupns=private`. Nothing is installed or started.
#   local   Hosts like the development VMs (cgroup v1 hybrid, no docker daemon, a capability bounding
#           set without CAP_SYS_RESOURCE so that --privileged fails). As root: installs Debian's
#           docker.io and debootstrap if missing (without letting apt start a system docker), builds
#           a minbase bookworm root filesystem once (cached), starts a dockerd of its own (its own
#           data root, exec root, socket and pidfile; no iptables, no bridge), imports the root
#           filesystem as the base image, builds, runs with the capability workaround instead of
#           --privileged, and always (trap) stops that dockerd and removes what it created outside
#           the work dir (/sys/fs/cgroup/*/docker, /run/docker, /run/containerd, /opt/containerd).
#   auto    system when a docker daemon answers and /sys/fs/cgroup is a pure cgroup v2 mount, else local.
#
# Work dir (local path): $NODEAGENT_IT_CONTAINER_WORK, default <checkout>/.container-work (gitignored;
# `make clean` removes it): rootfs-bookworm.tar, docker/ (the dockerd's data root: base image, built
# image and build cache, so a second run is fast), dockerd.log, build.log.
# Other knobs: DEBIAN_MIRROR (debootstrap's mirror), PYTEST_ADDOPTS (passed into the container).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CHECKOUT=$(cd "$HERE/../.." && pwd)
IMAGE=nodeagent-it:latest
NAME=nodeagent-it-$$
MODE=${NODEAGENT_IT_DOCKER:-auto}
IN_CONTAINER=(integration/container/in-container.sh "$@")
ENV_ARGS=()
[ -n "${PYTEST_ADDOPTS:-}" ] && ENV_ARGS=(-e PYTEST_ADDOPTS)

say() { printf 'integration-container: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

if [ "$MODE" = auto ]; then
  if [ -f /sys/fs/cgroup/cgroup.controllers ] && command -v docker >/dev/null && docker info >/dev/null 2>&1; then
    MODE=system
  else
    MODE=local
  fi
fi

# ---- the standard path: an ordinary cgroup v2 host with a running docker ------------------------
if [ "$MODE" = system ]; then
  say "using the running docker (--privileged --cgroupns=private, base debian:12)"
  docker build -f "$CHECKOUT/integration/Containerfile" -t "$IMAGE" "$CHECKOUT"
  set +e
  docker run --rm --name "$NAME" --privileged --cgroupns=private --network none "${ENV_ARGS[@]}" \
    "$IMAGE" "${IN_CONTAINER[@]}"
  rc=$?
  say "suite exit status $rc"
  exit "$rc"
fi
[ "$MODE" = local ] || die "NODEAGENT_IT_DOCKER must be auto, system or local (got '$MODE')"

# ---- the local path: own dockerd, debootstrap base, capability workaround -------------------------
[ "$(id -u)" = 0 ] || die "the local path starts a dockerd and needs root (sudo make integration-container)"
CW=${NODEAGENT_IT_CONTAINER_WORK:-$CHECKOUT/.container-work}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_IMAGE=nodeagent-it-base:bookworm
ROOTFS_TAR=$CW/rootfs-bookworm.tar
SOCK=/run/nodeagent-it-docker.sock
EXEC_ROOT=/run/nodeagent-it-docker
PIDFILE=/run/nodeagent-it-docker.pid
DOCKER=/usr/bin/docker    # docker.io's client: the API of its dockerd (a newer CLI may come first on PATH)
# --privileged fails where the bounding set lacks CAP_SYS_RESOURCE: everything it grants but that.
WORKAROUND=(--cap-add ALL --cap-drop SYS_RESOURCE --security-opt apparmor=unconfined
            --security-opt seccomp=unconfined --security-opt systempaths=unconfined
            --device-cgroup-rule 'a *:* rwm')

mkdir -p "$CW"
CW=$(cd "$CW" && pwd)
[ -f "$CW/.gitignore" ] || printf '*\n' > "$CW/.gitignore"
d() { DOCKER_BUILDKIT=0 "$DOCKER" -H "unix://$SOCK" "$@"; }
# A long step runs as a child the shell waits for, so INT/TERM reach the trap at once, not after it.
CHILD=
waitfor() { "$@" & CHILD=$!; local rc=0; wait "$CHILD" || rc=$?; CHILD=; return "$rc"; }

MADE_POLICY=
DOCKERD_PID=
CGROUPS_BEFORE=" $(echo /sys/fs/cgroup/*/docker) "   # unexpanded glob when there are none
# Directories dockerd 20.10 and its containerd create at fixed places whatever the roots given (plugin
# sockets, shim sockets, containerd's opt plugin); removed after if they did not exist before.
FIXED_DIRS=(/run/docker /run/containerd /opt/containerd)
FIXED_BEFORE=" "
for p in "${FIXED_DIRS[@]}"; do [ -e "$p" ] && FIXED_BEFORE+="$p "; done

cleanup() {
  local rc=$? pid i f cmd p
  set +e
  trap - EXIT INT TERM
  if [ -n "$CHILD" ]; then    # interrupted: the running step, and the container if it was that
    kill -TERM "$CHILD" 2>/dev/null
    [ -n "$DOCKERD_PID" ] && d kill "$NAME" >/dev/null 2>&1
    wait "$CHILD" 2>/dev/null
  fi
  [ -n "$MADE_POLICY" ] && rm -f /usr/sbin/policy-rc.d
  # debootstrap interrupted: its proc/sys mounts in the target
  grep -o " $CW/rootfs[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m"; done
  if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    kill -TERM "$DOCKERD_PID"
    for i in $(seq 300); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$DOCKERD_PID" 2>/dev/null && { say "dockerd $DOCKERD_PID did not stop: SIGKILL"; kill -KILL "$DOCKERD_PID"; }
    wait "$DOCKERD_PID" 2>/dev/null
    say "dockerd $DOCKERD_PID stopped"
  fi
  # processes of that dockerd's tree still alive (containerd, shims after a SIGKILL): ours by path
  for f in /proc/[0-9]*/cmdline; do
    cmd=$(tr '\0' ' ' 2>/dev/null < "$f") || continue
    case "$cmd" in *"$EXEC_ROOT"*|*"$CW/docker"*) ;; *) continue ;; esac
    pid=${f#/proc/}; pid=${pid%/cmdline}
    say "stopping leftover process $pid: $cmd"
    kill -KILL "$pid" 2>/dev/null
  done
  grep -o -e " $EXEC_ROOT[^ ]*" -e " $CW/docker[^ ]*" /proc/mounts | sort -r | while read -r m; do
    umount -l "$m"    # dockerd leaves netns/default mounted; anything else after a crash
  done
  rm -rf "$EXEC_ROOT" "$SOCK" "$PIDFILE"
  for p in "${FIXED_DIRS[@]}"; do
    [ -d "$p" ] || continue
    case "$FIXED_BEFORE" in *" $p "*) continue ;; esac
    find "$p" -depth -type d -empty -delete 2>/dev/null   # empty directories only
    [ -e "$p" ] && say "left $p: not empty"
  done
  for cg in /sys/fs/cgroup/*/docker; do
    [ -d "$cg" ] || continue
    case "$CGROUPS_BEFORE" in *" $cg "*) continue ;; esac   # existed before: not ours
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null
    [ -d "$cg" ] && say "could not remove $cg (processes still in it?)"
  done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. docker.io and debootstrap, from Debian; policy-rc.d keeps apt from starting a system docker.
need=()
[ -x /usr/sbin/dockerd ] && [ -x "$DOCKER" ] || need+=(docker.io)
command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing ${need[*]}"
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    MADE_POLICY=1
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" > "$CW/apt.log" 2>&1 \
    || { tail -20 "$CW/apt.log" >&2; die "apt-get install ${need[*]} failed"; }
  [ -n "$MADE_POLICY" ] && rm -f /usr/sbin/policy-rc.d && MADE_POLICY=
fi

# 2. The base root filesystem, once: debootstrap minbase bookworm, kept as a tar.
if [ ! -s "$ROOTFS_TAR" ]; then
  say "debootstrap --variant=minbase bookworm from $MIRROR (once; log $CW/debootstrap.log)"
  rm -rf "$CW/rootfs"
  PATH=/usr/sbin:/sbin:$PATH waitfor debootstrap --variant=minbase bookworm "$CW/rootfs" "$MIRROR" \
    > "$CW/debootstrap.log" 2>&1 || { tail -20 "$CW/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$CW/rootfs/var/cache/apt/archives/"*.deb "$CW/rootfs/var/lib/apt/lists/"*
  tar --numeric-owner -C "$CW/rootfs" -cf "$ROOTFS_TAR.tmp" .
  mv "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"
  rm -rf "$CW/rootfs"
fi

# 3. A dockerd of our own. A previous run's that survived (its script was SIGKILLed) goes first.
if [ -s "$PIDFILE" ]; then
  old=$(cat "$PIDFILE")
  if grep -q -a -- "$SOCK" "/proc/$old/cmdline" 2>/dev/null; then
    say "stopping the dockerd $old a previous run left"
    kill -TERM "$old"
    for i in $(seq 300); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
fi
mkdir -p "$CW/docker"
# Its own config, so that /etc/docker/daemon.json is not read and the trust key it would write to
# /etc/docker/key.json stays in the work dir.
printf '{"deprecated-key-path": "%s"}\n' "$CW/key.json" > "$CW/daemon.json"
/usr/sbin/dockerd --data-root "$CW/docker" --exec-root "$EXEC_ROOT" -H "unix://$SOCK" --pidfile "$PIDFILE" \
  --config-file "$CW/daemon.json" --containerd-namespace nodeagent-it \
  --containerd-plugins-namespace nodeagent-it-plugins --iptables=false --ip-masq=false --bridge=none \
  > "$CW/dockerd.log" 2>&1 &
DOCKERD_PID=$!
for i in $(seq 600); do
  d version >/dev/null 2>&1 && break
  kill -0 "$DOCKERD_PID" 2>/dev/null || { tail -20 "$CW/dockerd.log" >&2; die "dockerd exited"; }
  sleep 0.1
done
d version >/dev/null 2>&1 || { tail -20 "$CW/dockerd.log" >&2; die "dockerd did not answer in 60 s"; }
say "dockerd $DOCKERD_PID up (socket $SOCK, data root $CW/docker)"

# 4. The base image, imported again only when the tar changed.
stamp=$(stat -c %Y "$ROOTFS_TAR")
if [ "$(d image inspect -f '{{index .Config.Labels "nodeagent.rootfs"}}' "$BASE_IMAGE" 2>/dev/null)" != "$stamp" ]; then
  say "docker import $ROOTFS_TAR as $BASE_IMAGE"
  d import --change "LABEL nodeagent.rootfs=$stamp" "$ROOTFS_TAR" "$BASE_IMAGE" >/dev/null
fi

# 5. The image (layer cache in the data root). The build needs the network: the host's, no bridge.
# CAs the host trusts that Debian's ca-certificates does not ship (e.g. a TLS-intercepting proxy's in
# front of PyPI, as on the development VMs) are trusted in the image too.
extra_ca=$(python3 -c '
import glob, re
pem = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)
shipped = {c for f in glob.glob("/usr/share/ca-certificates/**/*.crt", recursive=True)
           for c in pem.findall(open(f, errors="replace").read())}
host = pem.findall(open("/etc/ssl/certs/ca-certificates.crt", errors="replace").read())
print("\n".join(dict.fromkeys(c for c in host if c not in shipped)))
' 2>/dev/null) || extra_ca=
say "docker build (log $CW/build.log)${extra_ca:+, trusting $(grep -c BEGIN <<< "$extra_ca") CA certificate(s) of the host that Debian does not ship}"
waitfor d build --network host --build-arg "BASE=$BASE_IMAGE" --build-arg "EXTRA_CA_CERTS=$extra_ca" \
    -f "$CHECKOUT/integration/Containerfile" -t "$IMAGE" "$CHECKOUT" > "$CW/build.log" 2>&1 \
  || { tail -30 "$CW/build.log" >&2; die "docker build failed"; }
d image prune -f >/dev/null    # earlier builds' images, now untagged

# 6. The suite, in a private cgroup namespace, with the --privileged workaround.
say "docker run --cgroupns=private ${WORKAROUND[*]}"
rc=0
waitfor d run --rm --name "$NAME" --cgroupns=private --network none "${WORKAROUND[@]}" "${ENV_ARGS[@]}" \
  "$IMAGE" "${IN_CONTAINER[@]}" || rc=$?
say "suite exit status $rc"
exit "$rc"
