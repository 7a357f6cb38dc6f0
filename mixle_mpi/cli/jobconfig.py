"""The settings of one ``mixle-mpi fit``: defaults, then a TOML file, then flags.

A job file keeps a fit reproducible and reviewable; flags override it for one run. Every
key is checked here, before any rank does work, and every error says what was found and
what was needed. Pure: no MPI, no data access.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from dataclasses import asdict, dataclass, fields

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.fitting.cadence import AUTO as AUTO_CHECKPOINT, CHECKPOINT_NAME  # out_dir/checkpoint.h5 unless --no-checkpoint


@dataclass
class FitConfig:
    data: str = ""
    model: str = ""
    columns: str | None = None
    out_dir: str = "mixle_mpi_fit"
    num_shards: int | None = None
    sub_chunks: int = 1
    max_its: int = 100
    delta: float | None = 1e-9
    seed: int = 1
    init_p: float = 0.1
    restarts: int = 1
    max_retries: int = 2
    heartbeat_period: float | None = None
    heartbeat_timeout: float | None = None
    stall_timeout: float | None = None
    respawn: bool | None = None
    respawn_wait: bool | None = None
    spares: int | None = None
    failover: bool | None = None
    driver_computes: bool | None = None
    checkpoint: str | None = AUTO_CHECKPOINT
    checkpoint_every: int | None = None
    checkpoint_seconds: float | None = None
    resume: str = "auto"
    plot: bool = False
    progress: str = "auto"
    keep_store: bool = False
    memory_check: bool = True


# The built-in default job: `mixle-mpi demo`, and `mixle-mpi chaos` without --data.
DEMO_JOB = {"data": "builtin:iris", "columns": "0:4", "model": "gmm:k=3,cov=full", "max_its": "40",
            "init_p": "0.5", "num_shards": "6", "seed": "3"}


HELP = {
    "data": "PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris (required)",
    "model": "gmm:k=K[,cov=diag|full], poisson:k=K, hmm:states=S, composite:k=K,parts=a+b, or json:FILE (required)",
    "columns": "CSV columns to use: names or indices, e.g. 0:4 or x,y",
    "out_dir": "where model.json, summary.json, events.jsonl, progress.json (and fit.png) go",
    "num_shards": "shards S (default: from the data alone, ceil(rows/10000) within [16, 256], never more than the rows); S fixes the bits, not the rank count",
    "sub_chunks": "sub-chunks per shard",
    "max_its": "EM iterations at most",
    "delta": "stop when the log-likelihood gains less than this (0 or 'none': run max_its)",
    "seed": "seed of the random initialization (restart r uses seed + r)",
    "init_p": "fraction of rows used by the random initialization",
    "restarts": "random restarts; restart r uses seed + r, the best final log-likelihood wins, and with "
                "--checkpoint ck.h5 each restart keeps its own checkpoint ck.r0.h5, ck.r1.h5, ... "
                "(inspect accepts ck.h5 for all of them)",
    "max_retries": "failures after which a worker rank is blacklisted",
    "heartbeat_period": "seconds between heartbeats",
    "heartbeat_timeout": "seconds of silence before a rank is declared dead",
    "stall_timeout": "seconds a busy worker may go without progress (one sub-chunk) before it is failed as stuck",
    "respawn": "respawn failed workers (else their shards migrate)",
    "respawn_wait": "the fit waits for a replacement to be set up and loaded (else it joins in the background "
                    "while the survivors carry its shards)",
    "spares": "extra ranks started idle; a spare takes a failed worker's place at once, without Spawn "
              "(with -n N, N + spares ranks are launched)",
    "failover": "if the driver (rank 0) dies, the lowest surviving rank takes over and resumes from the "
                "checkpoint, in the same job (under mpiexec and srun); on whenever a checkpoint is written, "
                "unless --no-failover or MIXLE_MPI_FAILOVER=0",
    "driver_computes": "the driver (rank 0) computes a worker's share of the shards itself: every rank "
                       "computes, as in mixle's own MPI handle; a failure seen in a round is acted on once "
                       "the driver's current shard is done. Only while that share is at most "
                       "MIXLE_MPI_DRIVER_SHARE_MAX_BYTES (1 MiB) stored: above, the driver holds no data",
    "checkpoint": "HDF5 checkpoint path; an existing one is resumed (none, or --no-checkpoint: no checkpoints)",
    "checkpoint_every": "also a checkpoint every this many iterations (given, the cadence is exactly as asked)",
    "checkpoint_seconds": "a checkpoint every this many seconds (given, the cadence is exactly as asked)",
    "resume": "auto (resume if a checkpoint exists), yes (require one) or no (start afresh)",
    "plot": "write fit.png: log-likelihood per iteration with failures and recoveries marked",
    "progress": "auto (live in a terminal, one line per iteration otherwise), line, live or off",
    "keep_store": "keep out_dir/work/shards.h5 (a full copy of the data) after a finished fit",
    "memory_check": "refuse (exit 2) a fit whose rough memory estimate (as --dry-run prints it) exceeds this "
                    "host's memory: the driver's need against what is free, a worker's against the whole",
}
CHOICES = {"resume": ("auto", "yes", "no"), "progress": ("auto", "line", "live", "off")}
POSITIVE_INT = ("sub_chunks", "max_its", "restarts", "max_retries", "checkpoint_every")
POSITIVE_FLOAT = ("heartbeat_period", "heartbeat_timeout", "stall_timeout", "checkpoint_seconds")


TYPES = {f.name: str(f.type) for f in fields(FitConfig)}  # annotations as text ("int | None")


DEFAULT_TEXT = {"columns": "all columns", "checkpoint": f"OUT_DIR/{CHECKPOINT_NAME}",
                "checkpoint_every": "none", "checkpoint_seconds": "after the first iteration, then every 60 s, "
                                                                  "at most 2 percent of the time",
                "failover": "on with a checkpoint, or MIXLE_MPI_FAILOVER"}


def _show(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == "":
        return "none"
    return f"{value:g}" if isinstance(value, float) else str(value)


def default_text(name: str) -> str:
    """The default of a fit option as ``--help`` shows it: FitConfig's, or for the
    detection settings left to the handle, the handle's (pure)."""
    from mixle_mpi.policy.config import Settings

    if name in DEFAULT_TEXT:
        return DEFAULT_TEXT[name]
    value = getattr(FitConfig, name)
    if value is None and hasattr(Settings, name):
        return f"{_show(getattr(Settings, name))}, or MIXLE_MPI_{name.upper()}"
    return _show(value)


