"""Model specs, data sources and job files: parsing, and every error a user can hit."""

from __future__ import annotations

import h5py
import mixle.stats as st
import numpy as np
import pytest

from mixle_mpi.cli import datainput
from mixle_mpi.cli.jobconfig import FitConfig, read_toml, resolve, to_argv
from mixle_mpi.core.errors import ConfigError, DataError
from mixle_mpi.fitting import modelspec


# -- model specs --------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, family, params",
    [
        ("gmm:k=8,cov=diag", "gmm", {"k": 8, "cov": "diag"}),
        ("gmm:k=2", "gmm", {"k": 2, "cov": "diag"}),
        ("GMM:k=3,cov=FULL", "gmm", {"k": 3, "cov": "full"}),
        ("poisson:k=4", "poisson", {"k": 4}),
        (
            "hmm:states=3,emission=poisson",
            "hmm",
            {"states": 3, "emission": "poisson", "lengths": "none"},
        ),
        (
            "hmm:states=2,lengths=poisson",
            "hmm",
            {"states": 2, "emission": "gaussian", "lengths": "poisson"},
        ),
        (
            "composite:k=2,parts=gaussian+categorical+poisson",
            "composite",
            {"k": 2, "parts": ("gaussian", "categorical", "poisson")},
        ),
    ],
)
def test_model_specs_parse(text, family, params):
    spec = modelspec.parse_spec(text)
    assert (spec.family, spec.params) == (family, params)


@pytest.mark.parametrize(
    "text, needle",
    [
        ("kmeans:k=3", "unknown model family 'kmeans'"),
        (
            "gmm:k=3,covariance=diag",
            "has no parameter 'covariance'; valid parameters are ['cov', 'k']",
        ),
        ("gmm:cov=diag", "needs k=..."),
        ("gmm:k=0", "k must be an integer >= 1; found '0'"),
        ("gmm:k=two", "k must be an integer >= 1; found 'two'"),
        ("gmm:k=2,cov=spherical", "cov must be one of ['diag', 'full']; found 'spherical'"),
        ("composite:k=2,parts=gaussian+beta", "composite parts must be"),
        ("gmm:k", "must be key=value"),
        ("json:", "json: needs a file"),
        ("", "a model spec is needed"),
    ],
)
def test_bad_model_specs_say_what_is_valid(text, needle):
    with pytest.raises(ConfigError) as err:
        modelspec.parse_spec(text)
    assert needle in str(err.value)
    if "unknown model family" in needle:
        for family in modelspec.FAMILIES:
            assert f"{family}:" in str(err.value)


def test_estimators_follow_the_data_shape():
    gmm = modelspec.build_estimator(modelspec.parse_spec("gmm:k=2,cov=diag"), 3)
    assert isinstance(gmm, st.MixtureEstimator) and len(gmm.estimators) == 2
    assert (
        isinstance(gmm.estimators[0], st.DiagonalGaussianEstimator) and gmm.estimators[0].dim == 3
    )
    full = modelspec.build_estimator(modelspec.parse_spec("gmm:k=2,cov=full"), 4)
    assert isinstance(full.estimators[0], st.MultivariateGaussianEstimator)
    scalar = modelspec.build_estimator(modelspec.parse_spec("gmm:k=2"), None)
    assert isinstance(scalar.estimators[0], st.GaussianEstimator)
    hmm = modelspec.build_estimator(modelspec.parse_spec("hmm:states=2"), None)
    assert type(hmm).__name__.startswith("HiddenMarkov")
    comp = modelspec.build_estimator(
        modelspec.parse_spec("composite:k=2,parts=gaussian+categorical"), 2
    )
    assert isinstance(comp.estimators[0], st.CompositeEstimator)


def test_json_specs_take_an_estimator_or_a_fitted_model(tmp_path):
    from mixle.utils.serialization import to_json

    est_file = tmp_path / "est.json"
    est_file.write_text(to_json(st.MixtureEstimator([st.PoissonEstimator()] * 2)))
    assert isinstance(
        modelspec.build_estimator(modelspec.parse_spec(f"json:{est_file}"), None),
        st.MixtureEstimator,
    )
    model_file = tmp_path / "model.json"
    model_file.write_text(
        to_json(st.MixtureDistribution([st.GaussianDistribution(0.0, 1.0)] * 2, [0.5, 0.5]))
    )
    est = modelspec.build_estimator(modelspec.parse_spec(f"json:{model_file}"), None)
    assert isinstance(est, st.MixtureEstimator)
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a model"')
    with pytest.raises(ConfigError, match="not a mixle estimator or model"):
        modelspec.build_estimator(modelspec.parse_spec(f"json:{bad}"), None)
    with pytest.raises(ConfigError, match="cannot read the model file"):
        modelspec.build_estimator(modelspec.parse_spec(f"json:{tmp_path / 'missing.json'}"), None)


