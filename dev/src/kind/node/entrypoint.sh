#!/bin/bash
# Entrypoint of podkeeper's kind node image: prepares the privileged
# container for systemd, containerd and the kubelet, then execs init.
set -euo pipefail
log() { echo "podkeeper-node: $*" >&2; }

# systemd expects a read-only /sys in a container; --privileged makes it
# writable. Mounts must propagate for the kubelet's volumes.
mount -o remount,ro /sys
mount --make-rshared /

if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  # cgroup v2: the kubelet's /kubelet cgroup is made by kubelet.service.
  log "cgroup v2"
else
  # cgroup v1 with a private cgroup namespace (kind passes
  # --cgroupns=private): this container's cgroup is each hierarchy's root.
  # The kubelet gets its own roots, /kubelet and /kubelet.slice, each bound
  # onto itself so that systemd does not remove them before it starts.
  log "cgroup v1"
  if [ -d /sys/fs/cgroup/misc ]; then
    # runc on cgroup v1 does not handle the misc controller when nested.
    umount /sys/fs/cgroup/misc || true
    rmdir /sys/fs/cgroup/misc || true
  fi
  mount --make-rprivate /sys/fs/cgroup
  for hierarchy in $(findmnt -lun -o target -t cgroup); do
    for root in kubelet kubelet.slice; do
      mkdir -p "$hierarchy/$root"
      if [ "$(basename "$hierarchy")" = cpuset ]; then
        cat "$hierarchy/cpuset.cpus" > "$hierarchy/$root/cpuset.cpus"
        cat "$hierarchy/cpuset.mems" > "$hierarchy/$root/cpuset.mems"
      fi
      mount --bind "$hierarchy/$root" "$hierarchy/$root"
    done
  done
fi

# Every node needs its own machine id and product uuid.
rm -f /etc/machine-id
systemd-machine-id-setup >/dev/null
cat /proc/sys/kernel/random/uuid > /etc/podkeeper-product-uuid
for f in /sys/class/dmi/id/product_uuid /sys/devices/virtual/dmi/id/product_uuid; do
  if [ -f "$f" ]; then mount -o ro,bind /etc/podkeeper-product-uuid "$f"; fi
done

# Use the iptables backend that already holds rules in this network
# namespace (Docker wrote its DNS rules with the host's).
legacy=$(iptables-legacy-save 2>/dev/null | grep -c '^-' || true)
nft=$(iptables-nft-save 2>/dev/null | grep -c '^-' || true)
if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
update-alternatives --set iptables "/usr/sbin/iptables-$mode" >/dev/null
update-alternatives --set ip6tables "/usr/sbin/ip6tables-$mode" >/dev/null
log "iptables: $mode"

log "starting $*"
exec "$@"
