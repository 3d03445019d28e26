#!/bin/bash
# Single-node SLURM (Debian 12 packages, Slurm 22.05) for wattrace's
# end-to-end tests (e2e/slurm_test.go), on a host without systemd and with a
# hybrid cgroup layout (v1 controllers + cgroup2 at /sys/fs/cgroup/unified).
# Uses cgroup/v1 (v2 is impossible here: slurmd refuses hybrid mode).
# Adapted from the project's verified test-bed recipe.
#
#   slurm.sh up       install (if needed), write config, start munged,
#                     slurmctld, slurmd; wait until the node is idle
#   slurm.sh reset    down + wipe slurmctld/slurmd state + up: job ids
#                     restart at 1, no ghost jobs (use after a crash)
#   slurm.sh test     submit srun + sbatch jobs, print their cgroups/env
#   slurm.sh status
#   slurm.sh down     cancel jobs, stop daemons (by pidfile PID only),
#                     kill leftover job processes (by PID, found in the
#                     job cgroups), rmdir the slurm cgroups
#   slurm.sh clean    down + remove state, logs, config and $WORKDIR
#                     (packages stay installed: a later up takes seconds)
#   slurm.sh purge    clean + purge packages
#
# Job cgroups: /sys/fs/cgroup/<controller>/slurm_<node>/uid_<uid>/job_<id>/
# step_<n>/task_<k> (cpuacct, memory, cpuset, freezer).  Every task has
# SLURM_JOB_ID in its environment.
#
# SLURM_E2E_ACCOUNTING=1 (e2e/units_test.go) adds job accounting: MariaDB
# (mariadbd started by hand, database slurm_acct_db), slurmdbd,
# AccountingStorageType=accounting_storage/slurmdbd, JWT auth for
# slurmrestd, the cluster registered; then
#   slurm.sh users          Unix users alice, bob (accounts proj_a, proj_b)
#                           and carol (proj_a, Slurm admin)
#   slurm.sh restd [ADDR]   slurmrestd (rest_auth/jwt, as nobody) on ADDR
#                           (127.0.0.1:6820); a token: scontrol token username=alice
# Without it the cluster is configured exactly as before.
#
# Every wait is bounded; every step is idempotent.  Must run as root.
set -u
NODE=${SLURM_E2E_NODE:-localhost}
CPUS=${SLURM_E2E_CPUS:-$(nproc)}
MEM_MB=${SLURM_E2E_MEM_MB:-1024}       # must be <= real memory or the node drains
CGROUP_PLUGIN=${SLURM_E2E_CGROUP_PLUGIN:-cgroup/v1}   # autodetect also picks v1 here
ETC=/etc/slurm
PKGS="slurmd slurmctld slurm-client munge"
CG_PREFIX="slurm_${NODE}"     # Debian builds with --enable-multiple-slurmd => /slurm_%n
CG_ROOT=/sys/fs/cgroup
WORKDIR=${SLURM_E2E_WORKDIR:-/tmp/wattrace-e2e-slurm}   # apt and test logs
# SLURM_E2E_GPUS=1 (e2e/slurm_gpu_test.go): two fake GPUs as a GRES,
# character devices with /dev/null's numbers, so jobs that ask
# --gres=gpu:N get SLURM_JOB_GPUS without a real GPU. Off by default: the
# other tests' cluster is configured exactly as before.
GPUS=${SLURM_E2E_GPUS:-0}
FAKE_GPUS="/dev/wattrace-e2e-gpu0 /dev/wattrace-e2e-gpu1"
ACCOUNTING=${SLURM_E2E_ACCOUNTING:-0}
[ "$ACCOUNTING" = 1 ] && PKGS="$PKGS slurmdbd slurmrestd slurm-wlm-jwt-plugin mariadb-server"
JWT_KEY=/var/spool/slurmctld/jwt_hs256.key

log() { echo "[slurm.sh $(date +%T)] $*" >&2; }

