"""The built-in fit job: ``python -m mixle_mpi.fitjob --model gmm1d ...`` under mpiexec.

It fits a built-in model on synthetic data with the resilient handle and writes a JSON
result (model in mixle's safe JSON, the log-likelihood trace, the per-round record) that
tests and the demo compare bit for bit. It is also the pattern a user script follows.
"""

from __future__ import annotations

import argparse
import sys
import time


def build_parser() -> argparse.ArgumentParser:
    """The fit job's flags: its options of ``core.options``, with their fit-job defaults."""
    from mixle_mpi.core.options import FITJOB

    p = argparse.ArgumentParser(prog="python -m mixle_mpi.fitjob", description=__doc__)
    for option in FITJOB:
        text = option.fitjob.help or option.help
        if option.kind is bool:
            p.add_argument(option.flag, action="store_true", help=text)
        elif option.choices:
            p.add_argument(
                option.flag, choices=list(option.choices), default=option.fitjob.default, help=text
            )
        else:
            kind = None if option.kind is str else option.kind
            p.add_argument(option.flag, type=kind, default=option.fitjob.default, help=text)
    return p


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    from mixle_mpi.core import jitcache

    jitcache.prime()  # before mixle is imported: load the kernels, never compile them here
    from mixle_mpi.fitting.fitloop import fit
    from mixle_mpi.fitting.models import get_model
    from mixle_mpi.runtime.handle import ResilientMPIEncodedData, is_driver

    args = parse_args(argv)
    model = get_model(args.model)
    est = model.estimator()
    if is_driver() and args.checkpoint:
        from mixle_mpi.storage.checkpoint import check_writable

        check_writable(args.checkpoint)  # before any work starts
    data = model.sample(args.n, args.data_seed) if is_driver() else None
    t0 = time.perf_counter()
    with ResilientMPIEncodedData(
        data,
        estimator=est,
        num_shards=args.num_shards,
        sub_chunks=args.sub_chunks,
        max_retries=args.max_retries,
        workdir=args.workdir,
        warm_serialization=True,  # its result is JSON
    ) as enc:  # worker ranks serve inside this call and end when the fit is done
        del data
        out = (
            None if args.quiet else sys.stdout
        )  # mixle's progress lines; the trace comes from fit()
        fitted, lls = fit(
            enc,
            est,
            max_its=args.max_its,
            init_p=args.init_p,
            seed=args.seed,
            out=out,
            checkpoint=args.checkpoint,
            every=args.checkpoint_every,
            seconds=args.checkpoint_seconds,
            resume=args.resume,
            allow_version_change=args.allow_version_change,
            journal=args.fold_journal,
        )
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
    print(
        f"[mixle_mpi] fit done: {result['iterations']} log-likelihoods, final {lls[-1]!r}, "
        f"failures survived {sum(enc.failures.values())}",
        flush=True,
    )


if __name__ == "__main__":
    main()
