"""The built-in fit job: ``python -m mixle_mpi.fitjob --model gmm1d ...`` under mpiexec.

It fits a built-in model on synthetic data with the resilient handle and writes a JSON
result (model in mixle's safe JSON, the log-likelihood trace, the per-round record) that
tests and the demo compare bit for bit. It is also the pattern a user script follows.
"""

from __future__ import annotations

import argparse
import sys
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m mixle_mpi.fitjob", description=__doc__)
    p.add_argument("--model", default="gmm1d")
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--data-seed", type=int, default=1)
    p.add_argument("--seed", type=int, default=7, help="seed of the EM initialization")
    p.add_argument("--num-shards", type=int, default=None)
    p.add_argument("--sub-chunks", type=int, default=1)
    p.add_argument("--max-its", type=int, default=10)
    p.add_argument("--max-retries", type=int, default=2)
    p.add_argument("--init-p", type=float, default=0.1)
    p.add_argument("--out", default=None, help="write the JSON result here")
    p.add_argument("--workdir", default=None)
    p.add_argument("--checkpoint", default=None, help="HDF5 checkpoint path (resumes when it exists)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="iterations between checkpoints")
    p.add_argument("--checkpoint-seconds", type=float, default=None, help="seconds between checkpoints")
    p.add_argument("--resume", choices=["auto", "yes", "no"], default="auto")
    p.add_argument("--allow-version-change", action="store_true")
    p.add_argument("--fold-journal", action="store_true",
                   help="persist each round's received shard payloads (resume mid-round)")
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv=None) -> None:
    from mixle_mpi.runtime.handle import ResilientMPIEncodedData, is_driver
    from mixle_mpi.fitting.fitloop import fit
    from mixle_mpi.fitting.models import get_model

    args = parse_args(argv)
    model = get_model(args.model)
    est = model.estimator()
    if is_driver() and args.checkpoint:
        from mixle_mpi.storage.checkpoint import check_writable

        check_writable(args.checkpoint)  # before any work starts
    data = model.sample(args.n, args.data_seed) if is_driver() else None
    t0 = time.perf_counter()
    with ResilientMPIEncodedData(
        data, estimator=est, num_shards=args.num_shards, sub_chunks=args.sub_chunks,
        max_retries=args.max_retries, workdir=args.workdir, warm_serialization=True,  # its result is JSON
    ) as enc:  # worker ranks serve inside this call and end when the fit is done
        del data
        out = None if args.quiet else sys.stdout  # mixle's progress lines; the trace comes from fit()
        fitted, lls = fit(enc, est, max_its=args.max_its, init_p=args.init_p, seed=args.seed, out=out,
                          checkpoint=args.checkpoint, every=args.checkpoint_every, seconds=args.checkpoint_seconds,
                          resume=args.resume, allow_version_change=args.allow_version_change,
                          journal=args.fold_journal)
        result = {
            "model": fitted.to_json(),
            "ll": lls,
            "iterations": len(lls),
            "num_shards": enc.num_shards,
            "rounds": enc.rounds,
            "failures": {str(k): v for k, v in enc.failures.items()},
            "blacklist": enc.blacklist,
            "seconds": time.perf_counter() - t0,
        }
    if args.out:
        from mixle_mpi.core.atomicfile import write_json

        write_json(args.out, result)
    print(f"[mixle_mpi] fit done: {result['iterations']} log-likelihoods, final {lls[-1]!r}, "
          f"failures survived {sum(enc.failures.values())}", flush=True)


if __name__ == "__main__":
    main()