# How `fit --help` groups the options; the ones in SHORT_HELP show there, with that text, and
# every option shows with its full text under --help-all (and in docs/reference.md).
GROUPS = {
    "data and model": ("data", "model", "columns", "num_shards", "sub_chunks", "seed", "restarts"),
    "EM": ("max_its", "delta", "init_p"),
    "resilience": ("checkpoint", "checkpoint_every", "checkpoint_seconds", "resume", "failover", "spares",
                   "max_retries", "respawn", "respawn_wait", "heartbeat_period", "heartbeat_timeout",
                   "stall_timeout", "driver_computes", "memory_check"),
    "output": ("out_dir", "plot", "progress", "keep_store"),
}
SHORT_HELP = {
    "data": "PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris (required)",
    "model": "gmm:k=K[,cov=diag|full], poisson:k=K, hmm:states=S, composite:..., json:FILE (required)",
    "columns": "CSV columns, e.g. 0:4 or x,y",
    "num_shards": "shards S (default: from the rows alone); S fixes the bits, the rank count does not",
    "seed": "seed of the random initialization",
    "restarts": "random restarts (seed + r); the best one wins",
    "max_its": "EM iterations at most",
    "delta": "stop when the log-likelihood gains less (none: run max_its)",
    "checkpoint": "where the checkpoint goes; an existing one is resumed",
    "resume": "auto, yes (require a checkpoint) or no (afresh)",
    "failover": "a survivor takes over from a dead driver",
    "spares": "idle ranks that take a failed worker's place",
    "max_retries": "failures before a worker's place is blacklisted",
    "out_dir": "where model.json, summary.json and the logs go",
    "plot": "write fit.png: log-likelihood, failures marked",
}
METAVAR = {"model": "SPEC", "columns": "COLS", "num_shards": "S", "sub_chunks": "K", "restarts": "R",
           "max_its": "N", "delta": "D", "init_p": "P", "checkpoint": "PATH", "checkpoint_every": "N",
           "checkpoint_seconds": "SEC", "resume": "MODE", "spares": "N", "max_retries": "N",
           "heartbeat_period": "SEC", "heartbeat_timeout": "SEC", "stall_timeout": "SEC", "out_dir": "DIR",
           "progress": "MODE"}


