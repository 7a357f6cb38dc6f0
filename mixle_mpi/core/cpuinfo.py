"""The first CPU's lines of ``/proc/cpuinfo``, read once per process.

Two facts come from them: the model name a rank reports with its numerics, and the model
and flags numba's native target is chosen from (the key of a filled cache).
"""

from __future__ import annotations

import functools
import platform

KEYS = ("model name", "flags", "features", "cpu model")


@functools.lru_cache(maxsize=1)
def first_cpu() -> dict[str, str]:
    """The first processor's ``model name``, ``flags`` (``features`` and ``cpu model`` on
    other architectures), as read: {} where there is no ``/proc/cpuinfo``."""
    out: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                if name.strip().lower() in KEYS:
                    out[name.strip().lower()] = value.strip()
    except OSError:
        pass
    return out


def model() -> str:
    """The CPU's model name (the platform's processor where the kernel gives none)."""
    cpu = first_cpu()
    return (
        cpu.get("model name") or cpu.get("cpu model") or platform.processor() or platform.machine()
    )


def target_text() -> str:
    """What numba's native target is chosen from: the model and the flags."""
    return "\n".join(f"{k}: {v}" for k, v in sorted(first_cpu().items()))
