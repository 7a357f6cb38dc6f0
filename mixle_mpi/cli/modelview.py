"""A fitted mixle model in human terms: mixture weights, means, variances or covariances,
HMM initial and transition probabilities, Poisson rates, category probabilities.

``model.json`` is mixle's safe JSON, which is exact but unreadable (base64 arrays); this
walks mixle's own model objects (loaded with mixle's safe ``from_json``, which never runs
code) and prints their parameters. Families it does not know are shown by their repr.
"""

from __future__ import annotations

import numpy as np

MAX_REPR = 300  # characters of an unknown model's repr


def _num(x) -> str:
    return f"{float(x):.6g}"


def _vec(x) -> str:
    return "[" + ", ".join(f"{float(v):.4g}" for v in np.ravel(np.asarray(x, dtype=float))) + "]"


def _matrix(m, indent: str) -> list[str]:
    """One line per row, the columns aligned across rows."""
    cells = [[f"{float(v):.4g}" for v in row] for row in np.atleast_2d(np.asarray(m, dtype=float))]
    width = max(len(c) for row in cells for c in row)
    return [indent + "[" + ", ".join(c.rjust(width) for c in row) + "]" for row in cells]


def _gaussian(d, indent: str) -> list[str]:
    return [f"{indent}Gaussian: mean {_num(d.mu)}, variance {_num(d.sigma2)}"]


def _diagonal(d, indent: str) -> list[str]:
    return [
        f"{indent}diagonal Gaussian ({d.dim}-D): mean {_vec(d.mu)}",
        f"{indent}  variances {_vec(d.covar)}",
    ]


def _full(d, indent: str) -> list[str]:
    return [
        f"{indent}Gaussian ({d.dim}-D): mean {_vec(d.mu)}",
        f"{indent}  covariance:",
        *_matrix(d.covar, indent + "    "),
    ]


def _poisson(d, indent: str) -> list[str]:
    return [f"{indent}Poisson: rate {_num(d.lam)}"]


def _categorical(d, indent: str) -> list[str]:
    probs = ", ".join(f"{k!r}: {_num(v)}" for k, v in sorted(d.pmap.items(), key=lambda kv: -kv[1]))
    return [f"{indent}categorical: {{{probs}}}"]


def _mixture(d, indent: str) -> list[str]:
    k = len(d.components)
    lines = [f"{indent}mixture of {k} component{'s' if k != 1 else ''}, weights {_vec(d.w)}"]
    for i, (w, comp) in enumerate(zip(d.w, d.components, strict=True)):
        lines.append(f"{indent}  component {i + 1} (weight {_num(w)}):")
        lines += describe_model(comp, indent + "    ")
    return lines


def _hmm(d, indent: str) -> list[str]:
    lines = [
        f"{indent}hidden Markov model with {d.n_states} states",
        f"{indent}  initial state probabilities {_vec(d.w)}",
        f"{indent}  transition matrix (row: from state, column: to state):",
        *_matrix(d.transitions, indent + "    "),
    ]
    for i, emission in enumerate(d.topics):
        lines.append(f"{indent}  state {i + 1} emits:")
        lines += describe_model(emission, indent + "    ")
    return lines


def _composite(d, indent: str) -> list[str]:
    lines = [f"{indent}tuple of {len(d.dists)} parts:"]
    for i, part in enumerate(d.dists):
        lines.append(f"{indent}  part {i + 1} (column {i + 1}):")
        lines += describe_model(part, indent + "    ")
    return lines


def _describers() -> list[tuple[type, object]]:
    import mixle.stats as st

    return [
        (st.MixtureDistribution, _mixture),
        (st.HiddenMarkovModelDistribution, _hmm),
        (st.CompositeDistribution, _composite),
        (st.MultivariateGaussianDistribution, _full),
        (st.DiagonalGaussianDistribution, _diagonal),
        (st.GaussianDistribution, _gaussian),
        (st.PoissonDistribution, _poisson),
        (st.CategoricalDistribution, _categorical),
    ]


def describe_model(model, indent: str = "") -> list[str]:
    """Lines that show ``model``'s parameters (any mixle distribution; nested ones indented)."""
    for cls, describer in _describers():
        if isinstance(model, cls):
            return describer(model, indent)
    text = repr(model)
    return [indent + (text if len(text) <= MAX_REPR else text[:MAX_REPR] + "...")]


def is_model_json(doc) -> bool:
    """Whether a parsed JSON document is one of mixle's safe-JSON objects (a model.json)."""
    return isinstance(doc, dict) and "__pysp_type__" in doc


def describe_model_json(text: str, path: str) -> list[str]:
    """Load a model.json with mixle's safe JSON and describe it."""
    from mixle.utils.serialization import from_json

    from mixle_mpi.core.errors import ConfigError

    try:
        model = from_json(text)
    except Exception as exc:  # noqa: BLE001 - any decoding failure means a damaged or foreign file
        raise ConfigError(f"{path} looks like mixle's safe JSON but does not load: {exc}") from None
    return [f"model ({type(model).__name__}):", *describe_model(model, "  ")]
