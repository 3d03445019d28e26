#!/bin/bash
# libvirt.sh -- real libvirt-managed QEMU (TCG) VMs for wattrace's end-to-end
# tests (e2e/libvirt_test.go), on a host WITHOUT systemd (PID 1 is not
# systemd, no dbus, no machined). Adapted from the project's verified
# test-bed recipe.
#
#   ./libvirt.sh setup      # install (if needed), start virtlogd+libvirtd, define+start VMs
#   ./libvirt.sh daemons    # install (if needed), start virtlogd+libvirtd only (the
#                           # guest test defines its own domain, $GUEST_VM)
#   ./libvirt.sh status     # print pid / cgroup / uuid / xml paths / cpu use of the VMs
#   ./libvirt.sh teardown   # destroy+undefine VMs, stop the libvirtd+virtlogd this
#                           # script started (by PID), rmdir cgroups, remove $STATE
#   ./libvirt.sh purge      # teardown + apt-get purge of the packages (optional)
#
# Every step is bounded with `timeout` (worst case setup < 12 min incl. apt,
# < 4 min without). Measured on a 2-vCPU VM: apt-get install ~17 s; first
# libvirtd start ~9-12 s (QEMU capability probe, cached afterwards in
# /var/cache/libvirt/qemu/capabilities); define+start of both VMs ~1-2 s;
# teardown 3-6 s. Run as root. Touches: /etc/libvirt/qemu.conf (2 lines,
# removed by teardown), $WORKDIR, $STATE (logs, PIDs of the daemons started).
#
# Cgroups (no systemd): /sys/fs/cgroup/{cpu,cpuset}/machine/qemu-N-NAME.libvirt-qemu/
# {emulator,vcpu0} and the same under unified/, whose cpu.stat has the usage.
#
# VMs created (names overridable through env):
#   $IDLE_VM  (default wattrace-e2e-idle): no disk, no kernel -> sits in SeaBIOS
#             ("No bootable device", HLT) -> ~0.5 % of one host CPU.
#   $BURN_VM  (default wattrace-e2e-burn): no disk, -kernel = 8 KiB multiboot image
#             that runs `inc eax; jmp .-1` forever -> 100 % of one host CPU (TCG
#             vCPU thread), optionally capped with BURN_QUOTA_US (cfs quota per
#             100 ms period).
# Each has 1 vCPU and 64 MiB unless IDLE_VCPUS / IDLE_MEM_MIB and
# BURN_VCPUS / BURN_MEM_MIB say otherwise (the burner's extra vCPUs stay
# halted: its image runs on the first).
set -u
export LIBVIRT_DEFAULT_URI=qemu:///system
IDLE_VM=${IDLE_VM:-wattrace-e2e-idle}
BURN_VM=${BURN_VM:-wattrace-e2e-burn}
GUEST_VM=${GUEST_VM:-wattrace-e2e-guest}  # e2e/guest_test.go's Linux guest
BURN_QUOTA_US=${BURN_QUOTA_US:-}          # e.g. 50000 -> burner capped at 50 % of a CPU
IDLE_VCPUS=${IDLE_VCPUS:-1}; IDLE_MEM_MIB=${IDLE_MEM_MIB:-64}
BURN_VCPUS=${BURN_VCPUS:-1}; BURN_MEM_MIB=${BURN_MEM_MIB:-64}
WORKDIR=${LIBVIRT_E2E_WORKDIR:-/var/lib/libvirt/images/wattrace-e2e}
STATE=${LIBVIRT_E2E_STATE:-/tmp/wattrace-e2e-libvirt}
LOG=${LIBVIRT_E2E_LOG:-$STATE/libvirtd.log}
PKGS="libvirt-daemon-system libvirt-clients qemu-system-x86"

log() { echo "[$(date +%T)] $*" >&2; }

