"""SLURM batch scripts for mixle_mpi fits, rendered by one pure function.

Three kinds (``KINDS``), one shell skeleton:

- ``ft``: a fault-tolerant single job. ``mixle-mpi run`` starts the ranks with Open MPI's
  ``mpiexec --with-ft ulfm`` inside the allocation (ULFM is not supported under a direct
  ``srun`` launch). ``--no-kill`` keeps the allocation when a node is lost,
  ``--signal=B:USR1@margin`` asks the batch shell to have the fit checkpoint before the time
  limit, ``--requeue`` plus exit code 75 requeues the job, which then resumes to the same bits.
- ``srun``: the same, but the ranks are started by ``srun`` itself (``--mpi=pmix`` for Open
  MPI, ``pmi2`` for MPICH, ``--kill-on-bad-exit=0 --wait=0 --no-kill``) for sites that require it:
  detection by heartbeats only, a spare takes a dead worker's place or its shards migrate
  to the survivors, and the job
  continues on its original communicator (Open MPI) or a ``Create_from_group`` one (MPICH);
  see the rendered comments.
- ``array``: a job array of ``ft`` jobs for best-of-N random restarts, each task with seed
  ``base_seed + SLURM_ARRAY_TASK_ID`` and its own output folder; ``mixle-mpi collect`` then
  picks the best model (:mod:`mixle_mpi.cli.collect`).

After a worker dies the fit continues in one of three ways, chosen at the start and logged:
``ft`` and ``array`` get Open MPI's real ULFM ``Comm.Shrink`` ("ulfm"); ``srun`` gets "keep"
with Open MPI (the original communicator is kept and the dead rank never addressed again:
SLURM's pmix plugin has neither ULFM nor PMIx groups) and the ``Create_from_group``
emulation ("emulated") with MPICH. Under ``srun`` nothing is respawned: a hot spare takes
the dead worker's place, or else its shards move to the survivors for good.

Why the signal takes this route: SLURM sends USR1 to the batch shell only (``B:``). The
shell forwards it to ``mixle-mpi run``, which forwards it to the driver (rank 0) alone, as
soon as the driver has said it can take it (:class:`mixle_mpi.launch.launcher.SignalForwarder`).
Open MPI's mpiexec would pass a USR1 on to every rank, so it is never signalled.

The golden files in ``slurm/`` are ``render(kind)`` with the defaults below; regenerate them
with ``mixle-mpi slurm --write slurm/``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import sys

from mixle_mpi.core import exitcodes
from mixle_mpi.core.atomicfile import write_text
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.validate import check_int

KINDS = ("ft", "srun", "array")
GOLDEN = {"ft": "fit-ft.sbatch", "srun": "fit-srun.sbatch", "array": "best-of-array.sbatch"}

# The fit each task runs when no fit command is given: `mixle-mpi fit` with the job file
# job.toml (in the folder sbatch is run from). Its out_dir and checkpoint come from the job
# file (checkpoints are on by default, in out_dir); --out-dir given here overrides the file's.
# An array task gets its own seed, $SEED, output folder and checkpoint, $OUT_DIR.
DEFAULT_FIT = '"$PY" -m mixle_mpi fit --config job.toml'
OUT_DIR_FLAG = ' --out-dir "$OUT_DIR"'
DEFAULT_ARRAY_FIT = (
    DEFAULT_FIT + ' --out-dir "$OUT_DIR" --checkpoint "$OUT_DIR/checkpoint.h5" --seed "$SEED"'
)
ARRAY_OUT_DIR = "mixle-out"

DEFAULTS = {
    "job_name": "mixle-fit",
    "ntasks": 4,
    "time": "01:00:00",
    "signal_margin": 300,
    "max_requeues": 3,
    "out_dir": None,  # None: the job file's (ft, srun), ARRAY_OUT_DIR (array)
    "python": "python3",
    "array": "0-7",
    "base_seed": 1,
    "fit_cmd": None,  # None: DEFAULT_FIT (ft, srun) or DEFAULT_ARRAY_FIT (array)
    "sbatch": (),  # extra "#SBATCH" options, e.g. ("--partition=debug",)
    "partition": None,  # None: the site's default (no line)
    "account": None,
    "mem": None,
    "nodes": None,
    "ntasks_per_node": None,
    "prologue": (),  # shell lines run before the launch: module load, environment activation
}
# The #SBATCH options the template sets itself (the first five from its flags of the same
# name): an --sbatch line may not set them again.
OWN_DIRECTIVES = ("job-name", "ntasks", "time", "array", "signal", "no-kill", "requeue",
                  "open-mode", "output")  # fmt: skip
FLAGGED = ("job-name", "ntasks", "time", "array", "partition", "account", "mem", "nodes",
           "ntasks-per-node")  # fmt: skip

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_ARRAY = re.compile(r"^\d+(?:-\d+(?::\d+)?)?(?:,\d+(?:-\d+(?::\d+)?)?)*(?:%\d+)?$")
_NAME = re.compile(r"^[A-Za-z0-9._+-]+$")
_NAMES = re.compile(r"^[A-Za-z0-9._+-]+(?:,[A-Za-z0-9._+-]+)*$")  # a partition list
_MEM = re.compile(r"^\d+[KMGT]?$")
_NODES = re.compile(r"^\d+(?:-\d+)?$")
_DIRECTIVE = re.compile(r"^(?:--([a-z][a-z0-9-]*)(?:[= ](\S.*))?|-([A-Za-z])(?:\s*(\S.*))?)$")


def time_limit_seconds(limit: str) -> int:
    """Seconds in a SLURM time limit ("M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S")."""
    m = _TIME.match(str(limit))
    if not m:
        raise ConfigError(
            f"time limit {limit!r} is not a SLURM time; needed e.g. '90' (minutes), "
            "'01:30:00' or '1-00:00:00'"
        )
    days, a, b, c = m.groups()
    a, b, c = int(a), (int(b) if b is not None else None), (int(c) if c is not None else None)
    if days is not None:  # D-H, D-H:M, D-H:M:S
        return int(days) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    if c is not None:  # H:M:S
        return a * 3600 + b * 60 + c
    if b is not None:  # M:S
        return a * 60 + b
    return a * 60  # M


def _one_line(name: str, value: str) -> str:
    value = str(value)
    if not value.strip() or "\n" in value or "\r" in value:
        raise ConfigError(f"{name} must be one non-empty line; found {value!r}")
    return value


def validate(kind: str, opts: dict) -> dict:
    """The options, checked and completed; a ConfigError says what was found and what was needed."""
    if kind not in KINDS:
        raise ConfigError(f"unknown template kind {kind!r}; valid kinds are {', '.join(KINDS)}")
    unknown = sorted(set(opts) - set(DEFAULTS))
    if unknown:
        raise ConfigError(
            f"unknown option(s) {', '.join(unknown)}; valid options are {', '.join(DEFAULTS)}"
        )
    o = {**DEFAULTS, **opts}
    if not _NAME.match(str(o["job_name"])):
        raise ConfigError(
            f"job_name must be letters, digits and ._+- only; found {o['job_name']!r}"
        )
    o["ntasks"] = check_int("ntasks", o["ntasks"], 2, text=True)
    limit = time_limit_seconds(o["time"])
    o["signal_margin"] = check_int("signal_margin", o["signal_margin"], 1, 65535, text=True)
    if o["signal_margin"] >= limit:
        raise ConfigError(
            f"signal_margin ({o['signal_margin']} s) must be shorter than the time limit "
            f"{o['time']!r} ({limit} s): the checkpoint signal would come at the start"
        )
    o["max_requeues"] = check_int("--max-requeues", o["max_requeues"], 0, text=True)
    o["base_seed"] = check_int("base_seed", o["base_seed"], 0, text=True)
    if not _ARRAY.match(str(o["array"])):
        raise ConfigError(
            f"array must be a SLURM index list such as '0-7', '0-15%4' or '1,3,5'; found {o['array']!r}"
        )
    if o["out_dir"] is None and (kind == "array" or "OUT_DIR" in (o["fit_cmd"] or "")):
        o["out_dir"] = ARRAY_OUT_DIR
    for name in ("out_dir", "python"):
        if o[name] is not None:
            _one_line(name, o[name])
    if o["fit_cmd"] is None:
        o["fit_cmd"] = (
            DEFAULT_ARRAY_FIT
            if kind == "array"
            else DEFAULT_FIT + (OUT_DIR_FLAG if o["out_dir"] is not None else "")
        )
    _one_line("fit_cmd", o["fit_cmd"])
    if kind == "array":
        for var in ("SEED", "OUT_DIR"):
            if f"${var}" not in o["fit_cmd"] and f"${{{var}}}" not in o["fit_cmd"]:
                raise ConfigError(
                    f"an array's fit_cmd must use ${var} (each task its own "
                    f"{'seed' if var == 'SEED' else 'output folder'}); found {o['fit_cmd']!r}"
                )
    _check_placement(o)
    o["sbatch"] = tuple(sbatch_directive(s) for s in o["sbatch"])
    o["prologue"] = prologue_lines(o["prologue"])
    return o


def _check_placement(o: dict) -> None:
    """--partition, --account, --mem, --nodes, --ntasks-per-node: each as sbatch takes it."""
    shapes = {
        "partition": (_NAMES, "a partition name, or several separated by commas"),
        "account": (_NAME, "an account name (letters, digits and ._+-)"),
        "mem": (_MEM, "megabytes, or a number with K, M, G or T (e.g. 4G)"),
        "nodes": (_NODES, "a node count or a range such as 2-3"),
    }
    for name, (shape, need) in shapes.items():
        if o[name] is not None and not shape.match(str(o[name])):
            raise ConfigError(f"--{name} must be {need}; found {o[name]!r}")
    if o["ntasks_per_node"] is not None:
        o["ntasks_per_node"] = check_int("--ntasks-per-node", o["ntasks_per_node"], 1, text=True)


def sbatch_directive(text: str) -> str:
    """One ``--sbatch`` value as an #SBATCH option (pure): ``--partition=debug`` as it is,
    ``partition=debug`` with its dashes; refused when it is not an option sbatch could read
    or sets what the template or one of its flags sets."""
    given = _one_line("--sbatch", text).strip()
    text = given if given.startswith("-") else "--" + given
    m = _DIRECTIVE.match(text)
    if not m:
        raise ConfigError(
            f"--sbatch {given!r} is not an sbatch option; needed one such as --partition=debug, "
            "partition=debug or -p debug"
        )
    name = m.group(1)
    if name in OWN_DIRECTIVES:
        how = f"give `mixle-mpi slurm --{name}`" if name in FLAGGED else "the template sets it"
        raise ConfigError(f"--sbatch {text!r} sets --{name}: {how} instead")
    return text


def _no_twice(lines: list[str]) -> None:
    """Refuse an #SBATCH option given twice (a flag and an --sbatch line)."""
    seen: set[str] = set()
    for line in lines:
        name = re.split(r"[= ]", line[2:])[0] if line.startswith("--") else line[:2]
        if name in seen:
            raise ConfigError(
                f"#SBATCH {name} is given twice (a flag and --sbatch {line!r}): give it once"
            )
        seen.add(name)


