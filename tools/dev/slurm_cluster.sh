#!/usr/bin/env bash
# A real SLURM on this machine for the tests: munge, slurmctld and two slurmd.
#
# Usage: bash tools/dev/slurm_cluster.sh start|stop|status
#
# start   installs Debian's slurm-wlm and munge where they are missing (as root,
#         with apt-get), writes the configuration into $SLOWFAST_SLURM_DIR
#         (default /tmp/slowfast-slurm), starts munged, slurmctld and two slurmd
#         (nodes sfnode1 and sfnode2, 2 CPUs each, both on this machine at
#         127.0.0.1) and waits until both nodes are idle. Then it prints
#         "export SLURM_CONF=..." for the SLURM commands (sbatch, squeue, ...).
#         A cluster already running from that folder is kept.
# stop    cancels the cluster's jobs, then stops the daemons this script
#         started (by their pid files; SIGKILL after 5 s), nothing else.
# status  exit 0 when the cluster answers and both nodes are up, else 1.
#
# Exit status 3: the cluster cannot run here (not root: the daemons run as
# root; SLURM missing and no apt-get); the project's SLURM tests then skip with
# that reason. The /etc/hosts line stays (it names 127.0.0.1 only).
#
# The node names must resolve: start adds "127.0.0.1 sfnode1 sfnode2" to
# /etc/hosts when they do not (a job's rendezvous address is its first node's
# name). Requeued jobs wait AuthInfo's cred_expire (15 s here, 120 s by
# default) before they run again. Ports: $SLOWFAST_SLURM_PORT (default 16817)
# for slurmctld, the next two for the slurmd.
set -euo pipefail

DIR="${SLOWFAST_SLURM_DIR:-/tmp/slowfast-slurm}"
PORT="${SLOWFAST_SLURM_PORT:-16817}"
NODES=(sfnode1 sfnode2)
CONF="${DIR}/slurm.conf"

die() { echo "slurm_cluster: $*" >&2; exit 1; }
# Exit status 3: this machine cannot run the cluster (the tests skip).
cannot() { echo "slurm_cluster: $*" >&2; exit 3; }

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sbatch >/dev/null || missing+=(slurm-client)
  command -v munged >/dev/null || missing+=(munge)
  [ ${#missing[@]} -eq 0 ] && return
  [ "$(id -u)" -eq 0 ] || cannot "not root: cannot install ${missing[*]} (apt-get)"
  command -v apt-get >/dev/null || cannot "no apt-get to install ${missing[*]}"
  echo "installing ${missing[*]} (Debian's packages)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

resolve_nodes() {
  local node
  for node in "${NODES[@]}"; do
    getent hosts "${node}" >/dev/null && continue
    [ "$(id -u)" -eq 0 ] || cannot "node name ${node} does not resolve; add it to /etc/hosts"
    echo "127.0.0.1 ${NODES[*]}  # slowfast test cluster" >>/etc/hosts
    return
  done
}

write_config() {
  mkdir -p "${DIR}/state" "${DIR}/log" "${DIR}/munge"
  for node in "${NODES[@]}"; do mkdir -p "${DIR}/spool/${node}"; done
  if [ ! -f "${DIR}/munge/munge.key" ]; then
    dd if=/dev/urandom of="${DIR}/munge/munge.key" bs=1 count=128 2>/dev/null
  fi
  chmod 700 "${DIR}/munge"
  chmod 600 "${DIR}/munge/munge.key"
  local host
  host="$(hostname -s)"
  cat >"${CONF}" <<EOF
# Written by tools/dev/slurm_cluster.sh: two nodes on this machine.
ClusterName=slowfast-test
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${PORT}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=${DIR}/munge/munge.socket,cred_expire=15
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool/%n
SlurmctldPidFile=${DIR}/slurmctld.pid
SlurmdPidFile=${DIR}/slurmd-%n.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
JobRequeue=1
KillWait=10
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
NodeName=${NODES[0]} NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=2 State=UNKNOWN
NodeName=${NODES[1]} NodeAddr=127.0.0.1 Port=$((PORT + 2)) CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP
EOF
}

# Whether the daemon of pid file $1 runs (a daemon removes its file as it ends).
alive() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" && kill -0 "${pid}" 2>/dev/null
}

nodes_idle() {
  local states
  states="$(SLURM_CONF="${CONF}" sinfo -h -N -o '%N %t' 2>/dev/null)" || return 1
  [ "$(grep -cE ' (idle|mix|alloc)$' <<<"${states}")" -eq ${#NODES[@]} ]
}

start() {
  [ "$(id -u)" -eq 0 ] || cannot "not root: the daemons run as root (SlurmUser=root)"
  install_packages
  resolve_nodes
  if [ -f "${CONF}" ] && nodes_idle; then
    echo "cluster already running from ${DIR}"
  else
    write_config
    alive "${DIR}/munged.pid" || munged --force \
      --socket="${DIR}/munge/munge.socket" --key-file="${DIR}/munge/munge.key" \
      --pid-file="${DIR}/munged.pid" --log-file="${DIR}/log/munged.log" \
      --seed-file="${DIR}/munge/munged.seed"
    alive "${DIR}/slurmctld.pid" || slurmctld -f "${CONF}"
    for node in "${NODES[@]}"; do
      alive "${DIR}/slurmd-${node}.pid" || slurmd -f "${CONF}" -N "${node}"
    done
    local waited=0
    until nodes_idle; do
      sleep 1
      waited=$((waited + 1))
      [ "${waited}" -lt 60 ] || die "nodes not idle after 60 s; see ${DIR}/log"
    done
    echo "cluster up: ${NODES[*]} (2 CPUs each), logs in ${DIR}/log"
  fi
  echo "export SLURM_CONF=${CONF}"
}

stop() {
  local pidfile pid
  if [ -f "${CONF}" ] && alive "${DIR}/slurmctld.pid"; then
    # The jobs' processes are no daemon's: cancel them while slurmd runs.
    SLURM_CONF="${CONF}" scancel --full --quiet --partition debug 2>/dev/null || true
    for _ in $(seq 50); do
      [ -z "$(SLURM_CONF="${CONF}" squeue -h 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for pidfile in "${DIR}"/slurmd-*.pid "${DIR}/slurmctld.pid" "${DIR}/munged.pid"; do
    pid="$(cat "${pidfile}" 2>/dev/null)" || continue
    if kill -0 "${pid}" 2>/dev/null; then
      kill "${pid}"
      for _ in $(seq 50); do kill -0 "${pid}" 2>/dev/null || break; sleep 0.1; done
      kill -9 "${pid}" 2>/dev/null || true
    fi
    rm -f "${pidfile}"
  done
  echo "cluster in ${DIR} stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) [ -f "${CONF}" ] && nodes_idle ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