wait_pid_gone() {  # pid, tenths of a second
  local p=$1 n=${2:-100}
  while [ "$n" -gt 0 ] && kill -0 "$p" 2>/dev/null; do sleep 0.1; n=$((n-1)); done
  ! kill -0 "$p" 2>/dev/null
}

install_pkgs() {
  if [ -x /usr/sbin/libvirtd ] && [ -x /usr/bin/qemu-system-x86_64 ] && command -v virsh >/dev/null; then
    return 0
  fi
  log "installing $PKGS"
  mkdir -p "$STATE"
  local made_policy=0 rc try
  # keep postinst scripts from launching libvirtd/virtlogd through the SysV
  # init scripts: the daemons we stop must be the ones we started
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1; fi
  for try in 1 2; do
    if [ $try = 2 ] || ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
      timeout 180 apt-get update -q >>"$STATE/apt.log" 2>&1
    fi
    DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -q -o DPkg::Lock::Timeout=120 \
        --no-install-recommends $PKGS >>"$STATE/apt.log" 2>&1
    rc=$?
    [ $rc = 0 ] && break
  done
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { log "apt-get failed rc=$rc, see $STATE/apt.log"; tail -5 "$STATE/apt.log" >&2; return 1; }
}

QEMU_CONF=/etc/libvirt/qemu.conf
MARK="# e2e-libvirt-run-qemu-as-root"
patch_qemu_conf() {
  # PITFALL: /dev/kvm exists but is 0600 root:root here. The QEMU capability probe
  # sees KVM, but libvirtd then finds KVM "not usable" for user libvirt-qemu and
  # declares the capability cache outdated on EVERY lookup -> every virsh
  # define/start/domcapabilities re-probes QEMU (4 s idle, 30+ s on a loaded
  # 2-CPU box; virsh calls then time out). Running QEMU as root makes the cache
  # valid (libvirtd ready in 0.5 s, define/start < 1 s).
  # Alternative (not used: global device change): chgrp kvm /dev/kvm; chmod 0660 /dev/kvm
  grep -qF "$MARK" "$QEMU_CONF" || printf '%s\nuser = "root"\ngroup = "root"\n' "$MARK" >> "$QEMU_CONF"
}
unpatch_qemu_conf() {
  [ -f "$QEMU_CONF" ] && sed -i "/^$MARK\$/,+2d" "$QEMU_CONF"
}