# running PID: exists and is not a zombie.  PID 1 on this machine reaps
# orphans only every few seconds, so a killed daemon lingers as <defunct>
# with the same comm; kill -0 and /proc/PID/comm alone would say "alive".
running() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# pid_alive PIDFILE COMM -> echo pid if the pidfile names a live process with that comm
pid_alive() {
  local f=$1 comm=$2 p
  [ -r "$f" ] || return 1
  p=$(tr -dc '0-9' < "$f")
  [ -n "$p" ] && [ "$(cat /proc/$p/comm 2>/dev/null)" = "$comm" ] && running "$p" && { echo "$p"; return 0; }
  return 1
}

# stop_pidfile PIDFILE COMM: TERM, wait <=10 s, then KILL
stop_pidfile() {
  local f=$1 comm=$2 p i
  p=$(pid_alive "$f" "$comm") || { rm -f "$f"; return 0; }
  log "stopping $comm pid $p"
  kill -TERM "$p" 2>/dev/null
  for i in $(seq 100); do running "$p" || break; sleep 0.1; done
  running "$p" && { log "$comm $p did not exit, SIGKILL"; kill -KILL "$p" 2>/dev/null; sleep 0.5; }
  rm -f "$f"
}

install_pkgs() {
  local missing=""
  for p in $PKGS; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing="$missing $p"; done
  [ -z "$missing" ] && return 0
  log "installing:$missing"
  local made_policy=0
  # keep postinst scripts from launching the SysV init scripts
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; made_policy=1; fi
  mkdir -p "$WORKDIR"
  # a stale package list (fresh image) gives 404s: update first, and once
  # more if the install still fails
  local rc try
  for try in 1 2; do
    if [ $try = 2 ] || ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1; then
      timeout 180 apt-get update -q >>"$WORKDIR/apt.log" 2>&1
    fi
    DEBIAN_FRONTEND=noninteractive timeout 400 apt-get -q -o DPkg::Lock::Timeout=120 \
        install -y --no-install-recommends $PKGS >>"$WORKDIR/apt.log" 2>&1
    rc=$?
    [ $rc = 0 ] && break
  done
  [ $made_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $rc = 0 ] || { log "apt-get failed rc=$rc, see $WORKDIR/apt.log"; tail -5 "$WORKDIR/apt.log" >&2; return 1; }
}

write_config() {
  mkdir -p "$ETC" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  local gres="" grestypes=""
  rm -f "$ETC/gres.conf"
  local accounting=AccountingStorageType=accounting_storage/none
  if [ "$ACCOUNTING" = 1 ]; then
    accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY"
  fi
  if [ "$GPUS" = 1 ]; then
    for d in $FAKE_GPUS; do [ -e "$d" ] || mknod -m 0666 "$d" c 1 3; done
    echo "Name=gpu File=/dev/wattrace-e2e-gpu[0-1]" > "$ETC/gres.conf"
    gres="Gres=gpu:2" grestypes="GresTypes=gpu"
  fi
  cat > "$ETC/slurm.conf.new" <<EOF
ClusterName=e2e
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
# jobacct_gather/cgroup is what creates the cpuacct + memory job cgroups
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=30
${accounting}
JobCompType=jobcomp/none
# Contain => an extern step (step_extern cgroup) per job
PrologFlags=Contain
# never re-run batch jobs after an unclean restart (default 1 would requeue+rerun them)
JobRequeue=0
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=300
Waittime=0
${grestypes}
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${MEM_MB} ${gres} State=UNKNOWN
PartitionName=debug Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  cat > "$ETC/cgroup.conf.new" <<EOF
CgroupPlugin=${CGROUP_PLUGIN}
CgroupMountpoint=/sys/fs/cgroup
ConstrainCores=yes
ConstrainRAMSpace=no
ConstrainDevices=no
EOF
  if cmp -s "$ETC/slurm.conf.new" "$ETC/slurm.conf" && cmp -s "$ETC/cgroup.conf.new" "$ETC/cgroup.conf"; then
    rm -f "$ETC/slurm.conf.new" "$ETC/cgroup.conf.new"; return 0
  fi
  mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
  mv "$ETC/cgroup.conf.new" "$ETC/cgroup.conf"
  # config changed: running daemons must be restarted to pick it up
  stop_pidfile /run/slurmd.pid slurmd
  stop_pidfile /run/slurmctld.pid slurmctld
}

