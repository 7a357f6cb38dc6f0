"""Model specs: ``gmm:k=8,cov=diag`` and friends, or ``json:FILE``; the one registry of model families.

``mixle-mpi fit --model`` takes a spec, and each built-in test model (``fitting/models.py``)
is a spec of a family here with a data generator. A spec names a family and its parameters; the estimator is built once the data's shape is
known (a Gaussian mixture's dimension is the data's number of columns). Parsing is pure and
unit-tested; every error lists what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mixle_mpi.core.errors import ConfigError


@dataclass(frozen=True)
class Family:
    """One model family of the ``--model`` grammar: its help, its parameters, its rows."""

    text: str  # the grammar, as errors and help show it
    params: dict[str, object]  # parameter -> default (None: required)
    rows: str  # what rows it needs, for the data loader: matrix, integers, sequences, table, any


# The single registry of model families; the built-in test models (fitting/models.py) are specs of these.
FAMILIES: dict[str, Family] = {
    "gmm": Family(
        "Gaussian mixture: gmm:k=K[,cov=diag|full] (1-D data: a scalar Gaussian per component)",
        {"k": None, "cov": "diag"},
        "matrix",
    ),
    "poisson": Family(
        "Poisson mixture: poisson:k=K (non-negative integer data, one column)",
        {"k": None},
        "integers",
    ),
    "hmm": Family(
        "hidden Markov model: hmm:states=S[,emission=gaussian|poisson][,lengths=none|poisson] "
        "(data: one sequence per row)",
        {"states": None, "emission": "gaussian", "lengths": "none"},
        "sequences",
    ),
    "composite": Family(
        "mixture of tuples: composite:k=K,parts=gaussian+categorical+poisson (one part per column)",
        {"k": None, "parts": None},
        "table",
    ),
    "json": Family(
        "any mixle estimator, or a fitted model whose estimator is wanted, as mixle's safe JSON: "
        "json:FILE",
        {},
        "any",
    ),
}
CHOICES = {
    "cov": ("diag", "full"),
    "emission": ("gaussian", "poisson"),
    "lengths": ("none", "poisson"),
}
PARTS = ("gaussian", "categorical", "poisson")
INT_PARAMS = ("k", "states")


@dataclass(frozen=True)
class ModelSpec:
    family: str
    params: dict = field(default_factory=dict)
    text: str = ""

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.params.get("parts", ()))


def valid_specs() -> str:
    return "; ".join(f.text for f in FAMILIES.values())


def parse_spec(text: str) -> ModelSpec:
    """Parse ``family:key=value,...`` (pure)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"a model spec is needed; valid specs are: {valid_specs()}")
    family, _, rest = text.strip().partition(":")
    family = family.strip().lower()
    if family not in FAMILIES:
        raise ConfigError(
            f"unknown model family {family!r} in {text!r}; valid specs are: {valid_specs()}"
        )
    if family == "json":
        if not rest.strip():
            raise ConfigError(f"json: needs a file, e.g. json:estimator.json; found {text!r}")
        return ModelSpec("json", {"path": rest.strip()}, text)
    allowed = FAMILIES[family].params
    params: dict[str, object] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not value:
            raise ConfigError(
                f"model parameter {item!r} in {text!r} must be key=value; {FAMILIES[family].text}"
            )
        if key not in allowed:
            raise ConfigError(
                f"model {family!r} has no parameter {key!r}; valid parameters are "
                f"{sorted(allowed)} ({FAMILIES[family].text})"
            )
        params[key] = _value(family, key, value)
    for key, default in allowed.items():
        if key not in params:
            if default is None:
                raise ConfigError(
                    f"model {family!r} needs {key}=...; found {text!r}. {FAMILIES[family].text}"
                )
            params[key] = default
    return ModelSpec(family, params, text)


