"""Item 7: bytes sent over MPI per EM iteration against the size of the sufficient statistics.

One failure-free job per model with ``--count-bytes``: rank 0 logs the pickled size of
every message it posts (commands: model and estimator to each worker) and receives
(replies: one pickled ``(count, accumulator.value())`` per shard, heartbeats apart). The
baseline, from the same job, is the numeric content of every shard's sufficient statistic
(array bytes, 8 per scalar): the least any transport must move upwards per E-step. The
figure is (command + reply bytes) per iteration / that baseline; 1 would be a perfect
packing of the statistics alone.

    python bench/payload.py [--quick]
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench import common  # noqa: E402

MODELS = {"gmm1d": 1_000_000, "diag": 200_000, "hmm": 20_000}
QUICK = {"diag": 10_000}


def measure(python: str, quick: bool, workers: int = 2) -> dict:
    figures, raw = [], {}
    with tempfile.TemporaryDirectory(prefix="mixle_mpi_bytes_") as tmp:
        for model, n in (QUICK if quick else MODELS).items():
            out = os.path.join(tmp, f"{model}.json")
            cmd = common.launcher(
                python,
                workers + 1,
                [
                    python,
                    common.JOB,
                    "--backend",
                    "resilient",
                    "--model",
                    model,
                    "--n",
                    str(n),
                    "--its",
                    "4",
                    "--count-bytes",
                    "--out",
                    out,
                ],
            )
            rec = common.run_record(cmd, out, f"payload {model}")
            if rec is None:
                continue
            down, up, hb = (rec[k]["median"] for k in ("bytes_down", "bytes_up", "bytes_hb"))
            stats = rec["payload"]["estep_stat_numeric_bytes"]
            raw[model] = {
                "down": down,
                "up": up,
                "heartbeat": hb,
                "stat_numeric": stats,
                "stat_pickled": rec["payload"]["estep_result_bytes"],
                "shards": rec["num_shards"],
            }
            common.log(
                f"payload {model}: {down:,.0f} B down + {up:,.0f} B up per iteration; statistics {stats:,} B"
            )
            figures.append(
                common.figure(
                    "7",
                    f"MPI bytes per iteration / sufficient-statistic bytes ({model}, N={n:,}, W={workers}, S={rec['num_shards']})",
                    [(down + up) / stats],
                    baseline="numeric bytes of every shard's E-step statistic in the same job",
                    target=None,
                    met=None,
                    command=common.show(cmd, tmp=tmp),
                    unit="ratio (lower is better)",
                    why=(
                        "down: the model and the estimator go to each worker once per iteration (one round "
                        "computes the E-step and the scores, estep_ahead); up: pickled per-shard statistics "
                        "and scores"
                    ),
                    bytes_per_iteration=raw[model],
                )
            )
    return {"figures": figures, "raw": raw}


def main(argv=None) -> int:
    return common.script_main(measure, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