start_munge() {
  pid_alive /run/munge/munged.pid munged >/dev/null && return 0
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge /etc/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=128 count=1 status=none
    chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
  fi
  # --force: tolerate a stale socket left by an unclean stop
  runuser -u munge -- /usr/sbin/munged --force || { log "munged failed"; return 1; }
  local i; for i in $(seq 50); do munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "munge not answering"; return 1
}

# start_accounting: MariaDB, the accounting database, slurmdbd, the cluster.
start_accounting() {
  [ "$ACCOUNTING" = 1 ] || return 0
  if [ ! -s "$JWT_KEY" ]; then
    mkdir -p "$(dirname "$JWT_KEY")"
    dd if=/dev/urandom of="$JWT_KEY" bs=32 count=1 status=none; chmod 0600 "$JWT_KEY"
  fi
  if ! timeout 5 mariadb -e 'select 1' >/dev/null 2>&1; then
    install -d -o mysql -g mysql /run/mysqld
    [ -d /var/lib/mysql/mysql ] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null 2>&1
    runuser -u mysql -- /usr/sbin/mariadbd --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock \
      --pid-file=/run/mysqld/mysqld.pid --bind-address=127.0.0.1 >/var/log/slurm/mariadb.log 2>&1 &
    local i; for i in $(seq 150); do timeout 5 mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  timeout 20 mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'e2e'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" ||
    { log "mariadb not answering, see /var/log/slurm/mariadb.log"; return 1; }
  cat > "$ETC/slurmdbd.conf" <<EOF2
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=e2e
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
EOF2
  chmod 0600 "$ETC/slurmdbd.conf"
  if ! pid_alive /run/slurmdbd.pid slurmdbd >/dev/null; then
    log "starting slurmdbd"; slurmdbd || { log "slurmdbd failed, see /var/log/slurm/slurmdbd.log"; return 1; }
    local i; for i in $(seq 150); do timeout 5 sacctmgr -n show cluster >/dev/null 2>&1 && break; sleep 0.2; done
  fi
  timeout 10 sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qx e2e || timeout 20 sacctmgr -i add cluster e2e >/dev/null
}

# add_users: alice and bob (proj_a, proj_b), carol (proj_a, Slurm admin).
add_users() {
  [ "$ACCOUNTING" = 1 ] || { log "users need SLURM_E2E_ACCOUNTING=1"; return 1; }
  local u a
  for u in alice:proj_a bob:proj_b carol:proj_a; do
    a=${u#*:}; u=${u%%:*}
    id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"
    timeout 10 sacctmgr -n -P show account "$a" format=account 2>/dev/null | grep -qx "$a" || timeout 20 sacctmgr -i add account "$a" cluster=e2e >/dev/null
    timeout 10 sacctmgr -n -P show assoc user="$u" account="$a" format=user 2>/dev/null | grep -qx "$u" || timeout 20 sacctmgr -i add user "$u" account="$a" cluster=e2e >/dev/null
  done
  timeout 20 sacctmgr -i modify user carol set adminlevel=admin >/dev/null 2>&1
  log "users alice (proj_a), bob (proj_b), carol (proj_a, admin)"
}

# start_restd [ADDR]: slurmrestd with JWT auth, as nobody (it refuses root).
start_restd() {
  local addr=${1:-127.0.0.1:6820}
  pid_alive /run/slurmrestd.pid slurmrestd >/dev/null && return 0
  setpriv --reuid=nobody --regid=nogroup --clear-groups env SLURM_JWT=daemon \
    slurmrestd -a rest_auth/jwt "$addr" >/var/log/slurm/slurmrestd.log 2>&1 &
  echo $! > /run/slurmrestd.pid
  local i
  for i in $(seq 50); do
    pid_alive /run/slurmrestd.pid slurmrestd >/dev/null || break
    timeout 2 bash -c "exec 3<>/dev/tcp/${addr%:*}/${addr##*:}" 2>/dev/null && { log "slurmrestd on $addr"; return 0; }
    sleep 0.2
  done
  log "slurmrestd not answering, see /var/log/slurm/slurmrestd.log"; return 1
}

start_slurm() {
  local t0; t0=$(date +%s)
  if ! pid_alive /run/slurmctld.pid slurmctld >/dev/null; then
    log "starting slurmctld"; slurmctld || { log "slurmctld failed, see /var/log/slurm/slurmctld.log"; return 1; }
  fi
  if ! pid_alive /run/slurmd.pid slurmd >/dev/null; then
    log "starting slurmd -N $NODE"; slurmd -N "$NODE" || { log "slurmd failed, see /var/log/slurm/slurmd.log"; return 1; }
  fi
  # sinfo may say "idle" from the recovered state before the new slurmd has
  # registered, so the readiness test is a real one-task job (<= 30 s in all).
  local st
  while [ $(( $(date +%s) - t0 )) -lt 30 ]; do
    st=$(timeout 5 sinfo -h -n "$NODE" -o %T 2>/dev/null)
    case "$st" in
      down*|drain*|fail*) timeout 5 scontrol update NodeName="$NODE" State=RESUME 2>/dev/null;;
      idle*|mixed*|allocated*)
        pid_alive /run/slurmd.pid slurmd >/dev/null &&
          timeout 10 srun -Q -N1 -n1 -t 1 -J e2e-ready true 2>/dev/null && { log "node $NODE ready ($st)"; return 0; };;
    esac
    sleep 0.3
  done
  log "node not ready after 30 s (state: '$st')"; tail -5 /var/log/slurm/slurmd.log >&2; return 1
}

