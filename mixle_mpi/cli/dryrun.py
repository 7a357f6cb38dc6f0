"""``mixle-mpi fit --dry-run``: what a fit would do, without starting MPI.

A mistake found here costs a second instead of a queue wait and an allocation. The dry
run resolves the configuration as ``fit`` does, reads only the data's headers (HDF5 and
.npy headers, a CSV's first records and its line count), builds the estimator, and prints
the layout (shards S, shards per worker), a rough memory need per rank, the MPI found and
the exact launcher command. It never calls ``MPI_Init``: mpi4py is loaded with
initialization off, only to name the MPI library it is linked to. Exit 0 when the fit
could start, 2 (with every problem listed) when it could not.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass

from mixle_mpi.core.errors import ConfigError, MixleMPIError
from mixle_mpi.core.malloc import peak_rss_mb

MB = 1 << 20
MODEL_COPIES = 3  # a rank holds the model, one shard's statistics and the running fold of them


@dataclass(frozen=True)
class Layout:
    workers: int | None  # None: the rank count is not known (no -n, no SLURM_NTASKS)
    num_shards: int
    per_worker: tuple[int, int] | None  # fewest and most shards a worker starts with
    rows_per_shard: int
    driver: int = 0  # shards the driver computes itself (driver_computes)
    driver_refused: int = 0  # ... the shards of its share, when over driver_share_max_bytes


def rank_count(args, environ=os.environ) -> tuple[int | None, str]:
    """The ranks the fit would run on, and where that number came from."""
    if getattr(args, "n", None) is not None:
        return args.n, "-n"
    if environ.get("SLURM_NTASKS", "").isdigit():
        return int(environ["SLURM_NTASKS"]), "SLURM_NTASKS"
    return None, ""


def layout(
    rows: int,
    num_shards: int | None,
    ranks: int | None,
    driver_computes: bool = False,
    row_bytes: int = 0,
    driver_max_bytes: int | None = None,
) -> Layout:
    """Shards and their placement as the handle makes them (pure); ``row_bytes`` estimates a
    shard's stored bytes for the cap on the driver's share (``driver_share_max_bytes``)."""
    from mixle_mpi.core.layout import default_num_shards
    from mixle_mpi.policy.placement import driver_share, initial_placement

    if ranks is not None and ranks < 2:
        raise ConfigError(
            f"found {ranks} rank(s) but needs at least 2: rank 0 drives and ranks 1.. compute"
        )
    workers = None if ranks is None else ranks - 1
    s = num_shards if num_shards is not None else default_num_shards(rows)
    if rows < s:
        raise ConfigError(f"found {rows} observations but num_shards={s} needs at least {s}")
    per, here, refused = None, [], 0
    if workers is not None:
        here = driver_share(
            s, workers, driver_computes, lambda _: -(-rows // s) * row_bytes, driver_max_bytes
        )
        refused = 0 if here else len(driver_share(s, workers, driver_computes))
        counts = [len(v) for v in initial_placement(s, range(1, workers + 1), skip=here).values()]
        per = (min(counts), max(counts))
    return Layout(workers, s, per, -(-rows // s), len(here), refused)


def memory(shape, lay: Layout, model: tuple[int, int] = (0, 1)) -> dict[str, float]:
    """Rough bytes per rank (pure): ``shape`` (a :class:`mixle_mpi.cli.datainput.DataShape`)
    and ``model`` (``modelspec.model_bytes``: parameter bytes, components). A worker holds its
    shards, the model a few times over and a shard's responsibilities; the driver holds the
    whole data when it reads it into memory (CSV, sequences), else one store block at a time,
    and the model once per worker whose statistics may wait for their turn in the fold."""
    from mixle_mpi.storage.store import WRITE_BLOCK_BYTES

    row = shape.values * shape.value_bytes
    params, k = model
    most = lay.per_worker[1] if lay.per_worker else 1
    block_rows = max(1, int(WRITE_BLOCK_BYTES // max(1, row)))
    driver_rows = shape.rows if shape.driver_reads_all else min(shape.rows, block_rows)
    workers = lay.workers or 1
    return {
        "worker": most * lay.rows_per_shard * row
        + MODEL_COPIES * params
        + lay.rows_per_shard * k * 8,
        "driver": (driver_rows + lay.driver * lay.rows_per_shard) * row
        + (MODEL_COPIES + workers) * params,
        "total": shape.rows * row,
        "row": row,
        "model": params,
    }


def memory_problem(mem: dict, available: float, total: float) -> str | None:
    """Why the fit cannot fit in this host's memory, or None (pure): the driver's need against
    what is free now, a worker's against the whole memory of a host like this one."""
    if mem["row"] > available:
        return (
            f"one row is about {_fmt(mem['row'])}, more than the {_fmt(available)} free on this host: "
            "it cannot be held at all"
        )
    if mem["driver"] > available:
        return (
            f"the driver would need about {_fmt(mem['driver'])} (model {_fmt(mem['model'])}), more than the "
            f"{_fmt(available)} free on this host"
        )
    if mem["worker"] > total:
        return (
            f"each worker would need about {_fmt(mem['worker'])} (model {_fmt(mem['model'])}), more than "
            f"this host's {_fmt(total)} of memory: use more ranks (fewer shards each) or a smaller model"
        )
    return None


