"""What srun, SLURM and the MPI library do when one task is SIGKILLed (slurm/README.md).

Run it as every task of a job step, inside an allocation, e.g. on the local SLURM
(scripts/slurm-local.sh start DIR; export SLURM_CONF=DIR/slurm.conf):

    sbatch -n 4 -t 4 -o ompi.out --wrap "srun --mpi=pmix -K0 -l -n 4 $PWD/.venv/bin/python scripts/srun-death-probe.py"
    sbatch -n 4 -t 4 -o mpich.out --wrap "srun --mpi=pmi2 -K0 -l -n 4 $PWD/.venv-mpich/bin/python scripts/srun-death-probe.py"

Every task says hello to rank 0; then task VICTIM (default 2) SIGKILLs itself. Rank 0 then
tries point-to-point operations with the dead rank, pings the survivors 20 times each, and
asks them to try ``Create_from_group`` over the survivors, ``Comm.Shrink`` and ``Spawn``
(each in a thread, under a deadline), and every rank prints what it saw, timed from its start.

Environment switches (set them on the srun line, e.g. ``env FINALIZE_PMIX=1 srun ...``):
``FINALIZE_PMIX=1`` every rank calls ``PMIx_Finalize`` after the hello (what mixle_mpi does
under srun --mpi=pmix with Open MPI); ``PROBE_SELF=1`` every rank first tries
``Create_from_group`` over its own group; ``SPAWN_FIRST=1`` rank 0 tries ``Spawn`` before
any death; ``VICTIM=r`` the rank that dies.
"""

import os
import signal
import sys
import threading
import time

from mpi4py import MPI

T0 = time.time()
world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
g = world.Dup()
g.Set_errhandler(MPI.ERRORS_RETURN)
VICTIM = int(os.environ.get("VICTIM", "2"))
SURV = [r for r in range(size) if r != VICTIM]


def say(*a):
    print(f"R{rank} t={time.time() - T0:6.2f}", *a, flush=True)


def err(exc):
    return (
        f"MPI error class {exc.Get_error_class()} ({str(exc)[:90]})"
        if isinstance(exc, MPI.Exception)
        else f"{type(exc).__name__}: {str(exc)[:90]}"
    )