# PIDs of every process in our job cgroups (job tasks + slurmstepd), v1 hierarchies
job_pids() {
  local c
  for c in freezer cpuacct memory cpuset; do
    [ -d "$CG_ROOT/$c/$CG_PREFIX" ] && find "$CG_ROOT/$c/$CG_PREFIX" -name cgroup.procs -exec cat {} + 2>/dev/null
  done | sort -un
}

rm_cgroups() {
  local c d
  for c in "$CG_ROOT"/*/; do
    d="$c$CG_PREFIX"
    [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
    [ -d "$d" ] && log "could not remove $d (processes still inside?)"
  done
  return 0
}

down() {
  local i p pids jobs
  if pid_alive /run/slurmctld.pid slurmctld >/dev/null; then
    jobs=$(timeout 5 squeue -h -o %i 2>/dev/null)
    if [ -n "$jobs" ]; then log "cancelling jobs: $(echo $jobs)"; timeout 10 scancel $jobs 2>/dev/null; fi
    for i in $(seq 50); do [ -z "$(job_pids)" ] && break; sleep 0.2; done
  fi
  stop_pidfile /run/slurmd.pid slurmd
  stop_pidfile /run/slurmctld.pid slurmctld
  pids=$(job_pids)
  if [ -n "$pids" ]; then
    log "killing leftover job pids: $(echo $pids)"
    for p in $pids; do kill -KILL "$p" 2>/dev/null; done
    for i in $(seq 50); do [ -z "$(job_pids)" ] && break; sleep 0.1; done
  fi
  stop_pidfile /run/slurmrestd.pid slurmrestd
  stop_pidfile /run/slurmdbd.pid slurmdbd
  stop_pidfile /run/mysqld/mysqld.pid mariadbd
  stop_pidfile /run/munge/munged.pid munged
  rm_cgroups
}

# drop_accounting: forget the job history (job ids restart at 1 after a
# reset, and sacct must not mix an earlier run's jobs in).
drop_accounting() {
  [ "$ACCOUNTING" = 1 ] || return 0
  timeout 5 mariadb -e 'select 1' >/dev/null 2>&1 || return 0
  stop_pidfile /run/slurmdbd.pid slurmdbd
  timeout 30 mariadb -e 'DROP DATABASE IF EXISTS slurm_acct_db' || log "could not drop slurm_acct_db"
}

clean() {
  drop_accounting
  down
  rm -rf /var/spool/slurmctld /var/spool/slurmd /var/log/slurm "$ETC/slurm.conf" "$ETC/cgroup.conf" "$ETC/gres.conf" "$ETC/slurmdbd.conf" "$WORKDIR"

  rm -f $FAKE_GPUS
}

purge() {
  clean
  local list="slurmd slurmctld slurm-client slurm-wlm-basic-plugins munge libmunge2"
  # only purge if nothing else would be removed along with them
  local extra; extra=$(apt-get -s purge $list 2>/dev/null | awk '/^Purg /{print $2}' | grep -vxF -f <(tr ' ' '\n' <<<"$list"))
  if [ -n "$extra" ]; then log "not purging packages, other packages depend on them: $extra"; return 0; fi
  DEBIAN_FRONTEND=noninteractive timeout 300 apt-get -q -o DPkg::Lock::Timeout=120 purge -y $list >/dev/null 2>&1 || log "apt-get purge failed"
  rm -rf /etc/munge /var/lib/munge /var/log/munge /run/munge
  # the two libraries pulled in as dependencies: only if auto-installed and unused
  local lib
  for lib in libhwloc15 liblua5.1-0; do
    apt-mark showauto "$lib" 2>/dev/null | grep -qx "$lib" || continue
    [ "$(apt-get -s purge "$lib" 2>/dev/null | grep -c '^Purg ')" = 1 ] || continue
    DEBIAN_FRONTEND=noninteractive timeout 120 apt-get -q -o DPkg::Lock::Timeout=120 purge -y "$lib" >/dev/null 2>&1
  done
}

status() {
  echo "munged:    $(pid_alive /run/munge/munged.pid munged || echo stopped)"
  echo "slurmctld: $(pid_alive /run/slurmctld.pid slurmctld || echo stopped)"
  echo "slurmd:    $(pid_alive /run/slurmd.pid slurmd || echo stopped)"
  timeout 5 sinfo 2>/dev/null; timeout 5 squeue 2>/dev/null
  find "$CG_ROOT"/*/"$CG_PREFIX" -type d 2>/dev/null
}