def host_memory() -> tuple[float, float]:
    """(bytes free now, bytes in all) on this host."""
    import psutil

    vm = psutil.virtual_memory()
    return float(vm.available), float(vm.total)


def check_memory(shape, lay: Layout, model: tuple[int, int]) -> None:
    """Refuse (exit 2) a fit whose rough estimate does not fit this host, with the estimate."""
    problem = memory_problem(memory(shape, lay, model), *host_memory())
    if problem:
        raise ConfigError(
            f"{problem}. The estimate is rough (see `mixle-mpi fit --dry-run`); "
            "--no-memory-check starts the fit anyway"
        )


def _mpiexec_line(exe: str) -> str:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"({exe} --version failed: {exc})"
    lines = (out.stdout + out.stderr).strip().splitlines()
    versioned = [ln for ln in lines if re.search(r"\d+\.\d+", ln)]  # Hydra's first line is a title
    return " ".join(versioned[0].split()) if versioned else "(no version in its output)"


def mpi_library() -> str:
    """The MPI library mpi4py is linked to, named without initializing MPI."""
    import mpi4py

    mpi4py.rc.initialize = False
    mpi4py.rc.finalize = False
    from mpi4py import MPI

    first = MPI.Get_library_version().strip().splitlines()[0]
    return " ".join(first.split(",")[0].split())  # "Open MPI v5.0.11", "MPICH Version: 5.0.2"


def _fmt(nbytes: float) -> str:
    if nbytes < MB:
        return f"{nbytes / 1024:.0f} KB"
    return f"{nbytes / MB:.1f} MB" if nbytes < 10 * (1 << 30) else f"{nbytes / (1 << 30):.1f} GB"


def _report_mpi(args, cfg, ranks: int | None, problems: list[str]) -> list[str]:
    """The MPI lines: library, mpiexec and flavor, and the launch command."""
    from mixle_mpi.cli.jobconfig import to_argv
    from mixle_mpi.launch import launcher

    lines = [f"MPI library (mpi4py): {mpi_library()}"]
    try:
        exe, why = launcher.choose_mpiexec(args.mpiexec, args.mpi)
        flavor = args.mpi or launcher.detect_flavor(exe)
        caps, placement = launcher.launch_caps(exe, flavor, ranks or 2, None, os.environ)
    except (ConfigError, OSError, subprocess.SubprocessError) as exc:
        problems.append(f"MPI: {exc}")
        return lines + [f"mpiexec: NOT USABLE: {exc}"]
    lines.append(f"mpiexec: {exe} ({flavor}: {_mpiexec_line(exe)}; {why})")
    fit_cmd = [sys.executable, "-m", "mixle_mpi", "fit", *to_argv(cfg)]
    typo = (
        None
        if ranks is None
        else launcher.too_many_ranks(
            ranks, launcher.usable_cores(), getattr(args, "allow_many_ranks", False)
        )
    )
    if typo:
        problems.append(typo)
    if ranks is None:
        lines.append("launch: under mpiexec/srun every rank runs: " + shlex.join(fit_cmd))
    else:
        argv = launcher.build_command(exe, flavor, ranks, fit_cmd, caps=caps, placement=placement)
        lines.append("launch: " + shlex.join(argv))
    return lines


