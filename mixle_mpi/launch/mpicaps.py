"""Which mpiexec a launch uses, what it can do, and the flags that follow (pure).

A site's MPI is not the wheels' MPI: Open MPI 4.1's ``mpiexec`` refuses ``--with-ft``, and
an MPI a site built for its nodes binds ranks the way the site wants. So a launch

- chooses its mpiexec in a documented order (:func:`choose`): an explicit ``--mpiexec``,
  then the environment's (the first ``mpiexec`` on PATH: a loaded module's, an activated
  environment's), then the one beside this Python (an MPI wheel's);
- learns what it can do from probes (:class:`Capabilities`: each candidate flag tried with
  ``--version``, which an mpiexec parses and then exits on; about 0.05 s each);
- gets the flags that keep a job alive after a rank's death where the runtime has them
  (:func:`survival_flags`), and says plainly what a death costs where it has none
  (:func:`survival_text`).

The subprocess part lives in ``launcher``; everything here is plain data in, plain data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OPENMPI, MPICH = "openmpi", "mpich"

# The flags probed, per flavor: each is tried as ``mpiexec FLAG --version``.
ULFM_FLAG = ("--with-ft", "ulfm")  # Open MPI 5 (PRRTE): real ULFM
RECOVERY_FLAG = ("--enable-recovery",)  # Open MPI 4 (ORTE): the job outlives a rank's death
OVERSUBSCRIBE_FLAG = ("--oversubscribe",)
NO_CLEANUP_FLAG = ("-disable-auto-cleanup",)  # MPICH's Hydra: survivors are not killed
PROBED = {
    OPENMPI: (ULFM_FLAG, RECOVERY_FLAG, OVERSUBSCRIBE_FLAG),
    MPICH: (NO_CLEANUP_FLAG,),
}
# Open MPI 4 with --enable-recovery: ORTE must not restart a dead rank (mixle_mpi respawns
# its own), nor end the job when a rank exits nonzero or dies of a signal.
ORTE_RECOVERY_MCA = (
    ("orte_max_restarts", "0"),
    ("orte_abort_on_non_zero_status", "0"),
)

# Survival, best first: how the job lives on after a rank's death.
ULFM, RECOVERY, NO_CLEANUP, NONE = "ulfm", "recovery", "no-cleanup", "none"


@dataclass(frozen=True)
class Capabilities:
    """What one mpiexec is and accepts (from ``--version`` and the probes)."""

    path: str
    flavor: str
    version: tuple[int, ...]
    accepts: frozenset[str]  # the probed flags it took, by their first word

    def has(self, flag: tuple[str, ...]) -> bool:
        return flag[0] in self.accepts

    @property
    def survival(self) -> str:
        """How a job under this mpiexec outlives a rank's death (one of the names above)."""
        if self.flavor == OPENMPI and self.has(ULFM_FLAG):
            return ULFM
        if self.flavor == OPENMPI and self.has(RECOVERY_FLAG):
            return RECOVERY
        if self.flavor == MPICH and self.has(NO_CLEANUP_FLAG):
            return NO_CLEANUP
        return NONE

    @property
    def label(self) -> str:
        name = {OPENMPI: "Open MPI", MPICH: "MPICH"}.get(self.flavor, self.flavor)
        return f"{name} {'.'.join(map(str, self.version)) or '(version unknown)'}"


def parse_version(text: str) -> tuple[str | None, tuple[int, ...]]:
    """(flavor, version) from ``mpiexec --version``; flavor None where it is neither Open
    MPI nor MPICH. Open MPI 4 says ``mpiexec (OpenRTE) 4.1.4``, 5 ``mpiexec (Open MPI)
    5.0.11``; Hydra says ``Version: 4.0.2`` under ``HYDRA build details``."""
    low = text.lower()
    if "open mpi" in low or "openrte" in low or "prte" in low:
        m = re.search(r"\)\s*(\d+(?:\.\d+)*)", text)
        return OPENMPI, _numbers(m[1] if m else "")
    if "hydra" in low or "mpich" in low:
        m = re.search(r"Version:\s*(\d+(?:\.\d+)*)", text)
        return MPICH, _numbers(m[1] if m else "")
    return None, ()