def add_fit_options(p: argparse.ArgumentParser, full_help: bool = True) -> None:
    """Flags for every FitConfig field, grouped; defaults are None so unset flags don't
    override a file. The help text shows the real default (FitConfig's), not argparse's None.
    ``full_help`` False: only the options of SHORT_HELP are described (``fit --help``)."""
    grouped = {name for names in GROUPS.values() for name in names}
    missing = sorted({f.name for f in fields(FitConfig)} - grouped)
    assert not missing, f"FitConfig fields in no help group: {missing}"
    kinds = {f.name: f.type for f in fields(FitConfig)}
    for title, names in GROUPS.items():
        group = p.add_argument_group(title)
        if title == "data and model":
            group.add_argument("--config", metavar="FILE", help="a TOML job file of these options; flags "
                                                                "override it (default: none)")
        for name in names:
            flag = "--" + name.replace("_", "-")
            if full_help or name in SHORT_HELP:
                text = HELP[name] if full_help else SHORT_HELP[name]
                if "default" not in text and "(required)" not in text:
                    text += f" (default: {default_text(name)})"
            else:
                text = argparse.SUPPRESS
            if kinds[name].startswith("bool"):
                group.add_argument(flag, dest=name, default=None, action=argparse.BooleanOptionalAction, help=text)
            else:
                group.add_argument(flag, dest=name, default=None, help=text, metavar=METAVAR.get(name, name.upper()))
            if name == "checkpoint":
                group.add_argument("--no-checkpoint", dest=name, action="store_const", const="none",
                                   help="write no checkpoint: a dead driver loses the fit (default: off)")


def _coerce(name: str, value, where: str):
    typ = TYPES[name]
    if value is None:
        return None
    if "None" in typ and isinstance(value, str) and value.strip().lower() in ("none", ""):
        return None
    try:
        if typ.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if typ.startswith("float"):
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if typ.startswith("bool"):
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "yes", "1"):
                return True
            if str(value).lower() in ("false", "no", "0"):
                return False
            raise ValueError
        if not isinstance(value, str):
            raise ValueError
        return value
    except ValueError:
        need = typ.replace(" | None", " or none")
        raise ConfigError(f"{name} must be {need}; found {value!r} ({where})") from None


