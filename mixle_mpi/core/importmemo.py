"""Remember what a look over the loaded modules found, until a module is imported.

Some facts about a process change only when it imports something: which parallel numba
kernels its modules hold, which BLAS libraries are loaded. Looking again costs milliseconds
(every value of every module, or every shared library), and the simulation asks for them
for each rank of each of its 10,000 schedules.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def imports_key() -> tuple[int, str | None]:
    """Changes whenever a module is imported: the count of loaded modules and the last one."""
    return len(sys.modules), next(reversed(sys.modules), None)


def until_next_import(look: Callable[[], T]) -> Callable[[], T]:
    """``look`` (no arguments) done again only once a module was imported since its last run."""
    seen: list = []  # [(key, result)]

    @functools.wraps(look)
    def remembered() -> T:
        key = imports_key()
        if not seen or seen[0][0] != key:
            seen[:] = [(key, look())]
        return seen[0][1]

    return remembered
