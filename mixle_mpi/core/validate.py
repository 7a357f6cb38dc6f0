"""The checks every layer shares, each written once: an integer setting, a text's digest."""

from __future__ import annotations

import hashlib
from numbers import Integral

from mixle_mpi.core.errors import ConfigError


def check_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (numpy integers too; never a bool); else a
    ConfigError that says what was found."""
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}; found {value!r}")
    return int(value)


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` in UTF-8: checksums of checkpoints and journal entries."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
