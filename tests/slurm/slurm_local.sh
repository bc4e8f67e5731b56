#!/usr/bin/env bash
# A real single-node SLURM cluster on this machine, for testing the sbatch scripts
# under examples/slurm/ (tests/test_slurm.py uses it).
#
#   tests/slurm/slurm_local.sh start    # install slurm-wlm + munge if missing, start munged, slurmctld, slurmd
#   eval "$(tests/slurm/slurm_local.sh env)"   # export SLURM_CONF for sbatch/srun/squeue/scontrol
#   tests/slurm/slurm_local.sh status
#   tests/slurm/slurm_local.sh stop     # cancel jobs, stop the daemons this script started
#
# Everything lives in one private directory ($PRIMUS_SLURM_DIR, default /tmp/primus-slurm):
# slurm.conf, the munge key and socket, state, spool, logs and the daemons' pid files. Nothing
# under /etc is changed except by apt-get itself. The daemons are started directly (no systemd),
# in the foreground of a detached session, and stopped by the pids recorded at start.
# Needs root (slurmd runs jobs as the submitting user; apt-get installs the packages).
#
# Knobs (environment): PRIMUS_SLURM_DIR, PRIMUS_SLURM_TIMEOUT (seconds to wait for the node,
# default 60), PRIMUS_SLURM_APT_TIMEOUT (seconds for apt-get, default 900), PRIMUS_SLURMCTLD_PORT
# (default 16817), PRIMUS_SLURMD_PORT (default 16818), PRIMUS_SLURM_PARTITION (default debug).
set -euo pipefail

DIR=${PRIMUS_SLURM_DIR:-/tmp/primus-slurm}
WAIT_S=${PRIMUS_SLURM_TIMEOUT:-60}
APT_TIMEOUT_S=${PRIMUS_SLURM_APT_TIMEOUT:-900}
CTLD_PORT=${PRIMUS_SLURMCTLD_PORT:-16817}
SLURMD_PORT=${PRIMUS_SLURMD_PORT:-16818}
PARTITION=${PRIMUS_SLURM_PARTITION:-debug}
CONF=$DIR/etc/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket
export SLURM_CONF=$CONF
# Debian installs the daemons under /usr/sbin, which a non-login root shell may not have on PATH.
export PATH=$PATH:/usr/sbin:/sbin

log() { echo "slurm_local: $*" >&2; }
die() { echo "slurm_local: error: $*" >&2; exit 1; }