def in_thread(fn, timeout):
    box = {}

    def run():
        try:
            box["ok"] = fn()
        except BaseException as exc:
            box["err"] = err(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    if "ok" in box:
        return f"ok {box['ok']}"
    if "err" in box:
        return f"raised {box['err']}"
    return f"HANG (no return within {timeout} s)"


def wait_req(req, timeout):
    end = time.time() + timeout
    try:
        while time.time() < end:
            if req.Test():
                return "completed"
            time.sleep(0.01)
        return f"pending after {timeout} s"
    except MPI.Exception as exc:
        return "raised " + err(exc)


def poll(src, tag, timeout):
    end = time.time() + timeout
    while time.time() < end:
        m = g.improbe(source=src, tag=tag)
        if m is not None:
            return m.recv()
        time.sleep(0.002)
    return None


say(
    f"up: {MPI.get_vendor()} size={size} pid={os.getpid()} provided={MPI.Query_thread()} "
    f"ft_env={os.environ.get('OMPI_MCA_mpi_ft_enable')} step={os.environ.get('SLURM_STEP_ID')} "
    f"pmix_ns={os.environ.get('PMIX_NAMESPACE')} pmi_rank={os.environ.get('PMI_RANK')}"
)


def pmix_finalize():
    import ctypes

    libs = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libpmix.so" in line})
    if not libs:
        return "no libpmix loaded"
    lib = ctypes.CDLL(libs[0])
    lib.PMIx_Finalize.restype = ctypes.c_int
    return f"PMIx_Finalize -> {lib.PMIx_Finalize(None, ctypes.c_size_t(0))} ({libs[0]})"


if os.environ.get("PROBE_SELF"):
    say(
        "Create_from_group(self):",
        in_thread(
            lambda: MPI.Intracomm.Create_from_group(
                MPI.COMM_SELF.Get_group(), stringtag="probe"
            ).Get_size(),
            10,
        ),
    )
if os.environ.get("SPAWN_FIRST") and rank == 0:
    say(
        "Spawn before any death:",
        in_thread(
            lambda: MPI.COMM_SELF.Spawn(
                sys.executable,
                args=["-c", "from mpi4py import MPI; MPI.Comm.Get_parent().Disconnect()"],
                maxprocs=1,
            ).Get_remote_size(),
            20,
        ),
    )
if rank == 0:
    for r in range(1, size):
        g.send("hello", dest=r, tag=1)
    for r in range(1, size):
        g.recv(source=r, tag=2)
    say("all said hello")
    g.send("fin", dest=1, tag=1)
    g.send("fin", dest=2, tag=1)
    g.send("fin", dest=3, tag=1)
    if os.environ.get("FINALIZE_PMIX"):
        say(pmix_finalize())
    time.sleep(1.5)  # the victim dies meanwhile
    say("small isend to dead:", wait_req(g.isend(b"x", dest=VICTIM, tag=5), 3))
    say("1 MB isend to dead:", wait_req(g.isend(bytearray(1 << 20), dest=VICTIM, tag=5), 3))

    def pr():
        end = time.time() + 2
        while time.time() < end:
            if g.Iprobe(source=VICTIM, tag=6):
                return "message?!"
            time.sleep(0.01)
        return "False for 2 s"

    try:
        say("Iprobe(dead):", pr())
    except MPI.Exception as exc:
        say("Iprobe(dead): raised", err(exc))
    try:
        say("irecv(dead):", wait_req(g.irecv(source=VICTIM, tag=6), 2))
    except MPI.Exception as exc:
        say("irecv(dead): raised", err(exc))
    ok = 0
    for i in range(20):
        for r in SURV[1:]:
            g.send(("ping", i), dest=r, tag=3)
        for r in SURV[1:]:
            if poll(r, 4, 2.0) is not None:
                ok += 1
    say(f"ping-pong with survivors after the death: {ok}/{20 * len(SURV[1:])} replies")
    try:
        say("Get_failed:", g.Get_failed().Get_size())
    except BaseException as exc:
        say("Get_failed raised", err(exc))
    for cmd in ("cfg", "shrink"):
        for r in SURV[1:]:
            g.send(cmd, dest=r, tag=3)
        grp = g.Get_group().Excl([VICTIM])
        if cmd == "cfg":
            say(
                "Create_from_group(survivors):",
                in_thread(
                    lambda grp=grp: MPI.Intracomm.Create_from_group(grp, stringtag="x").Get_size(),
                    15,
                ),
            )
        else:
            say("Comm.Shrink:", in_thread(lambda: g.Shrink().Get_size(), 15))
    say(
        "Spawn:",
        in_thread(
            lambda: MPI.COMM_SELF.Spawn(
                sys.executable,
                args=["-c", "from mpi4py import MPI; MPI.Comm.Get_parent().Disconnect()"],
                maxprocs=1,
            ).Get_remote_size(),
            20,
        ),
    )
    for r in SURV[1:]:
        g.send("end", dest=r, tag=3)
    time.sleep(0.5)
    say("done, exiting 0")
    sys.stdout.flush()
    os._exit(0)
else:
    g.recv(source=0, tag=1)
    g.send("hi", dest=0, tag=2)
    g.recv(source=0, tag=1)
    if os.environ.get("FINALIZE_PMIX"):
        say(pmix_finalize())
    if rank == VICTIM:
        time.sleep(0.3)
        say("SIGKILL self")
        os.kill(os.getpid(), signal.SIGKILL)
    while True:
        cmd = poll(0, 3, 60)
        if cmd is None:
            say("heard nothing for 60 s")
            os._exit(3)
        if isinstance(cmd, tuple):
            g.send("pong", dest=0, tag=4)
            continue
        if cmd == "cfg":
            grp = g.Get_group().Excl([VICTIM])
            say(
                "Create_from_group:",
                in_thread(
                    lambda grp=grp: MPI.Intracomm.Create_from_group(grp, stringtag="x").Get_size(),
                    15,
                ),
            )
        elif cmd == "shrink":
            say("Comm.Shrink:", in_thread(lambda: g.Shrink().Get_size(), 15))
        elif cmd == "end":
            say("done, exiting 0")
            sys.stdout.flush()
            os._exit(0)
