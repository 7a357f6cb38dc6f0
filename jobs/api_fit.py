"""A plain resilient fit through the Python API (the CLI jobs are the *.sh files here):
copy this file and edit the three marked places.

Run:  .venv/bin/mixle-mpi run -n 5 -- .venv/bin/python jobs/api_fit.py [data.h5 [dataset]]
With no arguments it fits synthetic data, so it runs as it is.
"""

import sys

import numpy as np

import mixle.stats as st
from mixle.inference.estimation import optimize
from mixle_mpi import ResilientMPIEncodedData, is_driver

# (1) the model
estimator = st.MixtureEstimator([st.GaussianEstimator()] * 3)


# (2) the data: needed on rank 0 only; an h5py.Dataset is read in slices, never whole
def load():
    if len(sys.argv) > 1:
        import h5py

        return h5py.File(sys.argv[1], "r")[sys.argv[2] if len(sys.argv) > 2 else "x"]
    from mixle_mpi.models import get_model

    return get_model("gmm1d").sample(200_000, 1)


data = load() if is_driver() else None
# (3) layout and fit settings: num_shards fixes the bits; keep it when you compare runs
with ResilientMPIEncodedData(data, estimator=estimator, num_shards=8, max_retries=2) as enc:
    model = optimize(None, estimator, enc_data=enc, max_its=50, delta=1e-8, rng=np.random.RandomState(1))
    print(model)
    print("rounds with failures:", [r for r in enc.rounds if r["failed"]])
