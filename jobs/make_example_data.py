"""Write an example HDF5 data set for the jobs in this folder: a diagonal Gaussian mixture
(K=4, D=8) with N rows in /measurements/X, written in blocks so N may exceed RAM.

    python jobs/make_example_data.py OUT.h5 [N]
"""

import sys

import h5py
import numpy as np


def main(path: str, n: int, k: int = 4, dim: int = 8, block: int = 1_000_000) -> None:
    rng = np.random.RandomState(2026)
    centers = rng.normal(scale=3.0, size=(k, dim))
    scales = rng.uniform(0.5, 1.5, size=(k, dim))
    with h5py.File(path + ".tmp", "w") as f:
        ds = f.create_dataset(
            "measurements/X", shape=(n, dim), dtype="f8", chunks=(min(n, 65536), dim)
        )
        for a in range(0, n, block):
            b = min(n, a + block)
            z = rng.randint(k, size=b - a)
            ds[a:b] = centers[z] + rng.normal(size=(b - a, dim)) * scales[z]
    import os

    os.replace(path + ".tmp", path)
    print(f"wrote {path}:/measurements/X, {n} rows x {dim} columns ({n * dim * 8 / 1e6:.0f} MB)")


if __name__ == "__main__":
    main(sys.argv[1], int(float(sys.argv[2])) if len(sys.argv) > 2 else 100_000)
