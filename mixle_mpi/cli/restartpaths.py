"""Where each restart of a fit keeps its checkpoint.

Restart r of R > 1 uses seed + r and its own checkpoint, so a requeued job resumes every
restart exactly. ``fit`` writes these paths, ``--dry-run`` and ``inspect`` read them: the
naming lives here once, below all three.
"""

from __future__ import annotations

import os


def restart_checkpoint(path: str | None, restart: int, restarts: int) -> str | None:
    """Restart r of R > 1 keeps its own checkpoint, ``ckpt.r<r>.h5`` beside ``ckpt.h5``."""
    if not path or restarts == 1:
        return path
    root, ext = os.path.splitext(path)
    return f"{root}.r{restart}{ext or '.h5'}"


def restart_checkpoints(path: str, restarts: int) -> list[str]:
    """Every restart's checkpoint path, in restart order."""
    return [restart_checkpoint(path, r, restarts) for r in range(restarts)]