usage() {
    sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

# ---------------------------------------------------------------------------------------------
# process bookkeeping: our own pid files, written when we start a daemon
pid_of() {  # pid_of NAME -> prints the pid if NAME (munged|slurmctld|slurmd) is running, else fails
    local f=$DIR/run/$1.pid pid
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    # the pid must still be the process we started (pids are reused)
    local argv0
    argv0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || return 1
    [[ ${argv0##*/} == "$1" ]] || return 1
    echo "$pid"
}

stop_pid() {  # stop_pid PID NAME: TERM, wait up to 10 s, then KILL
    local pid=$1 name=$2 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || { log "stopped $name (pid $pid)"; return 0; }
        sleep 0.2
    done
    log "$name (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

stop_daemon() {
    local pid
    if pid=$(pid_of "$1"); then stop_pid "$pid" "$1"; fi
    rm -f "$DIR/run/$1.pid"
}

# slurmstepd processes are forked by our slurmd and detach from it: find them by the SLURM_CONF
# they inherited (only ours point into $DIR), and end them by pid.
our_stepds() {
    local p
    for p in /proc/[0-9]*; do
        [[ $(cat "$p/comm" 2>/dev/null) == slurmstepd ]] || continue
        tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$CONF" && echo "${p#/proc/}"
    done
    return 0
}

run_bounded() {  # run_bounded SECONDS CMD...: a client command that cannot hang
    timeout --kill-after=5 "$1" "${@:2}"
}

node_state() {
    run_bounded 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true
}

# ---------------------------------------------------------------------------------------------
install_packages() {
    local missing=() b
    for b in slurmctld slurmd sbatch srun scontrol sinfo munged munge; do
        command -v "$b" >/dev/null 2>&1 || missing+=("$b")
    done
    ((${#missing[@]} == 0)) && return 0
    command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]} and apt-get is not available: install SLURM (slurmctld, slurmd, client) and munge yourself"
    log "installing slurm-wlm and munge with apt-get (missing: ${missing[*]})"
    local start=$SECONDS
    export DEBIAN_FRONTEND=noninteractive
    # postinst scripts try to start the services: containers without an init would fail or hang
    # on that, and we start our own daemons anyway, so let policy-rc.d refuse (exit 101).
    local policy=/usr/sbin/policy-rc.d restore=""
    if [[ -e $policy ]]; then restore=$(mktemp); cp -p "$policy" "$restore"; fi
    printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod 755 "$policy"
    local rc=0 apt_log=$DIR/log/apt.log
    {
        run_bounded "$APT_TIMEOUT_S" apt-get install -y --no-install-recommends slurm-wlm munge >"$apt_log" 2>&1 \
            || { log "apt-get install failed, running apt-get update first"; \
                 run_bounded "$APT_TIMEOUT_S" apt-get update >>"$apt_log" 2>&1 && \
                 run_bounded "$APT_TIMEOUT_S" apt-get install -y --no-install-recommends slurm-wlm munge >>"$apt_log" 2>&1; }
    } || rc=$?
    if [[ -n $restore ]]; then mv -f "$restore" "$policy"; else rm -f "$policy"; fi
    if ((rc != 0)); then
        tail -n 20 "$apt_log" >&2 || true
        die "apt-get could not install slurm-wlm and munge (exit $rc; log: $apt_log)"
    fi
    log "installed slurm-wlm and munge in $((SECONDS - start)) s"
    for b in "${missing[@]}"; do command -v "$b" >/dev/null 2>&1 || die "$b still missing after apt-get install"; done
}

write_conf() {
    # CPUs, sockets, cores, threads and RealMemory exactly as slurmd sees this machine
    local hw
    hw=$(run_bounded 30 slurmd -C 2>/dev/null | grep '^NodeName=' | head -n1) || true
    [[ -n $hw ]] || die "'slurmd -C' printed no NodeName line"
    hw=$(sed -E "s/^NodeName=[^ ]+ //; s/ UpTime=.*//" <<<"$hw")
    cat >"$CONF" <<EOF
# written by tests/slurm/slurm_local.sh: a single-node test cluster, everything under $DIR
ClusterName=primus-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd
SlurmctldPidFile=$DIR/run/slurmctld.daemon.pid
SlurmdPidFile=$DIR/run/slurmd.daemon.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
MailProg=/bin/true
SlurmdDebug=info
# no cgroups (containers rarely delegate them): plain /proc process tracking, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdTimeout=120
InactiveLimit=0
KillWait=10
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
}

start_munged() {
    if pid_of munged >/dev/null; then return 0; fi
    local key=$DIR/munge/munge.key
    if [[ ! -s $key ]]; then
        dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    fi
    chmod 600 "$key"
    rm -f "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    # --force: accept running as root and a private directory under /tmp
    setsid munged --foreground --force --key-file="$key" --socket="$MUNGE_SOCKET" \
        --pid-file="$DIR/munge/munged.daemon.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" </dev/null >>"$DIR/log/munged.out" 2>&1 &
    echo $! >"$DIR/run/munged.pid"
    local i
    for ((i = 0; i < 50; i++)); do
        if run_bounded 5 munge -n -S "$MUNGE_SOCKET" 2>/dev/null | run_bounded 5 unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; then
            log "munged is up (pid $(<"$DIR/run/munged.pid"))"
            return 0
        fi
        # kill -0, not pid_of: right after the fork the process may not have exec'd munged yet
        kill -0 "$(<"$DIR/run/munged.pid")" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 20 "$DIR/log/munged.out" "$DIR/log/munged.log" >&2 2>/dev/null || true
    die "munged did not come up (log: $DIR/log/munged.log)"
}

start_slurm_daemon() {  # start_slurm_daemon slurmctld|slurmd ARGS...
    local name=$1
    if pid_of "$name" >/dev/null; then return 0; fi
    setsid "$name" -D -f "$CONF" "${@:2}" </dev/null >>"$DIR/log/$name.out" 2>&1 &
    local pid=$! i
    echo "$pid" >"$DIR/run/$name.pid"
    # up when the process has exec'd the daemon and is still alive a moment later
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        pid_of "$name" >/dev/null && break
        sleep 0.2
    done
    sleep 0.5
    if ! pid_of "$name" >/dev/null; then
        tail -n 30 "$DIR/log/$name.out" "$DIR/log/$name.log" >&2 2>/dev/null || true
        die "$name exited right after start (logs: $DIR/log/$name.log, $DIR/log/$name.out)"
    fi
    log "$name is up (pid $(<"$DIR/run/$name.pid"))"
}

all_running() {
    pid_of munged >/dev/null && pid_of slurmctld >/dev/null && pid_of slurmd >/dev/null
}

cmd_start() {
    [[ $(id -u) == 0 ]] || die "needs root (installs packages, runs slurmd, which runs jobs as their users)"
    umask 022
    mkdir -p "$DIR"
    # readable by everyone (slurm.conf, the munge socket: other users may submit jobs); the munge
    # key itself is 0600
    chmod 755 "$DIR"
    mkdir -p "$DIR"/{etc,state,spool,log,run,munge}
    chmod 755 "$DIR/munge"
    install_packages
    NODE=$(hostname -s)
    [[ -n $NODE ]] || die "hostname -s is empty"
    if all_running && [[ -f $CONF ]] && [[ $(node_state) == idle* || $(node_state) == mixed* || $(node_state) == alloc* ]]; then
        log "already running (node $NODE $(node_state)); SLURM_CONF=$CONF"
        return 0
    fi
    # anything half-started by an earlier run goes: start from a clean slate
    cmd_stop quiet
    rm -rf "${DIR:?}/state" "${DIR:?}"/spool/*
    mkdir -p "$DIR/state" "$DIR/spool/slurmd"
    write_conf
    start_munged
    start_slurm_daemon slurmctld -i
    start_slurm_daemon slurmd -N "$NODE"
    local deadline=$((SECONDS + WAIT_S)) state="" resumed=""
    while ((SECONDS < deadline)); do
        state=$(node_state)
        case $state in
            idle*) log "node $NODE is idle: SLURM_CONF=$CONF"; echo "export SLURM_CONF=$CONF"; return 0 ;;
            down* | drain* | fail*)
                if [[ -z $resumed ]]; then
                    run_bounded 10 scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
                    resumed=1
                fi ;;
        esac
        for name in slurmctld slurmd; do
            pid_of "$name" >/dev/null || { tail -n 30 "$DIR/log/$name.log" "$DIR/log/$name.out" >&2 2>/dev/null || true; die "$name died while waiting for the node"; }
        done
        sleep 1
    done
    tail -n 30 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 2>/dev/null || true
    die "node $NODE not idle after ${WAIT_S}s (state '${state:-unknown}'; logs under $DIR/log)"
}

cmd_stop() {
    local quiet=${1:-}
    if [[ ! -d $DIR/run ]]; then
        [[ -n $quiet ]] || log "nothing to stop ($DIR/run does not exist)"
        return 0
    fi
    if pid_of slurmctld >/dev/null; then
        # cancel every job so that no training processes outlive the cluster
        run_bounded 10 scancel --full --quiet --user=root >/dev/null 2>&1 || true
        run_bounded 10 scancel --full --quiet --state=PENDING >/dev/null 2>&1 || true
        local i
        for ((i = 0; i < 20; i++)); do
            [[ -z $(run_bounded 10 squeue -h -t RUNNING,COMPLETING -o %i 2>/dev/null) ]] && break
            sleep 0.5
        done
    fi
    stop_daemon slurmd
    local p
    for p in $(our_stepds); do stop_pid "$p" "slurmstepd"; done
    stop_daemon slurmctld
    stop_daemon munged
    [[ -n $quiet ]] || log "stopped"
}

cmd_status() {
    local name pid rc=0
    for name in munged slurmctld slurmd; do
        if pid=$(pid_of "$name"); then echo "$name: running (pid $pid)"; else echo "$name: not running"; rc=1; fi
    done
    if ((rc == 0)); then
        NODE=$(hostname -s)
        echo "node $NODE: $(node_state)"
        echo "SLURM_CONF=$CONF"
    fi
    return "$rc"
}

case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    restart) cmd_stop; cmd_start ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    -h | --help | help) usage 0 ;;
    *) usage 2 ;;
esac
