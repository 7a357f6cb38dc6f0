"""A fit whose driver blocks for good outside MPI at iteration 3: its on_iteration callback
waits on an event nobody sets (as a write to a hung file system would). The heartbeat thread
beats on; only the watchdog's look at the main thread can end the job. Then it resumes."""

import sys
import threading

from mixle_mpi import ResilientMPIEncodedData, fit, is_driver
from mixle_mpi.fitting.models import get_model

checkpoint, workdir, block = sys.argv[1], sys.argv[2], sys.argv[3] == "block"
m = get_model("diag")
data = m.sample(2000, 1) if is_driver() else None


def on_iteration(i, ll, saved):
    if block and i == 3:
        print(f"BLOCKING at iteration {i}, checkpoint {saved}", flush=True)
        threading.Event().wait()


with ResilientMPIEncodedData(data, estimator=m.estimator(), num_shards=4, workdir=workdir) as enc:
    model, history = fit(
        enc,
        m.estimator(),
        max_its=8,
        delta=None,
        checkpoint=checkpoint,
        every=1,
        on_iteration=on_iteration,
    )  # every iteration: the rerun resumes after the block
    print(f"DONE {len(history)} {history[-1]!r}", flush=True)
