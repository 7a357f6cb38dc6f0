#!/usr/bin/env bash
# A real single-node SLURM on localhost, all state under STATEDIR, for tests and trials.
#
#   scripts/slurm-local.sh start STATEDIR   # munge + slurmctld + slurmd; waits until the node is idle
#   scripts/slurm-local.sh stop STATEDIR    # scancel, wait for an empty queue, kill the daemons
#
# After `start`, point clients at it with: export SLURM_CONF=STATEDIR/slurm.conf
# Runs as root, without systemd or cgroups (proctrack/linuxproc, task/none). The settings
# and why each is needed are in the notes on running SLURM locally: CPUs=8 is declared
# through config_overrides so that 4 tasks fit on 2 real cores; CR_Core so that jobs run side
# by side; cred_expire=10 and sched_interval=1 so that a requeued job restarts in seconds.
# Every wait has a deadline (SLURM_LOCAL_DEADLINE seconds, default 30). The daemons listen on
# SLURM_LOCAL_CTLD_PORT and SLURM_LOCAL_SLURMD_PORT (default 6817 and 6818), so a test can run
# its own cluster beside another one.
set -euo pipefail

usage() { echo "usage: $0 start|stop STATEDIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
deadline=${SLURM_LOCAL_DEADLINE:-30}
export SLURM_CONF="$dir/slurm.conf"

need() {
  for b in "$@"; do
    command -v "$b" >/dev/null 2>&1 || { echo "slurm-local: '$b' not found; run scripts/install-slurm.sh" >&2; exit 3; }
  done
}

wait_until() {  # wait_until DESCRIPTION CMD...: poll CMD every 0.2 s until it succeeds or the deadline passes
  local what=$1; shift
  local end=$((SECONDS + deadline))
  until "$@"; do
    if [ "$SECONDS" -ge "$end" ]; then echo "slurm-local: gave up after ${deadline}s waiting for $what" >&2; return 1; fi
    sleep 0.2
  done
}

node_idle() { [ "$(sinfo -h -o %T 2>/dev/null | head -n1)" = "idle" ]; }
queue_empty() { [ -z "$(squeue -h -o %i 2>/dev/null)" ] && squeue -h >/dev/null 2>&1; }

kill_pidfile() {  # kill_pidfile FILE: TERM the daemon named in FILE, KILL it if it lingers
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    local end=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

start() {
  need munged mungekey slurmctld slurmd sinfo squeue
  local host
  host=$(hostname -s)
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  # munged wants execute permission for all on every folder above its socket, which a
  # private STATEDIR (a test's tmp folder, mode 700) does not give: the socket lives in /tmp.
  local sockdir
  sockdir=$(mktemp -d /tmp/slurm-local-munge.XXXXXX)
  chmod 711 "$sockdir"
  echo "$sockdir" > "$dir/munge.dir"
  [ -s "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  # Job ids start at a random number, not at 1: MPICH under srun --mpi=pmi2 names its
  # shared memory after the job id (/dev/shm/mpich_shm_<hash of "job.step">_<node>), so a
  # fresh cluster's job 4 would meet a segment an earlier cluster's job 4 left behind.
  local first_job=$(( (RANDOM * 32768 + RANDOM) % 50000000 + 1000 ))
  cat > "$dir/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-6817}
SlurmdPort=${SLURM_LOCAL_SLURMD_PORT:-6818}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sockdir/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
FirstJobId=$first_job
ReturnToService=2
MailProg=/bin/true
SchedulerParameters=sched_interval=1,bf_interval=1
SlurmdParameters=config_overrides
NodeName=$host CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  munged --key-file="$dir/munge/munge.key" --socket="$sockdir/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munge.seed" --log-file="$dir/log/munged.log"
  slurmctld -i
  slurmd
  if ! wait_until "the node to be idle" node_idle; then
    sinfo >&2 || true
    tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
  fi
  echo "slurm-local: up on $host; export SLURM_CONF=$dir/slurm.conf"
}

stop() {
  if [ -f "$dir/slurm.conf" ] && [ -s "$dir/slurmctld.pid" ] && command -v scancel >/dev/null 2>&1; then
    scancel -u "$(id -un)" 2>/dev/null || true
    wait_until "an empty queue" queue_empty || squeue >&2 || true
  fi
  kill_pidfile "$dir/slurmd.pid"
  kill_pidfile "$dir/slurmctld.pid"
  kill_pidfile "$dir/munge/munged.pid"
  if [ -s "$dir/munge.dir" ]; then
    case $(cat "$dir/munge.dir") in /tmp/slurm-local-munge.*) rm -rf "$(cat "$dir/munge.dir")" ;; esac
    rm -f "$dir/munge.dir"
  fi
  echo "slurm-local: stopped ($dir)"
}

case $action in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