def _layout_match(saved: int | None, lay: Layout | None) -> tuple[str, bool]:
    """How a checkpoint's shard count compares with this run's: (phrase, resume refused)."""
    if lay is None:
        return (
            f"it has num_shards={saved}: pass --num-shards {saved} to resume on any rank count",
            False,
        )
    if saved == lay.num_shards:
        return "same layout", False
    return (
        f"it has num_shards={saved} but this run has {lay.num_shards}: pass --num-shards {saved} to resume",
        True,
    )


def _checkpoint_line(path: str, cfg, lay: Layout | None, problems: list[str]) -> str:
    """What the fit would do with one checkpoint path; what would stop it goes to ``problems``."""
    from mixle_mpi.storage import checkpoint

    parent = os.path.dirname(os.path.abspath(path))
    if parent == os.path.abspath(cfg.out_dir) and not os.path.isdir(parent):
        return f"checkpoint {path}: none yet (its folder is the out_dir, which the fit creates)"
    checkpoint.check_writable(path)
    exists = os.path.exists(path) or os.path.exists(path + ".prev")
    if cfg.resume == "no":
        return f"checkpoint {path}: resume=no: the fit starts afresh" + (
            " and overwrites it" if exists else ""
        )
    fallback: list[str] = []
    try:
        state = checkpoint.read(
            path, on_fallback=lambda p, why: fallback.append(f"{path} is damaged ({why}); ")
        )
    except checkpoint.CheckpointError as exc:
        problems.append(str(exc))
        return f"checkpoint {path}: damaged, and no good .prev: a resume would fail"
    if state is None:
        if cfg.resume == "yes":
            problems.append(f"resume=yes but there is no checkpoint at {path!r}")
        return f"checkpoint {path}: none yet; the fit starts afresh"
    match, refused = _layout_match(state.layout.get("num_shards"), lay)
    if refused:
        problems.append(f"{path}: {match}")
    where = f"{fallback[0]}falls back to {path}.prev, which " if fallback else ""
    return (
        f"checkpoint {path}: {where}resumes after iteration {state.iteration}"
        f"{' (finished)' if state.finished else ''}; {match}"
    )


def _report_checkpoint(cfg, lay: Layout | None, problems: list[str]) -> list[str]:
    from mixle_mpi.cli.restartpaths import restart_checkpoints

    if not cfg.checkpoint:
        return ["checkpoint: none (--checkpoint not given)"]
    return [
        _checkpoint_line(path, cfg, lay, problems)
        for path in restart_checkpoints(cfg.checkpoint, cfg.restarts)
    ]


def _layout_line(lay: Layout, ranks: int | None, origin: str) -> str:
    who = (
        f"{ranks} ranks ({origin}) = 1 driver + {lay.workers} workers"
        if ranks is not None
        else "rank count unknown (give -n N to see the split over workers)"
    )
    per = ""
    if lay.per_worker:
        low, high = lay.per_worker
        per = (
            f"; {low}{'' if low == high else f'-{high}'} shard{'s' if high > 1 else ''} per worker"
        )
    if lay.driver:
        per += f", {lay.driver} computed by the driver (driver_computes)"
    elif lay.driver_refused:
        per += (
            f"; the driver computes none: its share, {lay.driver_refused} shards, is over "
            "driver_share_max_bytes"
        )
    return f"layout: {who}; S = {lay.num_shards} shards of about {lay.rows_per_shard} rows{per}"