def prologue_lines(prologue) -> tuple[str, ...]:
    """The prologue as lines (pure): text or lines, each kept as written; no line may be a
    ``#SBATCH`` one (sbatch reads those only above the first command: use ``sbatch``)."""
    lines = prologue.splitlines() if isinstance(prologue, str) else [str(x) for x in prologue]
    for line in lines:
        if "\r" in line or line.lstrip().upper().startswith("#SBATCH"):
            raise ConfigError(
                f"a prologue line must be a shell line, not {line!r}; give #SBATCH options with --sbatch"
            )
    while lines and not lines[-1].strip():
        lines.pop()
    return tuple(lines)


PROLOGUE_HEAD = (
    "# Prologue: the site's setup (module load, environment activation), run before `set -u`\n"
    "# (module scripts read unset variables). The launcher uses the first mpiexec on PATH after it."
)


_HEADER = {
    "ft": """\
# mixle_mpi: fault-tolerant fit (kind "ft").
#
# The ranks are started by `mixle-mpi run`, i.e. Open MPI's mpiexec --with-ft ulfm inside
# this allocation: a dead rank is reported within milliseconds and the communicator really
# shrinks. ULFM is not supported when ranks are launched directly by srun; use the "srun"
# kind there (heartbeat detection only).""",
    "srun": """\
# mixle_mpi: fit launched by srun (kind "srun"), for sites that require srun.
#
# The ranks are started by `mixle-mpi run --launcher srun`, i.e. srun --mpi=pmix (Open MPI) or
# --mpi=pmi2 (MPICH) with --kill-on-bad-exit=0 --wait=0 --no-kill. Measured on SLURM 22.05
# with the Open MPI 5.0.11 and MPICH 5.0.2 wheels (slurm/README.md):
# - A lost node is survived in the job: srun's --no-kill keeps the step (the sbatch
#   --no-kill below keeps the allocation), its ranks are failed and recovered like any.
# - No ULFM: a dead rank is detected by heartbeats only (after heartbeat_timeout, 1 s by default).
# - --kill-on-bad-exit=0 (-K0) and --wait=0 keep the other tasks alive when one dies; a site's
#   KillOnBadExit=1 would end the step at the first death, its WaitTime that many seconds later.
# - A worker death is survived: its shards are recomputed, then a hot spare takes its place
#   (spares = N in job.toml, or MIXLE_MPI_SPARES=N: the last N of --ntasks), or else they
#   move for good to the survivors (no respawn: Spawn does not work under srun).
# - Open MPI keeps its communicator (continuation method "keep": SLURM's pmix plugin has no
#   PMIx groups to shrink it with); each rank leaves SLURM's PMIx server after the start,
#   since the plugin cancels the whole step when a rank dies still connected. MPICH shrinks
#   it with Create_from_group ("emulated"). The fitted model is bit-identical to a
#   failure-free fit under "ft".
# - A rank that dies while the job starts (before it left PMIx) still ends the step: rerun.""",
    "array": """\
# mixle_mpi: best-of-N random restarts as a job array (kind "array").
#
# Each array task is one fault-tolerant fit (as in the "ft" kind: mpiexec --with-ft ulfm
# inside the allocation; ULFM is not supported under a direct srun launch) with seed
# BASE_SEED + SLURM_ARRAY_TASK_ID and its own output folder OUT_BASE/task-<id>. When all
# tasks have ended, pick the model with the highest final log-likelihood:
#   sbatch --dependency=afterany:<array job id> --wrap '<python> -m mixle_mpi collect <out_dir>'
# or run `mixle-mpi collect <out_dir>` by hand.""",
}

