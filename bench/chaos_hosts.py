"""The external chaos campaign across fake hosts (issue 13, "Two hosts on one machine").

Makes three fake hosts (``tests/fakehosts.py``: host A here, B and C network namespaces with
their own address and hostname, Open MPI's launcher reaching them through a stand-in for
ssh), puts the driver on A and two workers each on B and C, and runs ``mixle-mpi chaos
--external`` over them: real ranks SIGKILLed or SIGSTOPped from outside at seeded random
moments, including a whole host's workers at once, each run checked against a failure-free
reference for bit-identity and leftover processes. Open MPI only (see docs/user-guide.md, "Across hosts").

    python bench/chaos_hosts.py [--runs 10] [--seed 23] [--kinds worker,two_workers,stop,host]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from fakehosts import FakeHosts, available  # noqa: E402

SLOTS = [1, 2, 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--kinds", default="worker,two_workers,stop,host")
    ap.add_argument("--max-its", type=int, default=200)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--name", default="chaos_hosts")
    args = ap.parse_args(argv)
    why = available()
    if why:
        print(f"cannot run: {why}", file=sys.stderr)
        return 2
    with (
        tempfile.TemporaryDirectory(prefix="mixle_mpi_chaos_hosts_") as tmp,
        FakeHosts(Path(tmp), SLOTS) as hosts,
    ):
        out = Path(tmp) / "campaign"
        env = dict(
            os.environ,
            MIXLE_MPI_MPIEXEC_ARGS=hosts.mpiexec_args(),
            PYTHONWARNINGS="ignore",
            MIXLE_MPI_DRIVER_TIMEOUT="30",
            MIXLE_MPI_RECONFIGURE_TIMEOUT="20",
        )
        env.pop("MIXLE_MPI_FAULT_PLAN", None)
        cmd = [
            args.python,
            "-m",
            "mixle_mpi",
            "chaos",
            "--external",
            "-n",
            str(sum(SLOTS)),
            "--runs",
            str(args.runs),
            "--campaign-seed",
            str(args.seed),
            "--kinds",
            args.kinds,
            "--max-its",
            str(args.max_its),
            "--out-dir",
            str(out),
        ]
        proc = subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=600 * args.runs
        )
        report = (
            json.loads((out / "campaign.json").read_text())
            if (out / "campaign.json").exists()
            else {}
        )
        causes = sorted(
            {
                json.loads(line).get("cause", "")
                for f in out.glob("**/events.jsonl")
                for line in f.read_text().splitlines()
                if '"failure_detected"' in line
            }
        )
        fenced_by = sum(
            1
            for f in out.glob("**/events.jsonl")
            for line in f.read_text().splitlines()
            if '"failure_detected"' in line and '"fenced_by"' in line
        )
    summary = report.get("summary", {})
    text = "\n".join(
        [
            "# External chaos across three fake hosts (Open MPI)",
            "",
            f"Driver on host A, workers 1-2 on host B and 3-4 on host C (network namespaces with their own "
            f"address and hostname; TCP between hosts, shared memory within one). `chaos --external` with "
            f"seed {args.seed}, kinds {args.kinds}, {args.runs} runs, up to {args.max_its} iterations; the "
            f"`host` kind SIGKILLs ranks 1-2 at once: every worker of host B (its Open MPI daemon lives on).",
            "",
            f"Result: exit {proc.returncode}; {summary.get('runs', '?')} runs counted, {summary.get('failures', '?')} failed; "
            f"campaign ok: {report.get('ok')}. Failures that a live worker on the victim's host was asked "
            f"to fence (`fenced_by`; a SIGKILLed process is gone already and the fence does nothing): {fenced_by}.",
            "",
            "Causes the driver gave:",
            "",
            *[f"- `{c}`" for c in causes],
            "",
            "```",
            proc.stdout.strip()[-6000:],
            "```",
            "",
            f"Command: `python bench/chaos_hosts.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
            "",
        ]
    )
    print(text)
    (REPO / "bench" / "results" / f"{args.name}.md").write_text(text)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