def read_toml(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read the job file {path!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    table = doc.get("fit", doc)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [fit] must be a table of options")
    return {k.replace("-", "_"): v for k, v in table.items() if not (k == "fit" and isinstance(v, dict))}


def resolve(file_values: dict | None, flag_values: dict, where_file: str = "job file") -> FitConfig:
    """Defaults, overridden by the file, overridden by flags; then validated (pure)."""
    valid = [f.name for f in fields(FitConfig)]
    merged: dict = {}
    for source, values in ((where_file, file_values or {}), ("flag", flag_values)):
        for key, value in values.items():
            if key not in valid:
                raise ConfigError(f"unknown option {key!r} in the {source}; valid options are {valid}")
            if value is not None or source != "flag":
                merged[key] = _coerce(key, value, source)
    cfg = FitConfig(**{**asdict(FitConfig()), **merged})
    validate(cfg)
    return cfg


def validate(cfg: FitConfig) -> None:
    if not cfg.data:
        raise ConfigError("no data given: use --data PATH (PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris)")
    if not cfg.model:
        raise ConfigError("no model given: use --model, e.g. gmm:k=3,cov=diag")
    if cfg.checkpoint == AUTO_CHECKPOINT:
        cfg.checkpoint = os.path.join(cfg.out_dir, CHECKPOINT_NAME)
    for name in POSITIVE_INT:
        if getattr(cfg, name) is not None and getattr(cfg, name) < 1:
            raise ConfigError(f"{name} must be an integer >= 1; found {getattr(cfg, name)}")
    for name in POSITIVE_FLOAT:
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise ConfigError(f"{name} must be a number > 0; found {value}")
    if cfg.spares is not None and cfg.spares < 0:
        raise ConfigError(f"spares must be an integer >= 0; found {cfg.spares}")
    if cfg.num_shards is not None and cfg.num_shards < 1:
        raise ConfigError(f"num_shards must be an integer >= 1; found {cfg.num_shards}")
    if cfg.delta is not None and (cfg.delta < 0 or cfg.delta != cfg.delta):
        raise ConfigError(f"delta must be a number >= 0 or none; found {cfg.delta}")
    if cfg.delta == 0:
        cfg.delta = None
    if not 0 < cfg.init_p <= 1:
        raise ConfigError(f"init_p must be in (0, 1]; found {cfg.init_p}")
    for name, choices in CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise ConfigError(f"{name} must be one of {list(choices)}; found {getattr(cfg, name)!r}")
    if cfg.resume == "yes" and not cfg.checkpoint:
        raise ConfigError("resume=yes needs a checkpoint: drop --no-checkpoint (checkpoint = none)")


def from_args(args: argparse.Namespace) -> FitConfig:
    flags = {f.name: getattr(args, f.name, None) for f in fields(FitConfig)}
    file_values = read_toml(args.config) if getattr(args, "config", None) else None
    return resolve(file_values, flags, where_file=args.config or "job file")


def to_argv(cfg: FitConfig) -> list[str]:
    """Flags that reproduce ``cfg`` exactly (for launching the same fit on every rank)."""
    out: list[str] = []
    for f in fields(FitConfig):
        value = getattr(cfg, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + f.name.replace("_", "-"))
        elif value is None:
            if f.default is not None:
                out += [flag, "none"]
        else:
            out += [flag, repr(value) if isinstance(value, float) else str(value)]
    return out


def moved_to(cfg: FitConfig, out_dir: str) -> FitConfig:
    """``cfg`` writing into ``out_dir`` instead; the default checkpoint (the old folder's
    checkpoint.h5) moves with it, so runs in different folders never resume each other."""
    from dataclasses import replace

    checkpoint = cfg.checkpoint
    if checkpoint is not None and os.path.abspath(checkpoint) == os.path.abspath(os.path.join(cfg.out_dir, CHECKPOINT_NAME)):
        checkpoint = os.path.join(out_dir, CHECKPOINT_NAME)
    return replace(cfg, out_dir=out_dir, checkpoint=checkpoint)


def failover_of(cfg: FitConfig, environ=None) -> bool | None:
    """Failover as this fit asks for it: as given, else on whenever a checkpoint is written
    (a successor resumes from it), unless MIXLE_MPI_FAILOVER says otherwise (None: leave it
    to the environment)."""
    environ = os.environ if environ is None else environ
    if cfg.failover is not None:
        return cfg.failover
    if environ.get("MIXLE_MPI_FAILOVER", "") != "":
        return None
    return bool(cfg.checkpoint)


def settings_overrides(cfg: FitConfig) -> dict:
    """The handle's settings this fit sets explicitly (the rest come from MIXLE_MPI_* or the
    defaults, see ``policy.config.Settings.resolve``)."""
    return {k: v for k, v in (("heartbeat_period", cfg.heartbeat_period), ("heartbeat_timeout", cfg.heartbeat_timeout),
                              ("stall_timeout", cfg.stall_timeout), ("respawn", cfg.respawn),
                              ("respawn_wait", cfg.respawn_wait), ("spares", cfg.spares),
                              ("failover", failover_of(cfg)), ("driver_computes", cfg.driver_computes)) if v is not None}


def resolved_settings(cfg: FitConfig):
    """The settings the fit's handle will run with: this fit's, then the environment's, then
    the defaults (what ``chaos`` and ``--dry-run`` plan with)."""
    from mixle_mpi.policy.config import Settings

    return Settings.resolve(settings_overrides(cfg))