_COMMON_DOC = """\
#
# - --no-kill: the allocation survives the loss of a node; the fit goes on without it.
# - --signal=B:USR1@{margin}: {margin} s before the time limit SLURM sends USR1 to this shell
#   only. It is forwarded to `mixle-mpi run`, which passes it to the driver (rank 0) alone;
#   the driver ends its iteration, writes a checkpoint and exits 75. The margin must cover an
#   iteration, a checkpoint write and SLURM's coarse (about 30 s) check of time limits.
# - --requeue: on exit 75 this script requeues the job (scontrol requeue) while
#   SLURM_RESTART_COUNT < {max_restarts} (--max-requeues); the next start resumes from the checkpoint,
#   to the same bits.
# Exit codes: {ok} the fit finished; {ck} checkpointed but not requeued (restart bound reached or
# requeue refused: resubmit to resume); 1 failed, 2 bad input, 70-72 a worker gave up,
# 73 never started, 74 could not reconfigure and 77 a checkpoint write timed out (each already
# run again once by the launcher: resubmit to resume).
#
# Rendered by `mixle-mpi slurm {kind}`; regenerate it instead of editing by hand."""

_BODY = """\
trap '' USR1 TERM  # until the launcher is up: a signal now must not end this script
{prologue}set -u
PY={python}
MAX_RESTARTS={max_restarts}
RESTARTS=${{SLURM_RESTART_COUNT:-0}}
{setup}
echo "[mixle_mpi] job $SLURM_JOB_ID on $(hostname -s): start $((RESTARTS + 1))," \\
     "restart count $RESTARTS of at most $MAX_RESTARTS"{announce}

# Forward USR1/TERM to `mixle-mpi run`, which passes them to the driver only. The launcher
# starts with both ignored (so one that comes before its handlers are in cannot kill it) and
# runs in the background, because bash runs a trap only between commands.
"$PY" -m mixle_mpi run{launch} -n "${{SLURM_NTASKS:-{ntasks}}}" -- {fit_cmd} &
launcher=$!
trap 'kill -s USR1 "$launcher" 2>/dev/null' USR1
trap 'kill -s TERM "$launcher" 2>/dev/null' TERM
while kill -0 "$launcher" 2>/dev/null; do wait "$launcher"; done
wait "$launcher"; rc=$?

case $rc in
  {ok})
    echo "[mixle_mpi] the fit finished (exit {ok})"
    exit {ok} ;;
  {ck})
    if [ "$RESTARTS" -lt "$MAX_RESTARTS" ]; then
      echo "[mixle_mpi] checkpointed (exit {ck}): requeueing job $SLURM_JOB_ID" \\
           "(restart $((RESTARTS + 1)) of at most $MAX_RESTARTS)"
      if scontrol requeue "$SLURM_JOB_ID"; then exit {ok}; fi
      echo "[mixle_mpi] scontrol requeue failed (is JobRequeue allowed?); resubmit this script to resume" >&2
    else
      echo "[mixle_mpi] checkpointed (exit {ck}) but the job has already restarted $RESTARTS times" \\
           "(--max-requeues $MAX_RESTARTS): not requeueing; resubmit this script to resume from the checkpoint" >&2
    fi
    exit {ck} ;;
  *)
    echo "[mixle_mpi] the fit failed with exit code $rc (1 failed, 2 bad input, 70-72 a worker gave up," \\
         "73, 74 and 77 resubmit to resume); see above" >&2
    exit "$rc" ;;
esac
"""


