"""Settings: argument > MIXLE_MPI_* environment variable > default, parsed strictly.

The fields, their types, defaults and bounds are the setting options of ``core.options``;
this module adds what a table cannot say (the checks between fields) and the reading of
the environment. A ``Settings`` is a plain frozen dataclass: the runtime reads its fields
as attributes, at no cost beyond any dataclass's.
"""

from __future__ import annotations

import math
import os
from dataclasses import field, fields, make_dataclass
from numbers import Real

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.options import BY_NAME, ENV_PREFIX, SETTINGS
from mixle_mpi.core.validate import check_int

__all__ = ["ENV_PREFIX", "Settings"]


def _checked_float(name: str, value, positive: bool) -> float:
    """A finite number, > 0 (``positive``) or >= 0 (a float whose 0 turns something off)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, Real)
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        raise ConfigError(
            f"{name} must be a finite number {'>' if positive else '>='} 0; found {value!r}"
        )
    return float(value)


class SettingsChecks:
    """The methods of ``Settings`` (its fields come from the option table)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            option, value = BY_NAME[f.name], getattr(self, f.name)
            if option.kind is bool:
                if not isinstance(value, bool):
                    raise ConfigError(f"{f.name} must be True or False; found {value!r}")
            elif option.kind is float:
                value = _checked_float(f.name, value, option.positive)
                object.__setattr__(self, f.name, value)
            elif option.kind is str:
                if value not in option.choices:
                    raise ConfigError(
                        f"{f.name} must be one of {list(option.choices)}; found {value!r}"
                    )
            else:
                object.__setattr__(self, f.name, check_int(f.name, value, option.at_least))
        if self.heartbeat_fanin == 1:
            raise ConfigError(
                "heartbeat_fanin must be 0 (every worker beats to the driver) or at least 2; found 1"
            )
        if self.heartbeat_timeout < 2 * self.heartbeat_period:
            raise ConfigError(
                f"heartbeat_timeout must be at least 2 x heartbeat_period; found timeout="
                f"{self.heartbeat_timeout:g}s with period={self.heartbeat_period:g}s"
            )

    @classmethod
    def resolve(cls, overrides: dict | None = None, environ=None):
        """Build settings from explicit overrides, then MIXLE_MPI_<NAME> variables, then defaults."""
        environ = os.environ if environ is None else environ
        overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
        values = {}
        for option in SETTINGS:
            if option.name in overrides:
                values[option.name] = overrides[option.name]
                continue
            raw = environ.get(option.env_var)
            if raw is None or raw == "":
                continue
            values[option.name] = _parse_env(option, raw)
        names = [o.name for o in SETTINGS]
        unknown = set(overrides) - set(names)
        if unknown:
            raise ConfigError(f"unknown setting(s) {sorted(unknown)}; valid settings are {names}")
        try:
            return cls(**values)
        except ConfigError as exc:
            from_env = [BY_NAME[k].env_var for k in values if k not in overrides]
            if from_env:
                raise ConfigError(
                    f"{exc} (settings read from the environment: {', '.join(from_env)})"
                ) from None
            raise


Settings = make_dataclass(
    "Settings",
    [(o.name, o.kind, field(default=o.default)) for o in SETTINGS],
    bases=(SettingsChecks,),
    frozen=True,
)
Settings.__module__ = __name__  # pickles by name, as a class statement would
Settings.__doc__ = "Everything tunable about detection and recovery, validated once on the driver."


def _parse_env(option, raw: str):
    try:
        if option.kind is bool:
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        return option.kind(raw)
    except ValueError:
        kind = "boolean (1/0/true/false)" if option.kind is bool else option.kind.__name__
        raise ConfigError(f"{option.env_var}={raw!r} is not a valid {kind}") from None
