#!/usr/bin/env bash
# A real single-node SLURM on localhost, all state under STATEDIR, for tests and trials.
#
#   scripts/slurm-local.sh start STATEDIR   # munge + slurmctld + slurmd; waits until the node is idle
#   scripts/slurm-local.sh stop STATEDIR    # scancel, wait for an empty queue, kill the daemons
#   scripts/slurm-local.sh start STATEDIR --nodes K   # K nodes, each slurmd in a network namespace
#
# After `start`, point clients at it with: export SLURM_CONF=STATEDIR/slurm.conf
# Runs as root, without systemd or cgroups (proctrack/linuxproc, task/none). The settings
# and why each is needed are in the notes on running SLURM locally: CPUs=8 is declared
# through config_overrides so that 4 tasks fit on 2 real cores; CR_Core so that jobs run side
# by side; cred_expire=10 and sched_interval=1 so that a requeued job restarts in seconds.
# Every wait has a deadline (SLURM_LOCAL_DEADLINE seconds, default 30). The daemons listen on
# SLURM_LOCAL_CTLD_PORT and SLURM_LOCAL_SLURMD_PORT (default 6817 and 6818), so a test can run
# its own cluster beside another one.
#
# With --nodes K (issue 36) the cluster has K nodes node1..nodeK on this one machine: slurmctld
# and munged stay here, and each node's slurmd runs in a network namespace of its own with a
# hostname of its own (a UTS namespace), joined to a bridge with a private address, as
# tests/fakehosts.py makes fake hosts. STATEDIR/nodes.env records the names (namespaces,
# links, addresses) for `stop` and for tests/slurmnodes.py; the interface inside every
# node is called eth0. Names and the subnet (10.232.<s>.0/24, the controller at .1, node i
# at .(i+1)) come from SLURM_LOCAL_TAG (default: from the pid) and SLURM_LOCAL_SUBNET
# (default: from the tag, skipping subnets in use), so one set can follow another. The
# nodes declare SLURM_LOCAL_NODE_CPUS CPUs each (default 4); a lost node goes DOWN after
# SlurmdTimeout (SLURM_LOCAL_SLURMD_TIMEOUT, default 5 s); a ping to it gives up after
# MessageTimeout (SLURM_LOCAL_MESSAGE_TIMEOUT, default 5 s). Without --nodes nothing changes.
set -euo pipefail

usage() { echo "usage: $0 start|stop STATEDIR [--nodes K]" >&2; exit 2; }
nodes=0
if [ $# -eq 4 ] && [ "$3" = "--nodes" ]; then
  case $4 in ''|*[!0-9]*) usage ;; esac
  nodes=$4
  [ "$nodes" -ge 1 ] && [ "$nodes" -le 50 ] || usage
elif [ $# -ne 2 ]; then
  usage
fi
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

munge_key() {  # the folder of munged's socket (in /tmp) and the key
  # munged wants execute permission for all on every folder above its socket, which a
  # private STATEDIR (a test's tmp folder, mode 700) does not give: the socket lives in /tmp.
  sockdir=$(mktemp -d /tmp/slurm-local-munge.XXXXXX)
  chmod 711 "$sockdir"
  echo "$sockdir" > "$dir/munge.dir"
  [ -s "$dir/munge/munge.key" ] || mungekey -c -k "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
}

start_munged() {
  munged --key-file="$dir/munge/munge.key" --socket="$sockdir/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --seed-file="$dir/munge/munge.seed" --log-file="$dir/log/munged.log"
}

write_conf() {  # write_conf CTLD_ADDR SUFFIX EXTRA NODES: slurm.conf; SUFFIX "-%n" gives each node its files
  local suffix=$2
  # Job ids start at a random number, not at 1: MPICH under srun --mpi=pmi2 names its
  # shared memory after the job id (/dev/shm/mpich_shm_<hash of "job.step">_<node>), so a
  # fresh cluster's job 4 would meet a segment an earlier cluster's job 4 left behind.
  local first_job=$(( (RANDOM * 32768 + RANDOM) % 50000000 + 1000 ))
  cat > "$dir/slurm.conf" <<CONF
ClusterName=ci
SlurmctldHost=$(hostname -s)($1)
SlurmctldPort=${SLURM_LOCAL_CTLD_PORT:-6817}
SlurmdPort=${SLURM_LOCAL_SLURMD_PORT:-6818}
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sockdir/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool${suffix:+/%n}
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd$suffix.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd$suffix.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
FirstJobId=$first_job
ReturnToService=2
$3MailProg=/bin/true
SchedulerParameters=sched_interval=1,bf_interval=1
SlurmdParameters=config_overrides
$4
CONF
}

drain_queue() {  # cancel every job and wait for an empty queue
  if [ -f "$dir/slurm.conf" ] && [ -s "$dir/slurmctld.pid" ] && command -v scancel >/dev/null 2>&1; then
    scancel -u "$(id -un)" 2>/dev/null || true
    wait_until "an empty queue" queue_empty || squeue >&2 || true
  fi
}

stop_controller() {  # slurmctld, munged and munged's socket folder (the slurmds are stopped first)
  kill_pidfile "$dir/slurmctld.pid"
  kill_pidfile "$dir/munge/munged.pid"
  if [ -s "$dir/munge.dir" ]; then
    case $(cat "$dir/munge.dir") in /tmp/slurm-local-munge.*) rm -rf "$(cat "$dir/munge.dir")" ;; esac
    rm -f "$dir/munge.dir"
  fi
  echo "slurm-local: stopped ($dir)"
}