def _value(family: str, key: str, value: str):
    if key in INT_PARAMS:
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise ConfigError(f"model parameter {key} must be an integer >= 1; found {value!r}")
        return number
    if key in CHOICES:
        if value.lower() not in CHOICES[key]:
            raise ConfigError(
                f"model parameter {key} must be one of {list(CHOICES[key])}; found {value!r}"
            )
        return value.lower()
    if key == "parts":
        parts = tuple(p.strip().lower() for p in value.split("+"))
        bad = [p for p in parts if p not in PARTS]
        if bad or not parts:
            raise ConfigError(
                f"composite parts must be {'+'.join(PARTS)} names joined by '+'; found {value!r}"
            )
        return parts
    raise AssertionError(
        f"unhandled model parameter {family}.{key}"
    )  # FAMILIES and this function disagree


def row_shape_needed(spec: ModelSpec) -> str:
    """What rows the family needs, for the data loader: 'matrix', 'integers', 'sequences', 'table' or 'any'."""
    return FAMILIES[spec.family].rows


def model_bytes(spec: ModelSpec, ncols: int | None) -> tuple[int, int]:
    """(bytes of the model's parameters, components) for the memory estimate (pure, rough):
    a full-covariance Gaussian mixture is k d-by-d matrices; a ``json:`` model is not sized (0)."""
    p, d = spec.params, ncols or 1
    if spec.family == "gmm":
        per = d * d + d + 1 if p["cov"] == "full" and ncols is not None else 2 * d + 1
        return 8 * p["k"] * per, p["k"]
    if spec.family == "hmm":
        return 8 * (p["states"] ** 2 + 3 * p["states"]), p["states"]
    if spec.family in ("poisson", "composite"):
        return 8 * p["k"] * (2 + 2 * len(spec.parts)), p["k"]
    return 0, 1


def build_estimator(spec: ModelSpec, ncols: int | None):
    """The mixle estimator for ``spec``; ``ncols`` is the data's number of columns (None: 1-D rows)."""
    import mixle.stats as st

    p = spec.params
    if spec.family == "gmm":
        if ncols is None:
            comp = st.GaussianEstimator()
        elif p["cov"] == "diag":
            comp = st.DiagonalGaussianEstimator(dim=ncols)
        else:
            comp = st.MultivariateGaussianEstimator(dim=ncols)
        return st.MixtureEstimator([comp] * p["k"])
    if spec.family == "poisson":
        return st.MixtureEstimator([st.PoissonEstimator()] * p["k"])
    if spec.family == "hmm":
        emission = st.GaussianEstimator() if p["emission"] == "gaussian" else st.PoissonEstimator()
        lengths = {"len_estimator": st.PoissonEstimator()} if p["lengths"] == "poisson" else {}
        return st.HiddenMarkovModelEstimator([emission] * p["states"], **lengths)
    if spec.family == "composite":
        make = {
            "gaussian": st.GaussianEstimator,
            "categorical": st.CategoricalEstimator,
            "poisson": st.PoissonEstimator,
        }
        return st.MixtureEstimator(
            [st.CompositeEstimator(tuple(make[q]() for q in p["parts"]))] * p["k"]
        )
    return estimator_from_json_file(p["path"])


def estimator_from_json_file(path: str):
    """An estimator from mixle's safe JSON: an estimator, or a fitted model (its ``estimator()``)."""
    from mixle.stats.compute.pdist import ParameterEstimator
    from mixle.utils.serialization import from_json

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the model file {path!r}: {exc.strerror}") from None
    try:
        obj = from_json(text)
    except Exception as exc:  # noqa: BLE001 - any decoding failure is a bad file
        raise ConfigError(
            f"{path} is not a mixle estimator or model in mixle's safe JSON: {exc}"
        ) from None
    if isinstance(obj, ParameterEstimator):
        return obj
    if hasattr(obj, "estimator"):
        return obj.estimator()
    raise ConfigError(
        f"{path} holds a {type(obj).__name__}; needs a mixle estimator or a fitted model"
    )