def render(kind: str, **opts) -> str:
    """The batch script of ``kind`` (one of ``KINDS``) with ``opts`` over ``DEFAULTS`` (pure)."""
    o = validate(kind, opts)
    array = kind == "array"
    lines = [
        "#!/bin/bash",
        _HEADER[kind],
        _COMMON_DOC.format(
            margin=o["signal_margin"],
            max_restarts=o["max_requeues"],
            kind=kind,
            ok=exitcodes.OK,
            ck=exitcodes.CHECKPOINTED,
        ),
    ]
    sbatch = [
        f"--job-name={o['job_name']}",
        f"--ntasks={o['ntasks']}",
        f"--time={o['time']}",
        "--no-kill",
        "--requeue",
        f"--signal=B:USR1@{o['signal_margin']}",
        "--open-mode=append",
        f"--output={'%x-%A_%a' if array else '%x-%j'}.out",
    ]
    if array:
        sbatch.append(f"--array={o['array']}")
    for name in ("partition", "account", "mem", "nodes", "ntasks_per_node"):
        if o[name] is not None:
            sbatch.append(f"--{name.replace('_', '-')}={o[name]}")
    _no_twice([*sbatch, *o["sbatch"]])
    lines += [f"#SBATCH {s}" for s in (*sbatch, *o["sbatch"])]
    out = shlex.quote(o["out_dir"]) if o["out_dir"] is not None else None
    if array:
        setup = (
            f"BASE_SEED={o['base_seed']}\n"
            "SEED=$((BASE_SEED + SLURM_ARRAY_TASK_ID))\n"
            f"OUT_DIR={out}/task-$SLURM_ARRAY_TASK_ID\n"
            'mkdir -p "$OUT_DIR"\n'
        )
    elif out is not None:
        setup = f'OUT_DIR={out}\nmkdir -p "$OUT_DIR"\n'
    else:
        setup = ""
    lines.append("")
    lines.append(
        _BODY.format(
            python=shlex.quote(o["python"]),
            max_restarts=o["max_requeues"],
            setup=setup,
            launch=" --launcher srun" if kind == "srun" else "",
            ntasks=o["ntasks"],
            announce=(
                '\necho "[mixle_mpi] array task $SLURM_ARRAY_TASK_ID: seed $SEED, output $OUT_DIR"'
                if array
                else ""
            ),
            fit_cmd=o["fit_cmd"],
            prologue="\n".join((PROLOGUE_HEAD, *o["prologue"], "")) + "\n" if o["prologue"] else "",
            ok=exitcodes.OK,
            ck=exitcodes.CHECKPOINTED,
        )
    )
    return "\n".join(lines)


