#!/bin/sh
# Usage: integration/systemd_uml/boot.sh D
#
# Boots a User-Mode-Linux guest with Debian 12's systemd 252 as PID 1 and runs driver.py
# against the project's real systemd/nodeagent.service (see integration/test_systemd_uml.py).
# Exit status: the driver's (0: it ran to the end; the verdict is on the host, from D/results.json),
# 99 if the guest never reported one.
#
# D (an absolute, empty or fresh directory) is the only writable host path in the guest, mounted
# at the same path: the driver writes the agent's config, results.json, journal.txt and rc there.
# Guest: root = host / read-only (hostfs, so the checkout's .venv runs as is; not re-mounted
# writable, so the guest never writes into the checkout, not even __pycache__), tmpfs on /run /tmp
# /var/{log,tmp,cache,lib/systemd}, an empty tmpfs over /etc/systemd/system (a nodeagent.service
# installed on the host by `make install-systemd` would outrank /run/systemd/system), cgroup v2
# as mounted by systemd; one CPU, memory $UML_MEM (default 1G).
# NODEAGENT: the agent's executable (default <checkout>/.venv/bin/nodeagent); the test passes the
# one next to the Python that runs pytest. NODEAGENT_SDU_EXTRA_DROPIN: text of one more drop-in
# (90-extra.conf), e.g. "[Service]\nType=simple" to watch the test fail.
# The kernel is the one integration/run-in-uml.sh chooses and unpacks in $W (default
# <checkout>/.uml-work, shared with it): Debian 12's 6.1, or testing's where 6.1 cannot boot.
# Adapted from the verified recipe in shared/reference/real-kernel-testing/systemd-in-uml.
set -eu
[ "$#" -eq 1 ] || { echo "usage: $0 D" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
CHECKOUT=$(dirname "$(dirname "$HERE")")
D=$(cd "$1" && pwd)
W=${W:-$CHECKOUT/.uml-work}
MEM=${UML_MEM:-1G}
NODEAGENT=${NODEAGENT:-$CHECKOUT/.venv/bin/nodeagent}
[ -x "$NODEAGENT" ] || { echo "boot.sh: no $NODEAGENT (run 'make install')" >&2; exit 2; }
mkdir -p "$W"
W=$(cd "$W" && pwd)
[ -f "$W/.gitignore" ] || printf '*\n' > "$W/.gitignore"
# the kernel run-in-uml.sh chose for this host (6.1, or testing's where 6.1 cannot boot)
UML=$(W="$W" "$CHECKOUT/integration/run-in-uml.sh" --print-kernel) \
  || { echo "boot.sh: no UML kernel (see integration/run-in-uml.sh)" >&2; exit 99; }

# Units for /run/systemd/system: the real unit file byte for byte, our drop-in, target and driver.
U="$D/units"
rm -rf "$U"; mkdir -p "$U/nodeagent.service.d"
cp "$CHECKOUT/systemd/nodeagent.service" "$U/nodeagent.service"
for f in nodeagent-it.target nodeagent-it-driver.service nodeagent.service.d/50-integration.conf; do
  sed -e "s#@D@#$D#g" -e "s#@NODEAGENT@#$NODEAGENT#g" -e "s#@HERE@#$HERE#g" "$HERE/units/$f" > "$U/$f"
done
[ -z "${NODEAGENT_SDU_EXTRA_DROPIN:-}" ] \
  || printf '%b\n' "$NODEAGENT_SDU_EXTRA_DROPIN" > "$U/nodeagent.service.d/90-extra.conf"

# Units that fail or are pointless on a read-only hostfs root without network/modprobe: masked
# (in the guest's /run only). Generators cost ~0.3 s each in UML: all masked but the debug one.
MASK="systemd-binfmt.service proc-sys-fs-binfmt_misc.automount systemd-timesyncd.service
  systemd-random-seed.service systemd-update-utmp.service systemd-journal-flush.service
  systemd-modules-load.service modprobe@.service systemd-pstore.service apparmor.service"
GEN_MASK=$(cd /lib/systemd/system-generators && ls | grep -v '^systemd-debug-generator$' | tr '\n' ' ')
rm -f "$D/rc"
cat > "$D/init.sh" <<EOS
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc; mount -t sysfs sysfs /sys
mount -t tmpfs -o mode=755,nosuid,nodev tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
for d in /var/log /var/tmp /var/lib/systemd /var/cache /etc/systemd/system; do mount -t tmpfs tmpfs \$d; done
# the checkout again, read-only: a checkout under /tmp or /var/... is hidden by the tmpfs mounts above
mkdir -p "$CHECKOUT"; mount -r -t hostfs none "$CHECKOUT" -o "$CHECKOUT"
mkdir -p "$D"; mount -t hostfs none "$D" -o "$D"
mkdir -p /run/systemd/system; cp -r "$U"/* /run/systemd/system/
for u in $(echo $MASK); do ln -s /dev/null /run/systemd/system/\$u; done
mkdir -p /run/systemd/system-generators
for g in $GEN_MASK; do ln -s /dev/null /run/systemd/system-generators/\$g; done
export container=    # empty = not a container: host / has /.dockerenv, systemd would think it runs in docker
exec /lib/systemd/systemd
EOS
chmod +x "$D/init.sh"
"$UML" mem="$MEM" root=/dev/root rootfstype=hostfs rootflags=/ ro init="$D/init.sh" \
    con=null con0=null,fd:1 quiet systemd.unit=nodeagent-it.target systemd.show_status=error </dev/null || true
exit "$(cat "$D/rc" 2>/dev/null || echo 99)"
