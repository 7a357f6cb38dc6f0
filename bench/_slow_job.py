"""bench/_job.py with a sleep-based E-step stand-in, for the straggler bench (bench/stragglers.py).

``--shard-sleep T`` (taken off the command line before _job's parser sees it): every shard's
E-step and scoring sleep T seconds first, wherever they are computed (the ``estep_shard`` and
``score_shard`` probes). A rank then costs a core only for the real compute, which is small,
so W ranks behave as if each had a core of its own on this 2-core machine: the capacity bound
W / (W - 1 + s) of a worker at speed s can be compared with. A ``slow`` fault (chaos/fault_plan.py)
stretches each shard's whole time, sleep included. The bits are unchanged.
"""

from __future__ import annotations

import os
import sys
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import _job  # noqa: E402
from mixle_mpi.core import probes  # noqa: E402

SLEEP = {"seconds": 0.0}


def hear(ev) -> None:
    if ev.name in ("estep_shard", "score_shard") and ev.phase == "begin":
        time.sleep(SLEEP["seconds"])


def main(argv: list[str]) -> None:
    argv = list(argv)
    if "--shard-sleep" in argv:
        i = argv.index("--shard-sleep")
        SLEEP["seconds"] = float(argv[i + 1])
        del argv[i : i + 2]
    probes.listen(hear)
    _job.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