# A pinned example beside the defaults: the ft kind on a site's MPI, loaded as a module into
# a shared environment (docs/user-guide.md "Your site's MPI").
MODULES_PROLOGUE = (
    "module purge",
    "module load openmpi",
    "source /shared/envs/mixle/bin/activate",
)
EXAMPLES = {"fit-ft-modules.sbatch": ("ft", {"prologue": MODULES_PROLOGUE})}


def golden_files() -> dict[str, str]:
    """Every golden file's name and its text: each kind with the defaults, and the examples."""
    files = {GOLDEN[kind]: render(kind) for kind in KINDS}
    files.update({name: render(kind, **opts) for name, (kind, opts) in EXAMPLES.items()})
    return files


def write_golden(directory: str) -> list[str]:
    """Write the golden files (``golden_files``) to ``directory``; returns the paths."""
    os.makedirs(directory, exist_ok=True)
    paths = []
    for name, text in golden_files().items():
        path = os.path.join(directory, name)
        write_text(path, text)
        paths.append(path)
    return paths


def _options(args) -> dict:
    """The render options given on the command line (absent ones keep their defaults)."""
    names = [n for n in DEFAULTS if n not in ("sbatch", "prologue")]
    opts = {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}
    opts.setdefault("python", sys.executable)  # the Python running this has mixle_mpi
    if args.sbatch:
        opts["sbatch"] = tuple(args.sbatch)
    if args.prologue:
        opts["prologue"] = tuple(
            line for value in args.prologue for line in read_prologue(value).splitlines()
        )
    return opts


