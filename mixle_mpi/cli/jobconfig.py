"""The settings of one ``mixle-mpi fit``: defaults, then a TOML file, then flags.

A job file keeps a fit reproducible and reviewable; flags override it for one run. Every
key is checked here, before any rank does work, and every error says what was found and
what was needed. Pure: no MPI, no data access.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, field, fields, make_dataclass

import tomllib

from mixle_mpi.core import options
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.options import AUTO as AUTO_CHECKPOINT  # out_dir/checkpoint.h5 by default
from mixle_mpi.fitting.cadence import CHECKPOINT_NAME

# FitConfig: one field per job option of ``core.options`` (a setting's default is None: the
# handle's setting, from MIXLE_MPI_<NAME> or its default, unless the fit sets it).
FitConfig = make_dataclass(
    "FitConfig", [(o.name, o.job_type, field(default=o.job_default)) for o in options.JOB]
)
FitConfig.__module__ = __name__  # pickles by name, as a class statement would
FitConfig.__doc__ = "The options of one ``mixle-mpi fit``, as the job file and the flags give them."


# The built-in default job: `mixle-mpi demo`, and `mixle-mpi chaos` without --data.
DEMO_JOB = {
    "data": "builtin:iris",
    "columns": "0:4",
    "model": "gmm:k=3,cov=full",
    "max_its": "40",
    "init_p": "0.5",
    "num_shards": "6",
    "seed": "3",
}

TYPES = {o.name: o.job_type for o in options.JOB}  # annotations as text ("int | None")
GROUPS = options.FIT_GROUPS  # how `fit --help` groups the options


def default_text(name: str) -> str:
    """The default of a fit option as ``--help`` shows it: FitConfig's, or for the
    detection settings left to the handle, the handle's (pure)."""
    option = options.BY_NAME[name]
    if option.default_text is not None:
        return option.default_text
    if option.setting:
        return f"{options.show(option.default)}, or {option.env_var}"
    return options.show(option.default)


def add_fit_options(p: argparse.ArgumentParser, full_help: bool = True) -> None:
    """Flags for every job option, grouped; defaults are None so unset flags don't override a
    file. The help text shows the real default (FitConfig's), not argparse's None.
    ``full_help`` False: only the options with a short text are described (``fit --help``)."""
    for title, names in GROUPS.items():
        group = p.add_argument_group(title)
        if title == "data and model":
            group.add_argument(
                "--config",
                metavar="FILE",
                help="a TOML job file of these options; flags override it (default: none)",
            )
        for option in map(options.BY_NAME.get, names):
            if full_help or option.short:
                text = option.help if full_help else option.short
                if "default" not in text and "(required)" not in text:
                    text += f" (default: {default_text(option.name)})"
            else:
                text = argparse.SUPPRESS
            if option.kind is bool:
                group.add_argument(
                    option.flag,
                    dest=option.name,
                    default=None,
                    action=argparse.BooleanOptionalAction,
                    help=text,
                )
            else:
                group.add_argument(
                    option.flag,
                    dest=option.name,
                    default=None,
                    help=text,
                    metavar=option.metavar or option.name.upper(),
                )
            if option.name == "checkpoint":
                group.add_argument(
                    "--no-checkpoint",
                    dest=option.name,
                    action="store_const",
                    const="none",
                    help="write no checkpoint: a dead driver loses the fit (default: off)",
                )


TYPE_WORDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "text"}


def _coerce(name: str, value, label: str):
    """``value`` as option ``name``'s type; a ConfigError names it by ``label``."""
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
        need = TYPE_WORDS[typ.split(" ")[0]] + (" or none" if "None" in typ else "")
        raise ConfigError(f"{label} must be {need}; found {value!r}") from None


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
    return {
        k.replace("-", "_"): v for k, v in table.items() if not (k == "fit" and isinstance(v, dict))
    }


class Labels:
    """How errors name each option: as the user gave it (``--max-its`` on the command line,
    ``max_its`` in a job file, the file named at the end of the message), else by its flag."""

    def __init__(self, where_file: str = "job file") -> None:
        self.where_file = where_file
        self.origin: dict[str, str] = {}

    def __call__(self, name: str) -> str:
        return name if self.origin.get(name) == "file" else "--" + name.replace("_", "-")

    def suffix(self, name: str) -> str:
        return f" (in {self.where_file})" if self.origin.get(name) == "file" else ""


def resolve(file_values: dict | None, flag_values: dict, where_file: str = "job file") -> FitConfig:
    """Defaults, overridden by the file, overridden by flags; then validated (pure). Every
    problem is reported at once, in one ConfigError."""
    cfg, problems = resolve_all(file_values, flag_values, where_file)
    raise_problems(problems)
    return cfg


def raise_problems(problems: list[str]) -> None:
    """The one problem as it is, or all of them in one ConfigError (exit 2)."""
    if len(problems) == 1:
        raise ConfigError(problems[0])
    if problems:
        raise ConfigError(f"{len(problems)} problems:\n" + "\n".join(f"  - {p}" for p in problems))


def resolve_all(
    file_values: dict | None, flag_values: dict, where_file: str = "job file"
) -> tuple[FitConfig, list[str]]:
    """(the configuration, every problem found in it): an option that is wrong keeps its
    default, so that a dry run goes on to check the data and the rest (pure)."""
    valid = [f.name for f in fields(FitConfig)]
    labels, merged, problems = Labels(where_file), {}, []
    for source, values in (("file", file_values or {}), ("flag", flag_values)):
        for key, value in values.items():
            if key not in valid:
                problems.append(_unknown(key, source, where_file, valid))
            elif value is not None or source != "flag":
                labels.origin[key] = source
                try:
                    merged[key] = _coerce(key, value, labels(key))
                except ConfigError as exc:
                    problems.append(str(exc) + labels.suffix(key))
    _follow_out_dir(merged, file_values or {}, flag_values)
    cfg = FitConfig(**{**asdict(FitConfig()), **merged})
    problems += validate(cfg, labels)
    return cfg, problems