# -- data sources -------------------------------------------------------------------
def test_data_sources_parse():
    assert datainput.parse_source("x.h5:/g/X") == datainput.DataSource(
        "h5", "x.h5", "/g/X", "x.h5:/g/X"
    )
    assert datainput.parse_source("dir.v2/x.hdf5").dataset is None
    assert datainput.parse_source("a.npy").kind == "npy"
    assert datainput.parse_source("a.csv").kind == "csv"
    assert datainput.parse_source("builtin:iris").path.endswith("iris.csv")
    with pytest.raises(ConfigError, match="valid ones are \\['iris'\\]"):
        datainput.parse_source("builtin:wine")
    with pytest.raises(ConfigError, match="cannot tell the format of 'data.parquet'"):
        datainput.parse_source("data.parquet")
    assert datainput.parse_columns("0:3,x") == ["0", "1", "2", "x"]
    assert datainput.parse_columns(None) is None


@pytest.fixture
def h5file(tmp_path):
    path = tmp_path / "data.h5"
    rng = np.random.RandomState(0)
    with h5py.File(path, "w") as f:
        f["group/X"] = rng.normal(size=(50, 3))
        f["counts"] = rng.poisson(3.0, size=50)
        f["labels"] = np.array([b"a"] * 50)
        seqs = f.create_dataset("seqs", (4,), dtype=h5py.vlen_dtype(np.float64))
        for i in range(4):
            seqs[i] = rng.normal(size=3 + i)
    return path


def test_hdf5_datasets_are_handed_over_unread(h5file):
    loaded = datainput.load(datainput.parse_source(f"{h5file}:/group/X"), "matrix")
    try:
        assert isinstance(loaded.data, h5py.Dataset) and loaded.ncols == 3
    finally:
        loaded.close()
    seqs = datainput.load(datainput.parse_source(f"{h5file}:/seqs"), "sequences")
    assert [len(s) for s in seqs.data] == [3, 4, 5, 6]
    seqs.close()


def test_a_wrong_dataset_name_lists_the_datasets(h5file):
    with pytest.raises(ConfigError) as err:
        datainput.load(datainput.parse_source(f"{h5file}:/group/Y"), "matrix")
    msg = str(err.value)
    assert "'/group/Y'" in msg and "is not there" in msg
    for name in ("/group/X (50, 3) float64", "/counts (50,)", "/seqs (4,)"):
        assert name in msg
    with pytest.raises(ConfigError, match="holds 4 datasets; name one"):
        datainput.load(datainput.parse_source(str(h5file)), "matrix")
    with pytest.raises(ConfigError, match="is a group, not a dataset"):
        datainput.load(datainput.parse_source(f"{h5file}:/group"), "matrix")


def test_hdf5_type_errors_say_what_was_needed(h5file):
    with pytest.raises(DataError, match="needs a numeric dataset"):
        datainput.load(datainput.parse_source(f"{h5file}:/labels"), "matrix")
    with pytest.raises(
        DataError, match="Poisson mixture needs one column of non-negative integers"
    ):
        datainput.load(datainput.parse_source(f"{h5file}:/group/X"), "integers")
    with pytest.raises(DataError, match="variable-length dataset"):
        datainput.load(datainput.parse_source(f"{h5file}:/counts"), "sequences")
    with pytest.raises(ConfigError, match="no such data file"):
        datainput.load(datainput.parse_source(f"{h5file}.missing.h5:/X"), "matrix")


def test_npy_is_memory_mapped(tmp_path):
    path = tmp_path / "x.npy"
    np.save(path, np.arange(12.0).reshape(6, 2))
    loaded = datainput.load(datainput.parse_source(str(path)), "matrix")
    assert type(loaded.data) is np.ndarray and loaded.ncols == 2
    assert not loaded.data.flags.owndata  # a view of the mapped file, not a copy
    np.save(tmp_path / "o.npy", np.array(["a", "b"]))
    with pytest.raises(DataError, match="must be a numeric"):
        datainput.load(datainput.parse_source(str(tmp_path / "o.npy")), "matrix")


def test_csv_header_columns_and_types(tmp_path):
    iris = datainput.load(
        datainput.parse_source("builtin:iris"), "matrix", datainput.parse_columns("0:4")
    )
    assert iris.data.shape == (150, 4) and iris.ncols == 4 and "sepal_length_cm" in iris.describe
    by_name = datainput.load(datainput.parse_source("builtin:iris"), "matrix", ["petal_length_cm"])
    assert by_name.data.shape == (150,) and by_name.ncols is None
    with pytest.raises(ConfigError, match="has no column 'petal'; its columns are"):
        datainput.load(datainput.parse_source("builtin:iris"), "matrix", ["petal"])
    with pytest.raises(DataError, match="found 'Iris-setosa', needs a finite number"):
        datainput.load(datainput.parse_source("builtin:iris"), "matrix")
    counts = tmp_path / "c.csv"
    counts.write_text("n\n1\n2\n2.5\n")
    with pytest.raises(
        DataError, match=r"c.csv line 4, column 1 \(n\): found '2.5', needs a non-negative integer"
    ):
        datainput.load(datainput.parse_source(str(counts)), "integers")
    ragged = tmp_path / "r.csv"
    ragged.write_text("1,2\n3\n")
    with pytest.raises(DataError, match="r.csv line 2 has 1 columns, expected 2 like line 1"):
        datainput.load(datainput.parse_source(str(ragged)), "matrix")
    seqs = datainput.load(datainput.parse_source(str(ragged)), "sequences")
    assert seqs.data == [[1.0, 2.0], [3.0]]