start() {
  need munged mungekey slurmctld slurmd sinfo squeue
  local host
  host=$(hostname -s)
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  munge_key
  write_conf 127.0.0.1 "" "" "NodeName=$host CPUs=8 RealMemory=4000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP"
  start_munged
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
  drain_queue
  kill_pidfile "$dir/slurmd.pid"
  stop_controller
}

# ---- several nodes, each in a network namespace (--nodes K) ----

subnet_free() { ! ip -o -4 addr show 2>/dev/null | grep -q " 10\.232\.$1\."; }

net_up() {  # the bridge here, then one namespace per node with a veth pair onto it
  local tag=${SLURM_LOCAL_TAG:-$(printf '%05d%02d' $(($$ % 100000)) $((RANDOM % 100)))}
  local subnet=${SLURM_LOCAL_SUBNET:-$(( (10#$tag) % 200 + 20 ))}
  if [ -z "${SLURM_LOCAL_SUBNET:-}" ]; then
    local tries=0
    until subnet_free "$subnet"; do
      subnet=$(( (subnet - 20 + 1) % 200 + 20 )); tries=$((tries + 1))
      [ "$tries" -lt 200 ] || { echo "slurm-local: no free 10.232.x.0/24 subnet" >&2; exit 1; }
    done
  fi
  local bridge="msbr$tag"
  {
    echo "TAG=$tag"; echo "SUBNET=10.232.$subnet.0/24"; echo "BRIDGE=$bridge"
    echo "CTLD_ADDR=10.232.$subnet.1"; echo "NODES=$nodes"; echo "IFACE=eth0"
  } > "$dir/nodes.env"
  ip link add "$bridge" type bridge
  ip addr add "10.232.$subnet.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns veth addr hosts
  hosts="10.232.$subnet.1 $(hostname -s)"
  for i in $(seq 1 "$nodes"); do hosts="$hosts"$'\n'"10.232.$subnet.$((i + 1)) node$i"; done
  for i in $(seq 1 "$nodes"); do
    ns="msn${tag}n$i"; veth="msv${tag}n$i"; addr="10.232.$subnet.$((i + 1))"
    ip netns add "$ns"
    echo "NODE$i=node$i $ns $veth $addr" >> "$dir/nodes.env"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    ip link set "$veth" master "$bridge"
    ip link set "$veth" up
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    # bound over /etc/hosts for the node's slurmd and its jobs: node names resolve there
    mkdir -p "/etc/netns/$ns"
    printf '%s\n127.0.0.1 localhost\n' "$hosts" > "/etc/netns/$ns/hosts"
  done
}

net_down() {  # every process left in a node's namespace, then the links, namespaces and bridge
  [ -s "$dir/nodes.env" ] || return 0
  local line name ns veth addr pids round
  while IFS= read -r line; do
    case $line in NODE[0-9]*=*) ;; *) continue ;; esac
    read -r name ns veth addr <<<"${line#*=}"
    for round in $(seq 1 50); do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -n "$pids" ] || break
      kill -9 $pids 2>/dev/null || true
      sleep 0.1
    done
    ip link del "$veth" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    case $ns in msn*) rm -rf "/etc/netns/$ns" ;; esac
  done < "$dir/nodes.env"
  local bridge
  bridge=$(sed -n 's/^BRIDGE=//p' "$dir/nodes.env")
  [ -z "$bridge" ] || ip link del "$bridge" 2>/dev/null || true
  mv "$dir/nodes.env" "$dir/nodes.env.stopped"
}