def _unknown(key: str, source: str, where_file: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, valid, 1)
    hint = f"; did you mean {close[0]!r}?" if close else f"; valid options are {valid}"
    where = f"the {where_file}" if source == "file" else "the flags"
    return f"unknown option {key!r} in {where}{hint}"


def _follow_out_dir(merged: dict, file_values: dict, flag_values: dict) -> None:
    """A job file's checkpoint in its own out_dir is that folder's default: an --out-dir flag
    takes it along, so two jobs in different folders never share (or resume) one."""
    if flag_values.get("out_dir") is None or flag_values.get("checkpoint") is not None:
        return
    file_dir, file_ck = file_values.get("out_dir"), file_values.get("checkpoint")
    if isinstance(file_ck, str) and isinstance(file_dir, str):
        if os.path.abspath(file_ck) == os.path.abspath(os.path.join(file_dir, CHECKPOINT_NAME)):
            merged["checkpoint"] = AUTO_CHECKPOINT


def validate(cfg: FitConfig, label=None) -> list[str]:
    """Every problem of ``cfg``, each naming its option by ``label(name)``; an option found
    wrong is set back to its default (so that later checks see a value of the right kind)."""
    label = label or Labels()
    problems: list[str] = []

    def bad(name: str, text: str) -> None:
        problems.append(text + label.suffix(name))
        setattr(cfg, name, options.BY_NAME[name].job_default)

    if not cfg.data:
        problems.append(
            "no data given: use --data PATH (PATH.h5:/dataset, PATH.npy, PATH.csv or builtin:iris)"
        )
    if not cfg.model:
        problems.append("no model given: use --model, e.g. gmm:k=3,cov=diag")
    for option in options.JOB:
        value, name = getattr(cfg, option.name), option.name
        if value is None:
            continue
        if option.at_least is not None and value < option.at_least:
            bad(name, f"{label(name)} must be an integer >= {option.at_least}; found {value}")
        elif option.positive and not value > 0:
            bad(name, f"{label(name)} must be a number > 0; found {value}")
        elif option.choices and value not in option.choices:
            bad(name, f"{label(name)} must be one of {list(option.choices)}; found {value!r}")
    if cfg.delta is not None and (cfg.delta < 0 or cfg.delta != cfg.delta):
        bad("delta", f"{label('delta')} must be a number >= 0 or none; found {cfg.delta}")
    if cfg.delta == 0:
        cfg.delta = None
    if not 0 < cfg.init_p <= 1:
        bad("init_p", f"{label('init_p')} must be in (0, 1]; found {cfg.init_p}")
    if cfg.checkpoint == AUTO_CHECKPOINT:
        cfg.checkpoint = os.path.join(cfg.out_dir, CHECKPOINT_NAME)
    if cfg.resume == "yes" and not cfg.checkpoint:
        problems.append(
            f"{label('resume')}=yes needs a checkpoint: drop --no-checkpoint (checkpoint = none)"
            + label.suffix("resume")
        )
    return problems


def from_args_all(args: argparse.Namespace) -> tuple[FitConfig, list[str]]:
    """The fit's configuration and every problem in it (for ``--dry-run``)."""
    flags = {f.name: getattr(args, f.name, None) for f in fields(FitConfig)}
    file_values = read_toml(args.config) if getattr(args, "config", None) else None
    return resolve_all(file_values, flags, where_file=args.config or "job file")


def from_args(args: argparse.Namespace) -> FitConfig:
    cfg, problems = from_args_all(args)
    raise_problems(problems)
    return cfg


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
    if checkpoint is not None and os.path.abspath(checkpoint) == os.path.abspath(
        os.path.join(cfg.out_dir, CHECKPOINT_NAME)
    ):
        checkpoint = os.path.join(out_dir, CHECKPOINT_NAME)
    return replace(cfg, out_dir=out_dir, checkpoint=checkpoint)


def failover_of(cfg: FitConfig, environ=None) -> bool | None:
    """Failover as this fit asks for it: as given, else on whenever a checkpoint is written
    (a successor resumes from it), unless MIXLE_MPI_FAILOVER says otherwise (None: leave it
    to the environment)."""
    environ = os.environ if environ is None else environ
    if cfg.failover is not None:
        return cfg.failover
    if environ.get(options.env_var("failover"), "") != "":
        return None
    return bool(cfg.checkpoint)


def settings_overrides(cfg: FitConfig) -> dict:
    """The handle's settings this fit sets explicitly (the rest come from MIXLE_MPI_* or the
    defaults, see ``core.settings.Settings.resolve``)."""
    given = {o.name: getattr(cfg, o.name) for o in options.JOB if o.setting}
    given["failover"] = failover_of(cfg)
    return {k: v for k, v in given.items() if v is not None}


def resolved_settings(cfg: FitConfig):
    """The settings the fit's handle will run with: this fit's, then the environment's, then
    the defaults (what ``chaos`` and ``--dry-run`` plan with)."""
    from mixle_mpi.core.settings import Settings

    return Settings.resolve(settings_overrides(cfg))
