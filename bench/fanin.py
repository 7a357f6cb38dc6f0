"""Detection with and without heartbeat fan-in at W workers (issue 13, "Heartbeat fan-in").

Real oversubscribed jobs of W workers (default 64: 65 ranks on this box), one shard each.
One worker signals itself (SIGKILL or SIGSTOP) before its second E-step; the latency is
from its stamp to the driver's ``failure_detected`` (``bench/detection.py``). Each case
runs with ``heartbeat_fanin=0`` (every worker beats to the driver) and with the default
fan-in (16: relays for groups of W/16). Victims: worker 2 (a relayed member under fan-in)
and worker 5 (a relay: the first of the second group at W = 64). The bound the issue sets:
3 heartbeat periods plus one hop (one period) per relay level.

    python bench/fanin.py [--workers 64] [--reps 1] [--actions kill,stop]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench.detection import one_run  # noqa: E402
from mixle_mpi.core.settings import Settings  # noqa: E402
from mixle_mpi.policy.fanin_plan import plan  # noqa: E402


def role_of(victim: int, workers: int, fanin: int) -> str:
    relay = plan(range(1, workers + 1), fanin).get(victim)
    if fanin == 0 or workers <= fanin:
        return "direct"
    return "relay" if relay is None else f"member of relay {relay}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--actions", default="kill,stop")
    ap.add_argument("--victims", default="2,5")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--name", default="fanin")
    args = ap.parse_args(argv)
    s = Settings()
    period, timeout, w = s.heartbeat_period, s.heartbeat_timeout, args.workers
    env = {"MIXLE_MPI_ALLOW_MANY_RANKS": "1", "MIXLE_MPI_STARTUP_TIMEOUT": f"{120 + 10 * (w + 1)}"}
    rows = []
    for rep in range(args.reps):
        for action in args.actions.split(","):
            for victim in (int(v) for v in args.victims.split(",")):
                for fanin in (0, s.heartbeat_fanin):
                    r = one_run(
                        args.python,
                        action,
                        period,
                        timeout,
                        workers=w,
                        victim=victim,
                        rows=200 * w,
                        extra_env={**env, "MIXLE_MPI_HEARTBEAT_FANIN": str(fanin)},
                    )
                    r.update(
                        rep=rep,
                        action=action,
                        victim=victim,
                        fanin=fanin,
                        role=role_of(victim, w, fanin),
                    )
                    print(json.dumps({k: v for k, v in r.items() if k != "stderr"}), flush=True)
                    rows.append(r)
    bound = 3 * period + period
    out = [
        f"# Detection at W = {w} with and without heartbeat fan-in",
        "",
        f"Heartbeat period {period:g} s, timeout {timeout:g} s; fan-in 0 (off) and {s.heartbeat_fanin} "
        f"(the default). The issue's bound: 3 periods + one hop per relay level = {bound * 1000:.0f} ms "
        f"for a relayed worker, {3 * period * 1000:.0f} ms for a direct one. MPI: Open MPI "
        f"(`{args.python}`), {w + 1} ranks on `nproc` = {os.cpu_count()} cores (oversubscribed).",
        "",
        "| action | victim | fan-in | role | runs | median ms | max ms | bound ms | met | detected by |",
        "|---|---:|---:|---|---:|---:|---:|---:|:---:|---|",
    ]
    keys = sorted({(r["action"], r["victim"], r["fanin"]) for r in rows})
    for action, victim, fanin in keys:
        runs = [
            r for r in rows if (r["action"], r["victim"], r["fanin"]) == (action, victim, fanin)
        ]
        lat = [r["latency_ms"] for r in runs if r["ok"]]
        role = runs[0]["role"]
        limit = (bound if role.startswith("member") else 3 * period) * 1000
        if lat:
            out.append(
                f"| {action} | {victim} | {fanin} | {role} | {len(lat)}/{len(runs)} | "
                f"{statistics.median(lat):.0f} | {max(lat):.0f} | {limit:.0f} | "
                f"{'yes' if max(lat) <= limit else 'no'} | {'; '.join(sorted({r['cause'] for r in runs if r['ok']}))} |"
            )
        else:
            out.append(
                f"| {action} | {victim} | {fanin} | {role} | 0/{len(runs)} | | | {limit:.0f} | no | failed |"
            )
    out += [
        "",
        f"Command: `python bench/fanin.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
    ]
    text = "\n".join(out)
    print(text)
    res = REPO / "bench" / "results"
    (res / f"{args.name}.md").write_text(text + "\n")
    (res / f"{args.name}.json").write_text(
        json.dumps(
            {
                "period": period,
                "timeout": timeout,
                "workers": w,
                "runs": [{k: v for k, v in r.items() if k != "stderr"} for r in rows],
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
