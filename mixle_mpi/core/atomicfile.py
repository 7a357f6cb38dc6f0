"""Write a file so that a reader never sees half of it: to ``path.tmp``, then rename.

Status files, fit results, summaries, reports and generated job scripts are read by other
processes (the launcher, tests, ``mixle-mpi collect``, sbatch) that may look while a job is
being killed. Every text or JSON file mixle_mpi writes goes through here.
"""

from __future__ import annotations

import json
import os


def write_text(path: str, text: str) -> None:
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_json(path: str, obj, indent: int | None = None) -> None:
    write_text(path, json.dumps(obj, indent=indent) + "\n")
