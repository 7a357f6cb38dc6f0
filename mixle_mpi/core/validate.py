"""The checks every layer shares, each written once: an integer setting, a text's digest."""

from __future__ import annotations

import hashlib
from numbers import Integral

from mixle_mpi.core.errors import ConfigError


def check_int(
    name: str, value, minimum: int = 1, maximum: int | None = None, text: bool = False
) -> int:
    """``value`` as an int in [``minimum``, ``maximum``] (numpy integers too; never a bool;
    decimal text too when ``text``, for values read from files); else a ConfigError that
    says what was found and what was needed."""
    need = f">= {minimum}" if maximum is None else f"between {minimum} and {maximum}"
    if text and isinstance(value, str):
        try:
            value = int(value.strip(), 10)
        except ValueError:
            raise ConfigError(f"{name} must be an integer {need}; found {value!r}") from None
    if (
        isinstance(value, bool)
        or not isinstance(value, Integral)
        or int(value) < minimum
        or (maximum is not None and int(value) > maximum)
    ):
        raise ConfigError(f"{name} must be an integer {need}; found {value!r}")
    return int(value)


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` in UTF-8: checksums of checkpoints and journal entries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
