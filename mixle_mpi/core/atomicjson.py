"""Write a JSON file so that a reader never sees half of it: to ``path.tmp``, then rename.

Status files, fit results and summaries are read by other processes (the launcher, tests,
``mixle-mpi collect``) that may look while a job is being killed.
"""

from __future__ import annotations

import json
import os


def write_json(path: str, obj, indent: int | None = None) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=indent)
        fh.write("\n")
    os.replace(tmp, path)