# alive PIDFILE -> echo the pid if the pidfile names a live process
alive() { local p; p=$(tr -dc '0-9' 2>/dev/null < "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"; }

# ours NAME -> echo the pid of daemon NAME if this script started it (its pid
# is recorded in $STATE/NAME.pid) and it still runs
ours() {
  local p q
  p=$(alive "/run/$1.pid") || return 1
  q=$(tr -dc '0-9' 2>/dev/null < "$STATE/$1.pid")
  [ "$p" = "$q" ] && echo "$p"
}

start_daemons() {
  patch_qemu_conf
  mkdir -p "$STATE"
  if ! alive /run/virtlogd.pid >/dev/null; then
    log "starting virtlogd"
    timeout 20 /usr/sbin/virtlogd -d || return 1      # pidfile: /run/virtlogd.pid
    cp /run/virtlogd.pid "$STATE/virtlogd.pid"
  fi
  if ! alive /run/libvirtd.pid >/dev/null; then
    log "starting libvirtd (log: $LOG)"
    LIBVIRT_LOG_OUTPUTS="3:file:$LOG" timeout 20 /usr/sbin/libvirtd -d || return 1   # pidfile: /run/libvirtd.pid
    cp /run/libvirtd.pid "$STATE/libvirtd.pid"
  fi
  local i
  for i in $(seq 1 6); do              # <= 90 s (first start probes QEMU caps: ~10 s)
    timeout 15 virsh version >/dev/null 2>&1 && { log "libvirtd ready"; return 0; }
    sleep 0.5
  done
  log "libvirtd did not answer in 90 s"; return 1
}

# 8 KiB multiboot (a.out kludge) flat image, no python needed. Header:
# magic 0x1BADB002, flags 0x00010000, checksum, header/load addr 0x100000,
# load_end/bss_end 0, entry 0x100020; code: cli; xor eax,eax; 1: inc eax; jmp 1b
make_burner() {
  mkdir -p "$WORKDIR"
  { printf '\x02\xb0\xad\x1b\x00\x00\x01\x00\xfe\x4f\x51\xe4\x00\x00\x10\x00\x00\x00\x10\x00'
    printf '\x00\x00\x00\x00\x00\x00\x00\x00\x20\x00\x10\x00\xfa\x31\xc0\x40\xeb\xfd'
    head -c 8154 /dev/zero; } > "$WORKDIR/burn.mb"
  [ "$(stat -c %s "$WORKDIR/burn.mb")" = 8192 ]
}

domain_xml() {  # name vcpus memory_mib [kernel]
  local name=$1 vcpus=$2 mem=$3 kernel=${4:-} k="" tune=""
  [ -n "$kernel" ] && k="<kernel>$kernel</kernel>"
  [ -n "$kernel" ] && [ -n "$BURN_QUOTA_US" ] && \
    tune="<cputune><period>100000</period><quota>$BURN_QUOTA_US</quota></cputune>"
  cat <<EOF
<domain type='qemu'>
  <name>$name</name>
  <memory unit='MiB'>$mem</memory>
  <vcpu>$vcpus</vcpu>
  $tune
  <os><type arch='x86_64' machine='pc'>hvm</type>$k</os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <memballoon model='none'/>
  </devices>
</domain>
EOF
}

start_vm() {  # name vcpus memory_mib [kernel]
  local name=$1
  domain_xml "$@" > "$WORKDIR/$name.xml"
  timeout 30 virsh define "$WORKDIR/$name.xml" >/dev/null || return 1
  timeout 60 virsh start "$name" >/dev/null || return 1
  log "started $name pid=$(cat /run/libvirt/qemu/$name.pid)"
}

status() {
  local n p cg u0 u1 hz
  hz=$(getconf CLK_TCK)
  for n in "$IDLE_VM" "$BURN_VM"; do
    [ -f "/run/libvirt/qemu/$n.pid" ] || { echo "$n: not running"; continue; }
    p=$(cat "/run/libvirt/qemu/$n.pid")
    cg=$(awk -F: '$2 ~ /(^|,)cpu(,|$)/ {print $3}' /proc/$p/cgroup)     # /machine/qemu-<id>-<name>.libvirt-qemu/emulator
    echo "$n: pid=$p uuid=$(timeout 10 virsh domuuid "$n" | head -1)"
    echo "   cmdline: $(tr '\0' ' ' </proc/$p/cmdline | grep -o -- '-name [^ ]*\|-uuid [^ ]*' | tr '\n' ' ')"
    echo "   /proc/$p/cgroup cpu: $cg"
    echo "   cgroup dirs: $(ls -d /sys/fs/cgroup/*/machine/qemu-*-"$n".libvirt-qemu 2>/dev/null | tr '\n' ' ')"
    echo "   xml: /etc/libvirt/qemu/$n.xml (persistent <domain>), /run/libvirt/qemu/$n.xml (<domstatus pid=..><domain ...>)"
    u0=$(awk '{print $14+$15}' /proc/$p/stat); sleep 2; u1=$(awk '{print $14+$15}' /proc/$p/stat)
    echo "   cpu over 2 s: $(( (u1-u0)*100/hz/2 ))% of one CPU"
  done
}

teardown() {
  local n p lp vp d
  if alive /run/libvirtd.pid >/dev/null; then
    for n in "$IDLE_VM" "$BURN_VM" "$GUEST_VM"; do
      p=$(cat "/run/libvirt/qemu/$n.pid" 2>/dev/null)
      timeout 30 virsh destroy "$n" >/dev/null 2>&1
      timeout 30 virsh undefine "$n" >/dev/null 2>&1
      # belt and braces: qemu must be gone (kill by PID only)
      if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill "$p"; wait_pid_gone "$p" 50 || kill -9 "$p"; fi
    done
    if lp=$(ours libvirtd); then
      log "stopping libvirtd $lp"
      kill "$lp"; wait_pid_gone "$lp" 100 || kill -9 "$lp"
    else
      log "libvirtd $(alive /run/libvirtd.pid) was not started by this script: left running"
    fi
  else
    # libvirtd not running: kill leftover qemu of our VMs via their pid files
    for n in "$IDLE_VM" "$BURN_VM" "$GUEST_VM"; do
      p=$(cat "/run/libvirt/qemu/$n.pid" 2>/dev/null)
      if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then kill "$p"; wait_pid_gone "$p" 50 || kill -9 "$p"; fi
      rm -f /run/libvirt/qemu/$n.pid /run/libvirt/qemu/$n.xml /etc/libvirt/qemu/$n.xml
      rm -rf /var/lib/libvirt/qemu/domain-*-"$n" /var/lib/libvirt/qemu/channel/target/domain-*-"$n"
    done
  fi
  if vp=$(ours virtlogd); then
    log "stopping virtlogd $vp"
    kill "$vp" 2>/dev/null; wait_pid_gone "$vp" 100 || kill -9 "$vp" 2>/dev/null
  elif alive /run/virtlogd.pid >/dev/null; then
    log "virtlogd $(alive /run/virtlogd.pid) was not started by this script: left running"
  fi
  # cgroups: libvirt removes the per-VM dirs on destroy, but leaves the /machine
  # partition in every hierarchy. rmdir only removes EMPTY dirs, so this is safe.
  for d in /sys/fs/cgroup/*/machine/qemu-*-"$IDLE_VM".libvirt-qemu /sys/fs/cgroup/*/machine/qemu-*-"$BURN_VM".libvirt-qemu \
           /sys/fs/cgroup/*/machine/qemu-*-"$GUEST_VM".libvirt-qemu; do
    [ -d "$d" ] || continue
    rmdir "$d"/vcpu* "$d"/emulator 2>/dev/null; rmdir "$d" 2>/dev/null
  done
  for d in /sys/fs/cgroup/*/machine; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
  rm -rf "$WORKDIR" "$STATE" /var/log/libvirt/qemu/"$IDLE_VM".log /var/log/libvirt/qemu/"$BURN_VM".log \
         /var/log/libvirt/qemu/"$GUEST_VM".log
  unpatch_qemu_conf
  log "teardown done; leftovers: $(ls -d /sys/fs/cgroup/*/machine 2>/dev/null | tr '\n' ' ')"
}

fail() { log "FAILED: $* -- tearing down"; teardown; exit 1; }

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
case "${1:-}" in
  setup)
    t0=$(date +%s)
    install_pkgs || { log "install failed"; exit 1; }
    start_daemons || fail "libvirtd start"
    make_burner || fail "burner image"
    start_vm "$IDLE_VM" "$IDLE_VCPUS" "$IDLE_MEM_MIB" || fail "start $IDLE_VM"
    start_vm "$BURN_VM" "$BURN_VCPUS" "$BURN_MEM_MIB" "$WORKDIR/burn.mb" || fail "start $BURN_VM"
    log "setup took $(( $(date +%s) - t0 )) s"
    status ;;
  daemons)
    install_pkgs || { log "install failed"; exit 1; }
    start_daemons || fail "libvirtd start" ;;
  status) status ;;
  teardown) teardown ;;
  purge)
    teardown
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get purge -y -qq $PKGS >/dev/null
    DEBIAN_FRONTEND=noninteractive timeout 300 apt-get autoremove -y -qq --purge >/dev/null ;;
  *) echo "usage: $0 setup|daemons|status|teardown|purge" >&2; exit 2 ;;
esac