def _memory_lines(shape, lay: Layout, model: tuple[int, int], problems: list[str]) -> list[str]:
    mem = memory(shape, lay, model)
    problem = memory_problem(mem, *host_memory())
    if problem:
        problems.append(problem)
    how = (
        "it reads the whole data before writing the shard store"
        if shape.driver_reads_all
        else "it streams the data into the shard store block by block"
    )
    runtime = peak_rss_mb() * MB
    return [
        f"memory (rough, data and model): each worker about {_fmt(mem['worker'])}, the driver about "
        f"{_fmt(mem['driver'])} ({how}); all the data {_fmt(mem['total'])}, the model {_fmt(mem['model'])}",
        f"memory per rank for Python, numpy, h5py and mixle: about {_fmt(runtime)} (measured in this process)",
    ]


def folder_problem(folder: str) -> str | None:
    """Why ``folder`` could not be made or written, or None (reads the file system only)."""
    path = os.path.abspath(folder)
    if os.path.exists(path) and not os.path.isdir(path):
        return f"the out-dir {folder!r} is a file, not a folder"
    existing = path
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"the out-dir {folder!r} cannot be created: {existing!r} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = "written" if existing == path else "created"
        return f"the out-dir {folder!r} cannot be {verb}: no write permission in {existing!r}"
    return None


def _outputs_line(cfg, problems: list[str]) -> str:
    from mixle_mpi.core.joblock import check_free

    problem = folder_problem(cfg.out_dir)
    if problem:
        problems.append(problem)
    elif os.path.isdir(cfg.out_dir):
        try:
            check_free(cfg.out_dir, "output")
        except MixleMPIError as exc:
            problems.append(str(exc))
    state = "exists" if os.path.isdir(cfg.out_dir) else "will be created"
    return (
        f"outputs: {cfg.out_dir} ({state}): model.json, summary.json, events.jsonl, progress.json"
        + (", fit.png" if cfg.plot else "")
    )


def report(args, lines: list[str], problems: list[str]) -> None:
    """Append the report to ``lines`` step by step (so that what was found before an error
    is still shown) and what would stop the fit to ``problems``; errors raise."""
    from mixle_mpi.cli import preflight
    from mixle_mpi.cli.jobconfig import from_args_all, resolved_settings
    from mixle_mpi.fitting import modelspec

    cfg, wrong = from_args_all(args)  # a wrong option keeps its default: the rest is checked
    problems.extend(wrong)
    found = preflight.check(cfg, every_row=True)
    if found.spec is not None:
        lines.append(
            f"fit: {found.spec.text}, max_its {cfg.max_its}, seed {cfg.seed}, restarts {cfg.restarts}"
        )
    if found.shape is not None:
        lines.append(f"data: {found.shape.describe}")
    if found.checked is not None:
        rows, seconds = found.checked
        lines.append(f"data: every value of {rows} rows read and good, in {seconds:.1f} s")
    if found.errors:
        problems.extend(found.problems)
        return
    spec, shape = found.spec, found.shape
    ranks, origin = rank_count(args)
    settings = resolved_settings(cfg)
    lay = layout(
        shape.rows,
        cfg.num_shards,
        ranks,
        settings.driver_computes,
        shape.values * shape.value_bytes,
        settings.driver_share_max_bytes,
    )
    lines.append(_layout_line(lay, ranks, origin))
    lines += _memory_lines(shape, lay, modelspec.model_bytes(spec, shape.ncols), problems)
    lines += _report_mpi(args, cfg, ranks, problems)
    lines += _report_checkpoint(cfg, lay, problems)
    lines.append(_outputs_line(cfg, problems))


def dry_run(args) -> int:
    """The ``fit --dry-run`` entry: print the report; exit 2 if the fit could not start."""
    lines, problems = ["dry run: nothing was launched"], []
    try:
        report(args, lines, problems)
    except MixleMPIError as exc:
        problems.append(str(exc))
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    for problem in problems:
        sys.stderr.write(f"mixle-mpi fit --dry-run: error: {problem}\n")
    return 2 if problems else 0
