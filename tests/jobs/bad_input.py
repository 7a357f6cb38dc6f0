"""An MPI job that builds the handle with one kind of bad input (argv[1]); it must fail
fast on the driver with a clear message and a nonzero exit, never hang."""

import sys

import mixle.stats as st
import numpy as np

from mixle_mpi import ResilientMPIEncodedData, is_driver

case = sys.argv[1]
est = st.MixtureEstimator([st.GaussianEstimator()] * 2)
good = list(np.random.RandomState(0).normal(size=100))
kwargs = {"workdir": sys.argv[2] if len(sys.argv) > 2 else "bad_input_work"}
data = good
if case == "empty":
    data = []
elif case == "too_few":
    data, kwargs["num_shards"] = good[:3], 8
elif case == "nan":
    data = good[:50] + [float("nan")] + good[50:]
elif case == "ragged":
    est = st.MixtureEstimator([st.DiagonalGaussianEstimator(dim=3)] * 2)
    data = [np.ones(3)] * 10 + [np.ones(2)] + [np.ones(3)] * 10
elif case == "mismatch":
    data = [("a", 1), ("b", 2)] * 20
elif (
    case == "columns_1d"
):  # a scalar Gaussian on 3 columns: name the multivariate estimators, never "flatten"
    data = np.random.RandomState(0).normal(size=(100, 3))
elif case == "num_shards":
    kwargs["num_shards"] = 0
elif case == "max_retries":
    kwargs["max_retries"] = 0
elif case == "unwritable":
    kwargs["store_path"] = "/proc/mixle_mpi_cannot_write_here/shards.h5"
elif case == "single":
    pass
elif case == "driver_raises":
    pass
elif case == "load_raises":  # the user's own loading code fails on the driver, before the handle
    if is_driver():
        raise ValueError("cannot parse measurements.dat line 7: 'n/a'")
elif case == "worker_raises":
    if not is_driver():
        raise RuntimeError("user code failed on a worker rank before the handle existed")
else:
    raise SystemExit(f"unknown case {case}")

with ResilientMPIEncodedData(data if is_driver() else None, estimator=est, **kwargs) as enc:
    from mixle.inference.estimation import optimize

    optimize(None, est, enc_data=enc, max_its=2, rng=np.random.RandomState(1))
    if case == "driver_raises":
        raise RuntimeError("user code failed on the driver in the middle of the job")
print("UNEXPECTED: the bad input was accepted", flush=True)
