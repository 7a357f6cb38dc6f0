"""A plain resilient fit through the Python API (the CLI jobs are the *.sh files here):
copy this file and edit the three marked places.

Run:  .venv/bin/mixle-mpi run -n 5 -- .venv/bin/python jobs/api_fit.py [data.h5 [dataset]]
With no arguments it fits synthetic data, so it runs as it is. It prints one line per EM
iteration and checkpoints (CHECKPOINT, default api_fit.ckpt.h5 in the current folder) after
the first iteration, then every 60 s, and at the end: run the same command again after a
crash or a preemption and the fit resumes from it, to the same bits.
"""

import os
import sys

import mixle.stats as st

from mixle_mpi import ResilientMPIEncodedData, fit, is_driver

# (1) the model
estimator = st.MixtureEstimator([st.GaussianEstimator()] * 3)


# (2) the data: needed on rank 0 only; an h5py.Dataset is read in slices, never whole
def load():
    if len(sys.argv) > 1:
        import h5py

        return h5py.File(sys.argv[1], "r")[sys.argv[2] if len(sys.argv) > 2 else "x"]
    from mixle_mpi.fitting.models import get_model

    return get_model("gmm1d").sample(int(os.environ.get("N", 200_000)), 1)


def show(iteration: int, ll: float, checkpointed: str | None) -> None:
    """One line per EM iteration (fit calls it once the iteration's checkpoint is on disk)."""
    print(
        f"it {iteration} ll {ll:.10g}" + (f" (checkpoint {checkpointed})" if checkpointed else ""),
        flush=True,
    )


data = load() if is_driver() else None
# (3) layout and fit settings: num_shards fixes the bits; keep it when you compare runs or resume
with ResilientMPIEncodedData(data, estimator=estimator, num_shards=8, max_retries=2) as enc:
    model, lls = fit(
        enc,
        estimator,
        max_its=int(os.environ.get("MAX_ITS", 50)),
        delta=1e-8,
        seed=1,
        checkpoint=os.environ.get("CHECKPOINT", "api_fit.ckpt.h5"),
        on_iteration=show,
    )
    print(model)
    print(f"{len(lls)} iterations, final log-likelihood {lls[-1]!r}")
    print("rounds with failures:", [r for r in enc.rounds if r["failed"]])
