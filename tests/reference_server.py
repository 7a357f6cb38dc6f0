"""The tests' reference fits, served by one long-lived process per numerics mode.

A reference runs in a process of its own (numpy picks its SIMD kernels when it is imported,
so the numerics mode is the process's), and importing mixle costs about 2 s of CPU. Started
once per mode and asked for each fit in turn, a reference costs its fit alone.

Protocol: one JSON list per line on stdin (``reference_fit``'s arguments, then the engine),
one line per answer on stdout: ``REPLY`` and the JSON result, or ``ERROR`` and the traceback
as JSON. Ends at end of input.
"""

from __future__ import annotations

import json
import sys
import traceback

REPLY, ERROR = "REPLY ", "ERROR "


def main() -> None:
    from mixle_mpi.fitting.reference import reference_fit

    out = sys.stdout
    sys.stdout = sys.stderr  # whatever the fit prints never mixes with the answers
    for line in sys.stdin:
        if not line.strip():
            continue
        args = json.loads(line)
        try:
            answer = REPLY + json.dumps(reference_fit(*args[:7], engine=args[7]))
        except Exception:  # noqa: BLE001 - the test that asked reports it
            answer = ERROR + json.dumps(traceback.format_exc())
        out.write(answer + "\n")
        out.flush()


if __name__ == "__main__":
    main()