def _numbers(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def capabilities(path: str, flavor: str, version_text: str, accepted: dict) -> Capabilities:
    """The record from the probes' results: ``accepted`` maps each probed flag (a tuple of
    ``PROBED[flavor]``) to whether ``mpiexec FLAG --version`` exited 0."""
    _, version = parse_version(version_text)
    took = frozenset(flag[0] for flag, ok in accepted.items() if ok)
    return Capabilities(path, flavor, version, took)


def survival_flags(caps: Capabilities) -> list[str]:
    """The flags that keep the job alive after a rank's death, where the runtime has them."""
    kind = caps.survival
    if kind == ULFM:
        return list(ULFM_FLAG)
    if kind == RECOVERY:
        mca = [w for name, value in ORTE_RECOVERY_MCA for w in ("--mca", name, value)]
        return [*RECOVERY_FLAG, *mca]
    if kind == NO_CLEANUP:
        return list(NO_CLEANUP_FLAG)
    return []


def placement_flags(caps: Capabilities, ranks: int, cores: int, one_host: bool) -> list[str]:
    """Open MPI's placement flags. ``--oversubscribe`` wherever it is accepted: it only lets a
    replacement start past the slots (a Spawn fails without it once they are full), and Open
    MPI leaves ranks unbound by itself where they outnumber the cores. ``--bind-to none``
    only where the ranks fill this host's cores on a launch that stays on it (a replacement
    would share a bound core); else the site's binding stands."""
    if caps.flavor != OPENMPI:
        return []
    flags = list(OVERSUBSCRIBE_FLAG) if caps.has(OVERSUBSCRIBE_FLAG) else []
    if one_host and ranks >= cores:
        flags += ["--bind-to", "none"]
    return flags


_SURVIVAL_TEXT = {
    ULFM: "a rank's death is survived in the job: ULFM reports it and the communicator shrinks",
    RECOVERY: (
        "no ULFM here: --enable-recovery keeps the job alive after a rank's death; deaths are "
        "found by heartbeats and the communicator is kept or rebuilt without the dead"
    ),
    NO_CLEANUP: (
        "no ULFM here: -disable-auto-cleanup keeps the survivors running; deaths are found by "
        "heartbeats and the shrink is emulated"
    ),
    NONE: (
        "this mpiexec cannot outlive a rank's death: the job ends, and the launcher runs it "
        "again from its last checkpoint (the same bits, one relaunch's time)"
    ),
}


def survival_text(caps: Capabilities) -> str:
    """One line for the start: what a rank's death does under this mpiexec."""
    return _SURVIVAL_TEXT[caps.survival]


# Where a launch's mpiexec comes from, in the order tried.
EXPLICIT, ENVIRONMENT, WHEEL = "--mpiexec", "PATH", "beside this Python"


def choose(explicit: str | None, on_path: str | None, beside: str | None) -> tuple[str, str]:
    """(path, why) of the mpiexec to use: ``explicit`` (``--mpiexec``) first, then the first
    on PATH (a loaded module's or an activated environment's), then the one beside this
    Python (an MPI wheel's). None: there is none of that kind. Raises LookupError when
    there is none at all."""
    if explicit:
        return explicit, "given with --mpiexec"
    if on_path:
        why = "the first mpiexec on PATH (a loaded module's or an activated environment's)"
        if beside and beside != on_path:
            why += f"; the MPI wheel's {beside} is not used: pass --mpiexec to choose it"
        return on_path, why
    if beside:
        return beside, "beside this Python (the MPI wheel's; none on PATH)"
    raise LookupError("no mpiexec")


_REFUSED = re.compile(
    r"(?:unknown option|unrecognized option|invalid option|unrecognized argument)[^\n]*",
    re.IGNORECASE,
)


def refused_option(text: str) -> str | None:
    """The line where an mpiexec refused an option it does not know (its output for a launch
    with the same flags and ``--version``), or None. Such a launch fails the same way every
    time: it is a configuration error, never retried."""
    m = _REFUSED.search(text or "")
    if not m:
        return None
    line_start = text.rfind("\n", 0, m.start()) + 1
    line_end = text.find("\n", m.end())
    line = text[line_start : line_end if line_end >= 0 else len(text)].strip()
    if line.lower().startswith(("option:", "an unrecognized")):
        nxt = text[m.end() :].strip().splitlines()
        line = " ".join([line, *(nxt[:2] if nxt else [])])
    return " ".join(line.split())