test_jobs() {
  mkdir -p "$WORKDIR"
  timeout 60 srun -N1 sleep 30 > "$WORKDIR/srun.out" 2>&1 &
  local sb; sb=$(timeout 10 sbatch --parsable --wrap 'yes > /dev/null') || { log "sbatch failed"; return 1; }
  local i; for i in $(seq 50); do [ "$(timeout 5 squeue -h -t R | wc -l)" -ge 2 ] && break; sleep 0.2; done
  sleep 1
  timeout 5 squeue
  local p
  for p in $(job_pids); do
    case "$(cat /proc/$p/comm 2>/dev/null)" in sleep|yes) ;; *) continue;; esac
    echo "--- pid $p: $(tr '\0' ' ' < /proc/$p/cmdline)"
    grep -E 'cpuacct|memory|freezer|cpuset' /proc/$p/cgroup
    tr '\0' '\n' < /proc/$p/environ | grep -E '^SLURM_(JOB_ID|STEP_ID)=' || echo "(no SLURM_JOB_ID: extern step)"
  done
  timeout 10 scancel "$sb"
}

# close_inherited: close every descriptor above stderr that the caller left
# open, except this script's own.  The daemons started here (munged,
# mariadbd, slurmdbd, slurmctld, slurmd, slurmrestd) would inherit them and
# keep them open for as long as they run: `flock /tmp/lock.slurm slurm.sh up`
# would leave the bed's lock held after flock returned, until `down`.
# Closing our copy releases nothing: the lock stays with whoever took it.
close_inherited() {
  local p fd self
  self=$(readlink -f "$0")
  for p in /proc/$$/fd/*; do
    fd=${p##*/}
    case $fd in 0|1|2) continue;; esac
    [ "$(readlink -f "$p" 2>/dev/null)" = "$self" ] && continue
    eval "exec $fd>&-" 2>/dev/null
  done
  return 0
}

[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
close_inherited
case "${1:-}" in
  up)     install_pkgs && write_config && start_munge && start_accounting && start_slurm ;;
  down)   down ;;
  reset)  drop_accounting; down; rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
          install_pkgs && write_config && start_munge && start_accounting && start_slurm ;;
  users)  add_users ;;
  restd)  start_restd "${2:-}" ;;
  clean)  clean ;;
  purge)  purge ;;
  status) status ;;
  test)   test_jobs ;;
  *) echo "usage: $0 up|reset|users|restd [ADDR]|test|status|down|clean|purge" >&2; exit 2 ;;
esac
