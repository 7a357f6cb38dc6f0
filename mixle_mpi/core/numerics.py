"""Each rank's numerics: the job's common baseline, and a probe whose hash tells ranks apart.

numpy picks its SIMD kernels at run time from the CPU (``np.exp`` with AVX-512 or AVX2 differs
in the last bits), OpenBLAS picks its kernels from the CPU too, and a JIT compiles for the host
(numba's default target). On a partition that mixes CPU generations, a shard recomputed on
another node would then change the model. In mode ``baseline`` the launcher sets one baseline
on every rank before numpy is imported (:func:`baseline_env`; MPICH's Hydra, srun and Open MPI
pass it to the ranks and to the replacements they spawn): a fixed portable level,
x86-64-v3 on x86 (Haswell and later, and every AMD since Zen: AVX2 and FMA, which glibc's libm
also dispatches on) and ARMv8.0 with NEON on ARM. A fixed level, not the intersection of the
ranks' features, because the intersection is known only once every rank is up, and a
replacement arriving later could lower it and change the bits mid-fit; a fixed level makes
the bits a property of the job, the same for every placement, replacement and resume.

Mode ``auto`` (the default) pins nothing while every rank's probe agrees: on an AVX-512
machine the baseline cost up to 12 % per E-step iteration (numpy's float64 ``exp``/``log``
are SIMD only with AVX-512; bench/results/numerics_baseline.md), over the 2 % a default may
cost. When the probes differ at startup the launcher starts the job again pinned;
``native`` never pins.

The probe (:func:`probe`) runs fixed inputs through the kernels the E-step uses and the
E-step itself (``estep.shard_result``, whatever engine computes it) on small fixed shards of
each model family, and hashes the bits. A rank whose hash differs from the driver's gets no
shard (policy/numerics_plan.py).
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
from typing import NamedTuple

from mixle_mpi.core import cpuinfo

MODE_ENV = "MIXLE_MPI_NUMERICS"  # auto, baseline or native (the option ``numerics``)
MODES = ("auto", "baseline", "native")
# What a rank was started under: a baseline's name, or the mode that pins none (auto, native)
BASELINE_MARK = "MIXLE_MPI_NUMERIC_BASELINE"
# numpy's dispatch targets above each baseline, in numpy 2.4's names and the older ones. Only
# those the installed build dispatches to are named: disabling one the CPU lacks is harmless,
# one the build does not know draws an ImportWarning (and naming one to *enable* fails).
ABOVE = {
    "x86_64": (
        "X86_V4 AVX512_ICL AVX512_SPR AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX "
        "AVX512_CLX AVX512_CNL AVX512FP16"
    ).split(),
    "aarch64": "ASIMDHP ASIMDDP ASIMDFHM SVE".split(),
}
BASELINES = {
    "x86_64": {
        "name": "x86-64-v3",
        "OPENBLAS_CORETYPE": "Haswell",
        "NUMBA_CPU_NAME": "haswell",
        "NUMBA_CPU_FEATURES": "+64bit,+sse,+sse2,+sse3,+ssse3,+sse4.1,+sse4.2,+popcnt,+cx16,"
        "+avx,+avx2,+fma,+f16c,+bmi,+bmi2,+lzcnt,+movbe,+xsave",
    },
    "aarch64": {
        "name": "armv8.0-a",
        "OPENBLAS_CORETYPE": "ARMV8",
        "NUMBA_CPU_NAME": "generic",
        "NUMBA_CPU_FEATURES": "+neon,+fp-armv8",
    },
}
VARS = ("OPENBLAS_CORETYPE", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")
# Every variable a rank's bits depend on (BLAS threads and kernels, numpy's dispatch, the JIT
# target, the mode and its mark): a launcher that does not hand its environment to the ranks
# of other hosts (Open MPI's mpirun) must be told to pass these on.
BITS_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "MIXLE_MPI_BLAS_THREADS",
    "OPENBLAS_L2_SIZE",
    "NPY_DISABLE_CPU_FEATURES",
    *VARS,
    MODE_ENV,
    BASELINE_MARK,
    "NUMBA_CACHE_DIR",  # where the kernels are loaded from (core/jitcache)
)


def bits_env(environ) -> dict[str, str]:
    """The variables of ``BITS_VARS`` that ``environ`` sets, in that order."""
    return {var: environ[var] for var in BITS_VARS if var in environ}


class Numerics(NamedTuple):
    """What a rank reports of its numerics (``protocol.Hello``)."""

    probe: str  # core.numerics.probe(): "" from a rank that could not compute it
    baseline: str = ""  # the baseline it was started under, or "native"
    cpu: str = ""  # the CPU's model name
    dispatch: tuple = ()  # numpy's SIMD targets in use
    blas: str = ""  # OpenBLAS's core type
    compiled: tuple = ()  # parallel kernels it compiled rather than loaded (core/jitcache)


def arch(machine: str | None = None) -> str:
    """``x86_64`` or ``aarch64`` (``AMD64``/``arm64`` spelled as Linux does), else as found."""
    m = (machine or platform.machine()).lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def mode(environ=None) -> str:
    """``MIXLE_MPI_NUMERICS``: auto (the default), baseline or native."""
    from mixle_mpi.core.errors import ConfigError

    environ = os.environ if environ is None else environ
    value = environ.get(MODE_ENV, "").strip().lower() or "auto"
    if value not in MODES:
        raise ConfigError(f"{MODE_ENV}={value!r} must be one of {', '.join(MODES)}")
    return value


def numpy_dispatch_targets() -> list[str]:
    """The targets the installed numpy build dispatches to (whatever this CPU has)."""
    from numpy._core import _multiarray_umath as umath

    return list(umath.__cpu_dispatch__)


def baseline_env(
    machine: str | None = None, unpinned: str = "", dispatch: list[str] | None = None
) -> dict[str, str]:
    """The variables that put a rank on the job's baseline (pure given ``dispatch``, numpy's
    dispatch targets). With ``unpinned`` (a mode: auto or native), or on an architecture
    without a baseline, only ``BASELINE_MARK`` set to that mode (native there). The mark
    names what a rank runs under, for its reports and a checkpoint."""
    key = arch(machine)
    spec = BASELINES.get(key)
    if unpinned or spec is None:
        return {BASELINE_MARK: unpinned if spec is not None and unpinned else "native"}
    targets = numpy_dispatch_targets() if dispatch is None else dispatch
    above = " ".join(t for t in ABOVE[key] if t in targets)
    return {
        BASELINE_MARK: spec["name"],
        **({"NPY_DISABLE_CPU_FEATURES": above} if above else {}),
        **{v: spec[v] for v in VARS},
    }


def with_baseline(env: dict, machine: str | None = None) -> dict:
    """``env`` with the baseline set over it in mode baseline; in auto and native only the
    mark (auto launches again pinned once the ranks' probes differ: ``launch.launcher``)."""
    m = mode(env)
    return {**env, **baseline_env(machine, "" if m == "baseline" else m)}


def pinned(env: dict) -> dict:
    """``env`` in mode baseline: what the launcher relaunches an auto job with."""
    return with_baseline({**env, MODE_ENV: "baseline"})


def baseline_name(environ=None) -> str:
    """The baseline this process was started under: its name, or ``auto`` or ``native``
    (none pinned; native too when started without mixle-mpi's launcher)."""
    environ = os.environ if environ is None else environ
    return environ.get(BASELINE_MARK, "") or "native"


def describe() -> dict:
    """This process's numerics, for events, ``status`` and the messages of a refusal."""
    from numpy._core import _multiarray_umath as umath

    from mixle_mpi.core.blas import blas_cores

    features = umath.__cpu_features__
    return {
        "cpu": cpuinfo.model(),
        "baseline": baseline_name(),
        "numpy_dispatch": [t for t in umath.__cpu_dispatch__ if features.get(t)],
        "cpu_features": sorted(k for k, on in features.items() if on),
        "blas_core": blas_cores(),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
    }


def _kernels() -> list:
    """The elementwise kernels and reductions an E-step leans on, over fixed inputs."""
    import numpy as np

    x = np.linspace(-30.0, 30.0, 4099)
    y = np.abs(x) + 0.5
    m = np.sin(np.arange(64.0)).reshape(8, 8)
    out = [np.exp(x), np.log(y), np.log1p(y), np.expm1(x / 10), np.tanh(x), np.sin(x)]
    out += [np.logaddexp(x, x[::-1]), np.power(y, 1.3), np.sqrt(y), x / 3.7]
    out += [np.exp(x.astype(np.float32)), np.log(y.astype(np.float32))]
    out += [np.sum(np.exp(x / 10)), np.cumsum(y), np.dot(y, y), m @ m, m @ m[:, 0]]
    return out


def _families() -> list:
    """One small estimator of each model family (1-D and diagonal Gaussian mixtures, a
    Poisson mixture, a Gaussian HMM), each with a fixed shard of rows."""
    import mixle.stats as st
    import numpy as np

    rng = np.random.RandomState(7)
    gauss = list(rng.normal(size=200) * 3.0)
    diag = [row for row in rng.normal(size=(200, 3)) * 2.0]
    counts = [int(v) for v in rng.poisson(4.0, size=200)]
    seqs = [list(rng.normal(size=6) * 2.0) for _ in range(30)]
    return [
        (st.MixtureEstimator([st.GaussianEstimator()] * 3), gauss),
        (st.MixtureEstimator([st.DiagonalGaussianEstimator(dim=3)] * 2), diag),
        (st.MixtureEstimator([st.PoissonEstimator()] * 2), counts),
        (st.HiddenMarkovModelEstimator([st.GaussianEstimator()] * 2), seqs),
    ]


def _estep_bits(estimator, rows) -> bytes:
    """An initialization, then an E-step with scores of its model, through ``shard_result``
    (the code every rank computes shards with)."""
    from mixle_mpi.core.estep import encode_shard, shard_result

    chunks = encode_shard(estimator.accumulator_factory().make().acc_to_encoder(), rows, 2)
    count, value = pickle.loads(shard_result("init", (estimator, 0.5), chunks, extra=11))
    model = estimator.estimate(count, value)
    payload, scores = shard_result("estep", (estimator, model), chunks, scores=True)
    return payload + repr(scores).encode()


@functools.lru_cache(maxsize=1)
def probe() -> str:
    """The hash of this process's numerics (16 hex digits): equal on two ranks only if their
    kernels and E-steps gave the same bits. Computed once per process (about 0.1 s)."""
    h = hashlib.sha256()
    for a in _kernels():
        h.update(a.tobytes())
    for estimator, rows in _families():
        h.update(_estep_bits(estimator, rows))
    return h.hexdigest()[:16]


def signature() -> str:
    """What a checkpoint records: the baseline and the probe's hash (``x86-64-v3 3f2a...``)."""
    return f"{baseline_name()} {probe()}"


def report() -> Numerics:
    """This rank's numerics as it reports them to the driver."""
    from mixle_mpi.core import jitcache

    d = describe()
    hashed = probe()
    return Numerics(
        hashed,
        d["baseline"],
        d["cpu"],
        tuple(d["numpy_dispatch"]),
        d["openblas_coretype"],
        tuple(jitcache.compiled_here()),
    )
