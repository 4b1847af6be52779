#!/bin/sh
# Usage: integration/run-in-uml.sh CMD [ARGS...]
#
# Runs CMD (as root, in the current directory) inside a User-Mode-Linux 6.1 guest whose only
# cgroup hierarchy is cgroup2 at /sys/fs/cgroup (controllers cpu io memory pids), so the cgroup v2
# code is exercised on a real kernel even on a cgroup v1 host. Exit status = CMD's exit status
# (99 if the guest never reported one).
#
# Guest: root = host / read-only (hostfs); fresh tmpfs on /tmp and /run; $PWD and $W re-mounted
# writable at the same paths; one CPU, HZ=100, no PSI; memory = $UML_MEM (default 1G).
# $W (default: <checkout>/.uml-work, self-gitignored) holds the unpacked user-mode-linux .deb
# (downloaded once with `apt-get download`, never installed) and the per-run scripts.
# The guest starts with an empty environment: PATH/HOME are set, PYTEST_ADDOPTS and NODEAGENT_*
# are passed through, and PYTEST_ADDOPTS gets `-p no:cacheprovider` (the guest's / is read-only).
#
#   integration/run-in-uml.sh .venv/bin/pytest integration -q
#   integration/run-in-uml.sh --print-kernel      # only choose (and fetch) the kernel, print its path
set -eu
[ "$#" -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
CHECKOUT=$(dirname "$HERE")
W=${W:-$CHECKOUT/.uml-work}
MEM=${UML_MEM:-1G}
mkdir -p "$W"
W=$(cd "$W" && pwd)
[ -f "$W/.gitignore" ] || printf '*\n' > "$W/.gitignore"
# The kernel: Debian 12's user-mode-linux (6.1) where it boots. On hosts whose CPUs have a larger
# XSAVE area (AVX-512, AMX) 6.1 panics at once ("userspace - ptrace set fp regs failed, errno = 14":
# it hands the host a fixed-size FP buffer, and the host refuses any size but its own); there the
# kernel of Debian testing (7.x) is used, which sizes the buffer from the host. It needs glibc >= 2.38,
# so testing's libc6 is unpacked beside it and named as its interpreter and rpath (patchelf, from
# Debian 12). Packages come through apt (signatures checked) and are only unpacked, never installed.
# The choice is made once per work dir, by booting each candidate, and kept in $W/kernel.
boots() { UML_KERNEL="$1" "$0" true >/dev/null 2>&1; }
if [ -n "${UML_KERNEL:-}" ]; then
  UML=$UML_KERNEL
else
  exec 9>"$W/.kernel.lock"; flock 9
  UML=$(cat "$W/kernel" 2>/dev/null || true)
  if [ -z "$UML" ] || [ ! -x "$UML" ]; then
    # testing's kernel first: the whole suite took 689-803 s under it against 907-1210 s under 6.1;
    # 6.1 when testing's cannot be fetched or does not boot
    T=$W/testing
      if [ ! -x "$T/linux.uml" ]; then
        (set -e; mkdir -p "$T/apt/lists/partial" "$T/apt/cache/archives/partial"
         cd "$T" && rm -f ./*.deb
         echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian testing main" \
           > apt/sources.list
         o="-o Dir::Etc::SourceList=$T/apt/sources.list -o Dir::Etc::SourceParts=/dev/null"
         o="$o -o Dir::State::Lists=$T/apt/lists -o Dir::Cache=$T/apt/cache"
         apt-get $o update -qq && apt-get $o download user-mode-linux libc6
         apt-get download patchelf 2>/dev/null || { apt-get update -qq && apt-get download patchelf; }
         for deb in ./*.deb; do dpkg -x "$deb" root; done
         lib=$T/root/usr/lib/x86_64-linux-gnu
         cp root/usr/bin/linux.uml linux.uml.new
         root/usr/bin/patchelf --set-interpreter "$lib/ld-linux-x86-64.so.2" --set-rpath "$lib" linux.uml.new
         mv linux.uml.new linux.uml) >&2 || echo "run-in-uml: testing's kernel could not be fetched" >&2
      fi
      UML=$T/linux.uml
      if [ ! -x "$UML" ] || ! boots "$UML"; then
        UML=$W/root/usr/bin/linux.uml                     # Debian 12's 6.1 (~41 MB)
        [ -x "$UML" ] || (cd "$W" && rm -f user-mode-linux_*.deb \
           && { apt-get download user-mode-linux 2>/dev/null \
                || { apt-get update -qq && apt-get download user-mode-linux; }; } \
           && dpkg -x user-mode-linux_*.deb root) >&2
        boots "$UML" || { echo "run-in-uml: no UML kernel boots on this host (tried testing's and 6.1)" >&2; exit 99; }
      fi
    echo "$UML" > "$W/kernel"
    echo "run-in-uml: kernel $UML" >&2
  fi
  exec 9>&-
fi
[ -x "$UML" ] || { echo "run-in-uml: no $UML (download failed?)" >&2; exit 99; }
[ "$1" = "--print-kernel" ] && { echo "$UML"; exit 0; }   # for systemd_uml/boot.sh: the same kernel
# overlayfs is a module in testing's kernel (built in 6.1's). The host has no kmod, so the guest
# loads it from the unpacked package with finit_module(2) (python3, ctypes).
MODS=""
for d in "$(dirname "$UML")/../lib/uml/modules" "$(dirname "$UML")/root/usr/lib/uml/modules"; do
  [ -d "$d" ] && { MODS=$(cd "$d" && pwd); break; }
done

RUN=$(mktemp -d "$W/run.XXXXXX")   # per-run files, so concurrent runs do not clash
trap 'rm -rf "$RUN"' EXIT
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }   # shell-quote one word
{
  printf 'cd %s || exit 98\n' "$(q "$PWD")"
  printf 'export PYTEST_ADDOPTS=%s\n' "$(q "${PYTEST_ADDOPTS:-} -p no:cacheprovider")"
  env | grep '^NODEAGENT_[A-Za-z0-9_]*=' | while IFS= read -r kv; do
    printf 'export %s=%s\n' "${kv%%=*}" "$(q "${kv#*=}")"
  done
  for a in "$@"; do printf '%s ' "$(q "$a")"; done
  printf '\n'
} > "$RUN/cmd.sh"
cat > "$RUN/init.sh" <<EOF
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc; mount -t sysfs sysfs /sys
mount -t tmpfs tmpfs /tmp; mount -t tmpfs tmpfs /run
for d in $(q "$PWD") $(q "$W"); do mkdir -p "\$d" 2>/dev/null; mount -t hostfs none "\$d" -o "\$d"; done
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mkdir -p /dev/pts; mount -t devpts devpts /dev/pts -o ptmxmode=0666 2>/dev/null || true   # kubectl exec -t: ptys
ko=$(q "$MODS")/\$(uname -r)/kernel/fs/overlayfs/overlay.ko
if ! grep -qw overlay /proc/filesystems && [ -f "\$ko" ]; then
  python3 -c 'import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
sys.exit(ctypes.CDLL(None, use_errno=True).syscall(313, fd, b"", 0) and ctypes.get_errno())' "\$ko" || true
fi
ip link set lo up 2>/dev/null || true
sh $(q "$RUN/cmd.sh"); echo \$? > $(q "$RUN/rc")
echo o > /proc/sysrq-trigger; sleep 10        # power off is async: keep PID 1 alive meanwhile
EOF
chmod +x "$RUN/init.sh"
"$UML" mem="$MEM" root=/dev/root rootfstype=hostfs rootflags=/ ro \
    init="$RUN/init.sh" con=null con0=null,fd:1 quiet </dev/null || true
rc=$(cat "$RUN/rc" 2>/dev/null || echo 99)
exit "$rc"