def read_prologue(value: str) -> str:
    """A ``--prologue`` value: the text of the file it names, else the value as a line."""
    if os.path.isfile(value):
        with open(value, encoding="utf-8") as f:
            return f.read()
    return value


def _cmd_slurm(args) -> int:
    if args.write:
        for path in write_golden(args.write):
            print(path)
        return 0
    if args.kind is None:
        raise ConfigError(f"no template kind given; valid kinds are {', '.join(KINDS)}")
    text = render(args.kind, **_options(args))
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        write_text(args.output, text)
        sys.stderr.write(f"wrote {args.output}; submit it with: sbatch {args.output}\n")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kind", nargs="?", help=f"one of: {', '.join(KINDS)}")
    p.add_argument("-o", "--output", default=None, help="write the script here (default: stdout)")
    p.add_argument(
        "--write",
        metavar="DIR",
        default=None,
        help="write every kind, with the defaults, into DIR (as slurm/*.sbatch in the source)",
    )
    d = DEFAULTS
    p.add_argument("--job-name", dest="job_name", help=f"default {d['job_name']}")
    p.add_argument(
        "--ntasks", help=f"MPI ranks (driver + workers, at least 2); default {d['ntasks']}"
    )
    p.add_argument("--time", help=f"SLURM time limit; default {d['time']}")
    p.add_argument(
        "--signal-margin",
        dest="signal_margin",
        help=f"seconds before the limit at which the fit checkpoints and exits 75; default {d['signal_margin']}",
    )
    p.add_argument(
        "--max-requeues",
        dest="max_requeues",
        help=f"requeue at most this many times (was --max-restarts); default {d['max_requeues']}",
    )
    p.add_argument("--partition", help="#SBATCH --partition (default: the site's)")
    p.add_argument("--account", help="#SBATCH --account (default: the site's)")
    p.add_argument("--mem", help="#SBATCH --mem, memory per node, e.g. 16G (default: the site's)")
    p.add_argument(
        "--nodes",
        help="#SBATCH --nodes, a count or a range such as 2-3 (default: as SLURM places --ntasks)",
    )
    p.add_argument(
        "--ntasks-per-node",
        dest="ntasks_per_node",
        help="#SBATCH --ntasks-per-node (default: none). A requeue after a node loss then waits "
        "for as many nodes as before; --nodes 2-3 with --ntasks lets it start on fewer",
    )
    p.add_argument(
        "--out-dir",
        dest="out_dir",
        help=f"output folder ($OUT_DIR), overriding the job file's out_dir; default: the job file's "
        f"(ft, srun), {ARRAY_OUT_DIR} (array: one task-<id> folder each)",
    )
    p.add_argument(
        "--python",
        help="the Python that has mixle_mpi, on the compute nodes; default: the one running "
        "this command",
    )
    p.add_argument("--array", help=f"array indices (kind array); default {d['array']}")
    p.add_argument(
        "--base-seed",
        dest="base_seed",
        help=f"seed of task 0 (kind array); default {d['base_seed']}",
    )
    p.add_argument(
        "--fit-cmd",
        dest="fit_cmd",
        help="the fit command, one shell line; may use $PY, $OUT_DIR and (array) $SEED. "
        f"Default: {DEFAULT_FIT}",
    )
    p.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help="an extra #SBATCH option: --sbatch --constraint=ib, --sbatch constraint=ib or "
        "--sbatch='-C ib' (repeatable)",
    )
    p.add_argument(
        "--prologue",
        action="append",
        default=[],
        metavar="FILE_OR_LINE",
        help="shell lines run before the launch, for the site's setup: a file of them, or one "
        "line, e.g. --prologue='module load openmpi' --prologue='source ~/env/bin/activate' "
        "(repeatable; the launcher then uses the first mpiexec on PATH)",
    )
    p.set_defaults(func=_cmd_slurm)


def add_subcommand(subparsers) -> None:
    """Register ``mixle-mpi slurm``."""
    add_arguments(
        subparsers.add_parser(
            "slurm",
            help="render a SLURM batch script (kinds: " + ", ".join(KINDS) + ")",
            description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
    )


def main(argv=None) -> int:
    """``python -m mixle_mpi.cli.slurm``: the same as ``mixle-mpi slurm``."""
    from mixle_mpi.cli.cmdrun import module_main

    return module_main("slurm", __doc__, add_arguments, argv)


if __name__ == "__main__":
    sys.exit(main())