def test_composite_tables_are_typed_by_part(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("x,colour,n\n1.5,red,3\n-2,blue,0\n")
    loaded = datainput.load(datainput.parse_source(str(path)), "table")
    rows = datainput.convert_table(loaded.data, ("gaussian", "categorical", "poisson"), str(path))
    assert rows == [(1.5, "red", 3), (-2.0, "blue", 0)]
    with pytest.raises(DataError, match="has 3 columns but the model has 2 parts"):
        datainput.convert_table(loaded.data, ("gaussian", "categorical"), str(path))


# -- job files ----------------------------------------------------------------------
def test_flags_override_the_job_file(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text(
        '[fit]\ndata = "builtin:iris"\nmodel = "gmm:k=3"\nmax_its = 50\nseed = 4\ndelta = "none"\n'
    )
    cfg = resolve(read_toml(str(job)), {"max_its": "7", "seed": None})
    assert (cfg.data, cfg.model, cfg.max_its, cfg.seed, cfg.delta) == (
        "builtin:iris",
        "gmm:k=3",
        7,
        4,
        None,
    )


@pytest.mark.parametrize(
    "values, needle",
    [
        ({"max_itz": 3}, "unknown option 'max_itz'"),
        ({"max_its": "ten"}, "max_its must be an integer; found 'ten' (in job file)"),
        ({"max_its": 0}, "max_its must be an integer >= 1; found 0"),
        ({"heartbeat_timeout": -1}, "heartbeat_timeout must be a number > 0"),
        ({"init_p": 2}, "init_p must be in (0, 1]"),
        ({"resume": "maybe"}, "resume must be one of ['auto', 'yes', 'no']"),
        ({"resume": "yes", "checkpoint": "none"}, "resume=yes needs a checkpoint"),
        ({"data": ""}, "no data given"),
    ],
)
def test_bad_job_values_say_what_was_needed(values, needle):
    base = {"data": "builtin:iris", "model": "gmm:k=2"}
    with pytest.raises(ConfigError) as err:
        resolve({**base, **values}, {})
    assert needle in str(err.value)


def test_bad_toml_is_reported(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text("data = [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        read_toml(str(job))
    with pytest.raises(ConfigError, match="cannot read the job file"):
        read_toml(str(tmp_path / "none.toml"))


def test_to_argv_reproduces_the_config_exactly():
    from mixle_mpi.cli.commands import build_parser
    from mixle_mpi.cli.jobconfig import from_args

    cfg = resolve(
        None,
        {
            "data": "x.csv",
            "model": "gmm:k=2",
            "delta": "0.1",
            "plot": True,
            "checkpoint": "c.h5",
            "heartbeat_timeout": "0.3",
            "respawn": False,
        },
    )
    args = build_parser().parse_args(["fit", *to_argv(cfg)])
    assert from_args(args) == cfg
    assert isinstance(FitConfig().max_its, int)


def test_negative_poisson_counts_from_hdf5_and_npy_are_refused_naming_the_row(tmp_path):
    """Issue 33: CSV refused them, HDF5 and .npy did not."""
    counts = np.array([3, 0, 7, -2, 5], dtype=np.int64)
    np.save(tmp_path / "c.npy", counts)
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["n"] = counts
        f["ok"] = np.abs(counts).astype(np.uint16)
    for text in (f"{tmp_path}/c.npy", f"{tmp_path}/c.h5:/n"):
        with pytest.raises(
            DataError, match="row 3 is -2; a Poisson mixture needs non-negative integer counts"
        ):
            datainput.load(datainput.parse_source(text), "integers")
    loaded = datainput.load(datainput.parse_source(f"{tmp_path}/c.h5:/ok"), "integers")
    loaded.close()


def test_rows_of_several_values_name_the_multivariate_estimators_never_flattening():
    import numpy as np

    from mixle_mpi.runtime.handle import several_values_hint

    hint = several_values_hint(np.zeros(3))
    assert (
        "DiagonalGaussianEstimator(dim=3)" in hint
        and "MultivariateGaussianEstimator(dim=3)" in hint
    )
    assert "do not flatten" in hint and "numpy.ravel" not in hint
    assert several_values_hint(1.5) == "" and several_values_hint(np.zeros(1)) == ""
