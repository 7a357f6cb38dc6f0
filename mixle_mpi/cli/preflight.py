"""Every problem that would stop a fit, found before MPI starts, each with its fix.

``mixle-mpi fit -n N`` and ``--dry-run`` check the model spec, the data (the file, the
dataset, the columns, the header and the first rows; ``--dry-run`` every row) and that the model fits the data, in
a second and without MPI. Each check runs even when another failed, so a bad path and a
bad model spec are reported together. Under ``mpiexec``/``srun`` the driver runs the same
checks before any rank works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mixle_mpi.core.errors import ConfigError, MixleMPIError


@dataclass
class Preflight:
    spec: Any = None  # the parsed model spec (None: it is wrong)
    source: Any = None  # the parsed data source
    shape: Any = None  # the data's shape, from its headers
    checked: tuple[int, float] | None = None  # every_row: (rows read, seconds taken)
    errors: list[MixleMPIError] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return [str(e) for e in self.errors]

    def attempt(self, call, *args):
        """``call(*args)``, or None with its error kept."""
        try:
            return call(*args)
        except MixleMPIError as exc:
            self.errors.append(exc)
            return None

    def raise_any(self) -> None:
        """The one error found as it was raised, or all of them in one ConfigError (exit 2)."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigError(
                f"{len(self.errors)} problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
            )


def check(cfg, every_row: bool = False) -> Preflight:
    """Run every check of ``cfg``'s model and data (pure but for reading the data's head;
    ``every_row``: every value of the data, as ``--dry-run`` does)."""
    from mixle_mpi.cli import datainput
    from mixle_mpi.fitting import modelspec

    found = Preflight()
    found.spec = found.attempt(modelspec.parse_spec, cfg.model)
    found.source = found.attempt(datainput.parse_source, cfg.data)
    ok = len(found.errors)
    columns = found.attempt(datainput.parse_columns, cfg.columns)
    if found.source is None or len(found.errors) > ok:
        return found
    need = modelspec.row_shape_needed(found.spec) if found.spec is not None else "any"
    found.shape = found.attempt(datainput.probe, found.source, need, columns)
    if found.shape is None:
        return found
    if every_row:
        _check_every_row(found, need, columns)
    else:
        found.attempt(datainput.check_first_rows, found.source, need, columns)
    if found.spec is not None:
        found.attempt(modelspec.build_estimator, found.spec, found.shape.ncols)
    return found


def _check_every_row(found: Preflight, need: str, columns) -> None:
    """Every value, timed (the dry run reports how long its read of the data took)."""
    import time

    from mixle_mpi.cli import datacheck

    if found.spec is None:
        return  # what the values must be depends on the model
    parts = found.spec.parts
    start = time.monotonic()
    rows = found.attempt(datacheck.check_values, found.source, need, columns, parts)
    if rows is not None:
        found.checked = (rows, time.monotonic() - start)
