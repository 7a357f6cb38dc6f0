"""The job's private run folder: where files the job trusts are exchanged between its processes.

Nothing the job believes may live under a predictable name in a shared folder: another local
user could plant it there first. (A replacement's birth record once lived in the shared temp
folder under the driver's pid; a planted one made the driver SIGKILL a process of the
planter's choosing and blacklist a healthy place.) So such files live in one folder per job,
made by ``tempfile.mkdtemp`` (mode 0700, a random name) by the launcher, which hands it to
the ranks in ``MIXLE_MPI_RUN_DIR``, or by the driver itself when there is no launcher. The
folder is believed only while it is a real folder of this user that nobody else can enter,
and a file in it only while it is a regular file of this user (never a symbolic link).
A host that cannot see the folder says so and goes on without it: the files it carries are
shortcuts, and each one's reader has a deadline to fall back on.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile

RUN_DIR_ENV = "MIXLE_MPI_RUN_DIR"
_made: list[str] = []  # the folder this process made (removed at its exit), once made


def problem(path: str) -> str | None:
    """Why the folder at ``path`` cannot be trusted, or None: it must be a directory (not a
    link to one) owned by this user, with no access for group or others."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        return f"cannot see it ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != os.geteuid():
        return f"it belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()})"
    if st.st_mode & 0o077:
        return f"its mode is {stat.S_IMODE(st.st_mode):04o}: others can enter it (0700 is needed)"
    return None


def own() -> str:
    """This job's run folder: the launcher's, if it can be trusted, else one this process
    makes (and removes at its exit)."""
    given = os.environ.get(RUN_DIR_ENV, "")
    if given and problem(given) is None:
        return given
    if not _made:
        _made.append(tempfile.mkdtemp(prefix="mixle_mpi_run_"))
        atexit.register(shutil.rmtree, _made[0], True)
    return _made[0]


def create_new(path: str, text: str) -> None:
    """Write ``text`` to a new file at ``path``, owner-only: never over an existing file, never
    through a symbolic link (``O_EXCL | O_NOFOLLOW``). Raises OSError otherwise."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def read_trusted(path: str) -> str | None:
    """The text of ``path`` if it is a regular file of this user (not a link), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return None
        return os.read(fd, 1 << 16).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _usable(path: str) -> bool:
    """Whether a file the launcher named may be written: its folder is a run folder this user
    owns and nobody else can enter. A rank on another host than the launcher's cannot see
    it (the user guide's cross-host recipe): that is said once, and the job goes on without it."""
    folder = os.path.dirname(os.path.abspath(path))
    why = problem(folder)
    if why is not None and folder not in _refused:
        _refused.add(folder)
        from mixle_mpi.core import logs

        logs.get("rundir").info(
            f"not writing the launcher's {os.path.basename(path)}: its folder {folder}: {why} "
            "(a rank on another host than the launcher's); going on without it"
        )
    return why is None


_refused: set[str] = set()


def write_marker(path: str | None, record: dict) -> bool:
    """Write one of the files the launcher reads (``driver.json``, ``status.json``, a
    marker) atomically, only into a trusted run folder. True if written."""
    if not path or not _usable(path):
        return False
    from mixle_mpi.core.atomicfile import write_json

    try:
        write_json(path, record)
    except OSError:
        return False
    return True


def append_line(path: str | None, line: str) -> bool:
    """Append one line (one ``write``, so that ranks writing at once never mix their lines)
    to a file the launcher reads, only in a trusted run folder, never through a link."""
    if not path or not _usable(path):
        return False
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, line.encode())
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
