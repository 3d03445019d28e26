#!/bin/bash
# guest.sh -- the kernel and initramfs of a real Linux guest for
# e2e/guest_test.go: Debian's linux-image-amd64 kernel and a busybox
# initramfs holding a wattrace exporter built without cgo. Adapted from the
# project's verified test-bed recipe (guest-9p.sh).
#
#   ./guest.sh build WORKDIR EXPORTER [ARGS...]
#       WORKDIR/vmlinuz and WORKDIR/initrd.gz. The guest's init mounts
#       proc, sys, cgroup2 and the host's share (virtio-9p, mount tag
#       wattrace) read-only at /run/wattrace/host, loads the virtio vsock
#       transport (for a share read over vsock instead, when the domain has
#       a vsock device and no 9p share) and the vsock loopback and
#       vhost-vsock modules (for a host's side of vsock tested inside the
#       guest, which this machine's kernel lacks), brings up eth0 for QEMU's user
#       network (10.0.2.15), waits up to 120 s for the share's metadata
#       when the 9p share is mounted, then runs `wattrace ARGS...` (its log
#       on the serial console) and powers off when it ends.
#
# The kernel comes from the installed linux-image package when there is
# one, else from `apt-get download` (nothing is installed); busybox from
# busybox-static the same way. Touches nothing outside WORKDIR.
set -euo pipefail
cmd=${1:?build}; W=${2:?workdir}
log() { echo "[$(date +%T)] $*" >&2; }

case $cmd in
build)
  BIN=${3:?exporter binary}; shift 3
  mkdir -p "$W" && cd "$W"
  rm -rf root deb && mkdir -p root/bin root/mods root/proc root/sys root/dev root/run/wattrace/host root/tmp deb
  kver() { apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'; }
  K=$(kver)
  if [ -z "$K" ]; then   # a fresh machine: no package lists yet
    flock /tmp/lock.apt timeout 300 apt-get update -q >/dev/null; K=$(kver)
  fi
  K=${K#linux-image-}
  [ -n "$K" ] || { log "cannot tell linux-image-amd64's kernel version (apt-cache)"; exit 1; }
  if [ -f "/boot/vmlinuz-$K" ] && [ -d "/lib/modules/$K/kernel" ]; then
    KROOT=/; log "kernel $K: installed"
  else
    log "kernel $K: apt-get download linux-image-$K"
    (cd deb && flock /tmp/lock.apt timeout 600 apt-get download -q "linux-image-$K" >/dev/null)
    mkdir -p k && dpkg-deb -x deb/linux-image-"${K}"_*.deb k
    KROOT=$W/k
  fi
  cp "$KROOT/boot/vmlinuz-$K" vmlinuz
  if dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then
    cp /bin/busybox root/bin/
  else
    (cd deb && flock /tmp/lock.apt timeout 300 apt-get download -q busybox-static >/dev/null)
    mkdir -p bb && dpkg-deb -x deb/busybox-static_*.deb bb && cp bb/bin/busybox root/bin/
  fi
  M=$KROOT/lib/modules/$K/kernel
  MODS="drivers/virtio/virtio drivers/virtio/virtio_ring drivers/virtio/virtio_pci_modern_dev
        drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache
        net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p net/core/failover drivers/net/net_failover drivers/net/virtio_net
        net/vmw_vsock/vsock net/vmw_vsock/vmw_vsock_virtio_transport_common net/vmw_vsock/vmw_vsock_virtio_transport
        net/vmw_vsock/vsock_loopback drivers/vhost/vhost_iotlb drivers/vhost/vhost drivers/vhost/vhost_vsock"
  for m in $MODS; do
    if [ -f "$M/$m.ko" ]; then cp "$M/$m.ko" root/mods/
    elif [ -f "$M/$m.ko.xz" ]; then xz -dc "$M/$m.ko.xz" > "root/mods/$(basename "$m").ko"
    else log "module $m not in $M (built in?)"; fi
  done
  cp "$BIN" root/bin/wattrace
  args=""
  for a in "$@"; do args="$args '$a'"; done
  cat > root/init <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
mkdir -p /sys/fs/cgroup && mount -t cgroup2 none /sys/fs/cgroup
for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p failover net_failover virtio_net vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport vsock_loopback vhost_iotlb vhost vhost_vsock; do
  [ -f /mods/\$m.ko ] && { insmod /mods/\$m.ko || echo "guest: insmod \$m failed"; }
done
share=9p
mount -t 9p -o trans=virtio,version=9p2000.L,ro wattrace /run/wattrace/host || { share=none; echo "guest: no 9p share (a share over vsock needs none)"; dmesg | tail -5; }
ip link set lo up; ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2
if [ \$share = 9p ]; then
  echo "guest: up, waiting for the host share"
  n=0; while [ ! -f /run/wattrace/host/meta ] && [ \$n -lt 1200 ]; do sleep 0.1; n=\$((n+1)); done
  ls -l /run/wattrace/host
fi
echo "guest: starting wattrace"
/bin/wattrace $args
echo "guest: wattrace exited \$?"
poweroff -f
INIT
  chmod +x root/init
  (cd root && find . | ../root/bin/busybox cpio -o -H newc 2>/dev/null | gzip -1 > ../initrd.gz)
  log "built $W/vmlinuz ($K) and $W/initrd.gz ($(du -h initrd.gz | cut -f1))"
  ;;
*) echo "usage: guest.sh build WORKDIR EXPORTER [ARGS...]" >&2; exit 2 ;;
esac
