"""Issue 15's startup figures (``bench/memory_startup.py``): which of a worker's modules are
timed, and how ``-X importtime`` output is read, on made-up input; one real timing."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import memory_startup  # noqa: E402


def test_a_workers_modules_are_imported_parents_first_without_main_or_the_editable_finder():
    got = memory_startup.importable(
        [
            "numpy.linalg",
            "__main__",
            "numpy",
            "a.b.c",
            "a",
            "__editable___mixle_mpi_0_1_0_finder",
            "a.b",
        ]
    )
    assert got == ["a", "numpy", "a.b", "numpy.linalg", "a.b.c"]


def test_import_time_is_measured_in_a_fresh_interpreter_and_the_floor_is_smaller():
    python = sys.executable
    floor = memory_startup.import_seconds(python, ["json"])
    more = memory_startup.import_seconds(
        python, ["json", "numpy", "no_such_module_xyz"]
    )  # a miss is skipped
    assert floor is not None and more is not None and 0 < floor and 0 < more


def test_the_heaviest_top_level_packages_come_from_the_outermost_importtime_lines(monkeypatch):
    out = "\n".join(
        [
            "import time: self [us] | cumulative | imported package",
            "import time:       100 |        100 |   numpy.core",
            "import time:       200 |     300000 | numpy",
            "import time:        50 |      50000 | numpy.linalg",
            "import time:        10 |     900000 | mixle.stats",
            "import time:         5 |         10 |     scipy",
            "0.5",
        ]
    )
    monkeypatch.setattr(memory_startup.common, "run", lambda cmd, timeout=None: (0, out, 0.0))
    assert memory_startup.heaviest("python", ["x"]) == [("mixle", 0.9), ("numpy", 0.35)]