nodes_idle() { [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" -eq "$nodes" ]; }

start_nodes() {
  need munged mungekey slurmctld slurmd sinfo squeue ip unshare nsenter
  local host
  host=$(hostname -s)
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  net_up
  local ctld_addr
  ctld_addr=$(sed -n 's/^CTLD_ADDR=//p' "$dir/nodes.env")
  munge_key  # munged's socket is a path, not an abstract socket: it is reached from every namespace
  local cpus=${SLURM_LOCAL_NODE_CPUS:-4} i line name ns veth addr nodelines="" names=""
  while IFS= read -r line; do
    case $line in NODE[0-9]*=*) ;; *) continue ;; esac
    read -r name ns veth addr <<<"${line#*=}"
    nodelines="$nodelines"$'\n'"NodeName=$name NodeHostname=$name NodeAddr=$addr CPUs=$cpus RealMemory=2000 State=UNKNOWN"
    names="${names:+$names,}$name"
  done < "$dir/nodes.env"
  write_conf "$ctld_addr" "-%n" "SlurmdTimeout=${SLURM_LOCAL_SLURMD_TIMEOUT:-5}
MessageTimeout=${SLURM_LOCAL_MESSAGE_TIMEOUT:-5}
" "${nodelines#$'\n'}
PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP"
  echo "PMIxCliTmpDirBase=$dir/nodetmp" > "$dir/mpi.conf"
  start_munged
  slurmctld -i
  while IFS= read -r line; do
    case $line in NODE[0-9]*=*) ;; *) continue ;; esac
    read -r name ns veth addr <<<"${line#*=}"
    mkdir -p "$dir/spool/$name" "$dir/nodetmp/$name"
    # The node's own hostname lives as long as a process in its UTS namespace: slurmd. Not
    # `ip netns exec`: it mounts a fresh /sys, without the cgroup folders slurmd needs to
    # start; a mount namespace of its own gets the node's /etc/hosts bound in instead, and
    # its own folder for SLURM's pmix plugin (mpi.conf), which otherwise makes
    # /tmp/spmix_appdir_<uid>_<job>.<step> on every node: on one file system the second
    # node's step fails with "File exists".
    nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private /bin/sh -c \
      'mount --bind "$2" /etc/hosts && mount --bind "$3" "$4" && hostname "$1" && exec slurmd -N "$1"' \
      sh "$name" "/etc/netns/$ns/hosts" "$dir/nodetmp/$name" "$dir/nodetmp"
  done < "$dir/nodes.env"
  if ! wait_until "$nodes nodes to be idle" nodes_idle; then
    sinfo -N >&2 || true
    tail -n 20 "$dir/log/slurmctld.log" "$dir"/log/slurmd-*.log >&2 || true
    exit 1
  fi
  echo "slurm-local: up with $nodes nodes ($(sed -n 's/^SUBNET=//p' "$dir/nodes.env")); export SLURM_CONF=$dir/slurm.conf"
}

stop_nodes() {
  drain_queue
  local f
  for f in "$dir"/slurmd-*.pid; do [ -e "$f" ] && kill_pidfile "$f"; done
  net_down
  stop_controller
}

# `stop` finds the nodes of a multi-node start in STATEDIR/nodes.env, with or without --nodes
[ "$action" != stop ] || [ ! -s "$dir/nodes.env" ] || nodes=$(sed -n 's/^NODES=//p' "$dir/nodes.env")

case $action:$nodes in
  start:0) start ;;
  stop:0) stop ;;
  start:*) start_nodes ;;
  stop:*) stop_nodes ;;
  *) usage ;;
esac
