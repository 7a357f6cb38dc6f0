"""Every shell command shown in README.md and docs/user-guide.md runs as shown.

A fenced block's info string says what it is: ``bash`` is run, in order, in one scratch
folder per document (with the checkout's ``.venv``, ``jobs/``, ``scripts/`` and ``slurm/``
linked in), each block under ``bash -euo pipefail`` with a deadline; ``python NAME`` is
written to NAME there first, for the blocks after it. ``bash ci`` is what ``.ci/run`` runs
itself (tests/test_unit_setup.py); ``bash needs-slurm``, ``needs-network`` and ``needs-your-script`` are not run here,
and say why. Anything else in a ``bash`` block is a defect of the docs.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ("README.md", "docs/user-guide.md", "docs/tutorial.md")
NOT_RUN = {"ci", "needs-slurm", "needs-network", "needs-your-script", "needs-your-site", "slurm"}
# "slurm": run by tests/test_slurm.py on a local SLURM (run_blocks with those tags)
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```", re.M | re.S)
LINKED = (".venv", ".venv-mpich", "jobs", "scripts", "slurm")
BLOCK_TIMEOUT = 600

pytestmark = pytest.mark.mpijob


def blocks(doc: str) -> list[tuple[str, str, str]]:
    """(language, tag, body) of every fenced block of ``doc``."""
    out = []
    for info, body in FENCE.findall((ROOT / doc).read_text()):
        lang, _, tag = info.strip().partition(" ")
        out.append((lang, tag.strip(), body))
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_shell_block_is_run_or_says_why_not(doc):
    for lang, tag, _body in blocks(doc):
        if lang == "bash":
            assert tag in NOT_RUN | {""}, (
                f"{doc}: a bash block tagged {tag!r}: run it, or tag it one of {NOT_RUN}"
            )


def run_blocks(doc: str, folder: pathlib.Path, tags=("",), env=None) -> int:
    """Run ``doc``'s bash blocks tagged one of ``tags``, in order, in ``folder`` (with the
    checkout's folders linked in); returns how many ran. A failing block fails the test."""
    for name in LINKED:
        if (ROOT / name).exists():
            (folder / name).symlink_to(ROOT / name)
    env = env or {k: v for k, v in os.environ.items() if not k.startswith("MIXLE_MPI_")}
    ran = 0
    for lang, tag, body in blocks(doc):
        if lang == "python" and tag:
            (folder / tag).write_text(body)
        if lang != "bash" or tag not in tags:
            continue
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", body],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
        )
        assert proc.returncode == 0, (
            f"{doc}: this block exited {proc.returncode}:\n{body}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
        ran += 1
    return ran


@pytest.mark.parametrize("doc", DOCS)
def test_the_commands_of_the_docs_run(doc, tmp_path):
    ran = run_blocks(doc, tmp_path)
    assert ran >= 2, f"{doc}: only {ran} block(s) ran"
