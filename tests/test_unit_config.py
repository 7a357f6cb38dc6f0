"""Settings.resolve: argument > MIXLE_MPI_* environment > default, strictly validated."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.settings import ENV_PREFIX, Settings

DEFAULTS = {f.name: f.default for f in dataclasses.fields(Settings)}
NAMES = list(DEFAULTS)


def test_defaults_without_anything():
    s = Settings.resolve(None, environ={})
    assert dataclasses.asdict(s) == DEFAULTS
    assert s == Settings()
    assert s.heartbeat_timeout >= 2 * s.heartbeat_period


def test_default_environ_is_os_environ(monkeypatch):
    monkeypatch.setenv("MIXLE_MPI_DRIVER_TIMEOUT", "12.5")
    assert Settings.resolve().driver_timeout == 12.5


def test_env_overrides_default():
    env = {
        "MIXLE_MPI_HEARTBEAT_PERIOD": "0.25",
        "MIXLE_MPI_HEARTBEAT_TIMEOUT": "3",
        "MIXLE_MPI_DRIVER_TIMEOUT": "1e2",
        "MIXLE_MPI_RECONFIGURE_TIMEOUT": " 30 ",
        "MIXLE_MPI_BLAS_THREADS": "4",
        "MIXLE_MPI_RESPAWN": "off",
    }
    s = Settings.resolve({}, environ=env)
    assert s == Settings(
        heartbeat_period=0.25,
        heartbeat_timeout=3.0,
        driver_timeout=100.0,
        reconfigure_timeout=30.0,
        blas_threads=4,
        respawn=False,
    )
    assert type(s.heartbeat_timeout) is float and type(s.blas_threads) is int


def test_argument_overrides_env():
    env = {
        "MIXLE_MPI_HEARTBEAT_TIMEOUT": "3",
        "MIXLE_MPI_BLAS_THREADS": "4",
        "MIXLE_MPI_RESPAWN": "0",
    }
    s = Settings.resolve({"heartbeat_timeout": 5, "blas_threads": 2, "respawn": True}, environ=env)
    assert s.heartbeat_timeout == 5.0 and type(s.heartbeat_timeout) is float
    assert s.blas_threads == 2
    assert s.respawn is True


def test_none_argument_falls_through_to_env_then_default():
    env = {"MIXLE_MPI_DRIVER_TIMEOUT": "7"}
    s = Settings.resolve({"driver_timeout": None, "reconfigure_timeout": None}, environ=env)
    assert s.driver_timeout == 7.0
    assert s.reconfigure_timeout == DEFAULTS["reconfigure_timeout"]


def test_empty_env_value_means_unset():
    s = Settings.resolve({}, environ={"MIXLE_MPI_BLAS_THREADS": "", "MIXLE_MPI_RESPAWN": ""})
    assert s.blas_threads == 1 and s.respawn is True


def test_unrelated_env_ignored():
    s = Settings.resolve(
        {},
        environ={"HEARTBEAT_PERIOD": "5", "MIXLE_MPI_UNKNOWN": "x", "mixle_mpi_blas_threads": "9"},
    )
    assert s == Settings()


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        (" On ", True),
        ("0", False),
        ("False", False),
        ("no", False),
        ("OFF", False),
    ],
)
def test_env_booleans(raw, expected):
    assert Settings.resolve({}, environ={"MIXLE_MPI_RESPAWN": raw}).respawn is expected


@pytest.mark.parametrize(
    "name,raw",
    [
        ("respawn", "maybe"),
        ("respawn", "2"),
        ("blas_threads", "two"),
        ("blas_threads", "2.0"),
        ("heartbeat_period", "fast"),
        ("heartbeat_timeout", "1s"),
        ("driver_timeout", "sixty"),
        ("reconfigure_timeout", "1,5"),
    ],
)
def test_unparsable_env_quotes_variable_and_value(name, raw):
    var = ENV_PREFIX + name.upper()
    with pytest.raises(ConfigError) as exc:
        Settings.resolve({}, environ={var: raw})
    msg = str(exc.value)
    assert var in msg and repr(raw) in msg, msg


def test_unparsable_env_names_expected_kind():
    with pytest.raises(ConfigError, match="int"):
        Settings.resolve({}, environ={"MIXLE_MPI_BLAS_THREADS": "x"})
    with pytest.raises(ConfigError, match="float"):
        Settings.resolve({}, environ={"MIXLE_MPI_DRIVER_TIMEOUT": "x"})
    with pytest.raises(ConfigError, match=r"1/0/true/false"):
        Settings.resolve({}, environ={"MIXLE_MPI_RESPAWN": "x"})


def test_unparsable_env_ignored_when_argument_given():
    s = Settings.resolve({"blas_threads": 3}, environ={"MIXLE_MPI_BLAS_THREADS": "garbage"})
    assert s.blas_threads == 3


@pytest.mark.parametrize("raw", ["-1", "0", "nan", "inf", "-inf"])
def test_out_of_range_env_floats_rejected(raw):
    with pytest.raises(ConfigError, match="driver_timeout must be a finite number > 0"):
        Settings.resolve({}, environ={"MIXLE_MPI_DRIVER_TIMEOUT": raw})


def test_out_of_range_env_error_names_the_variable():
    with pytest.raises(ConfigError) as exc:
        Settings.resolve({}, environ={"MIXLE_MPI_DRIVER_TIMEOUT": "-1"})
    assert "MIXLE_MPI_DRIVER_TIMEOUT" in str(exc.value)


FLOAT_FIELDS = ["heartbeat_period", "heartbeat_timeout", "driver_timeout", "reconfigure_timeout"]


@pytest.mark.parametrize("name", FLOAT_FIELDS)
@pytest.mark.parametrize(
    "value", [0, 0.0, -1.0, -0.5, math.nan, math.inf, -math.inf, True, False, "1.0", [1.0]]
)
def test_invalid_float_arguments(name, value):
    with pytest.raises(ConfigError) as exc:
        overrides = {name: value}
        if name == "heartbeat_period":
            overrides["heartbeat_timeout"] = 1e9  # only the period itself should be at fault
        Settings.resolve(overrides, environ={})
    assert f"{name} must be a finite number > 0" in str(exc.value)
    assert repr(value) in str(exc.value)


@pytest.mark.parametrize("value", [0, -1, True, False, 1.0, 2.5, "2", np.float64(2.0)])
def test_invalid_blas_threads(value):
    with pytest.raises(ConfigError, match=r"blas_threads must be an integer >= 1"):
        Settings.resolve({"blas_threads": value}, environ={})


def test_numpy_numbers_accepted():
    s = Settings.resolve(
        {"blas_threads": np.int64(3), "driver_timeout": np.float32(2.5)}, environ={}
    )
    assert s.blas_threads == 3
    assert s.driver_timeout == 2.5 and type(s.driver_timeout) is float


def test_blas_threads_normalized_to_int():
    s = Settings.resolve({"blas_threads": np.int64(3)}, environ={})
    assert type(s.blas_threads) is int


def test_int_for_float_accepted_and_converted():
    s = Settings.resolve({"reconfigure_timeout": 5}, environ={})
    assert s.reconfigure_timeout == 5.0 and type(s.reconfigure_timeout) is float


def test_heartbeat_timeout_at_least_twice_period():
    s = Settings.resolve(
        {"heartbeat_period": 0.5, "heartbeat_timeout": 1.0}, environ={}
    )  # exactly 2x is fine
    assert (s.heartbeat_period, s.heartbeat_timeout) == (0.5, 1.0)
    with pytest.raises(ConfigError) as exc:
        Settings.resolve({"heartbeat_period": 0.5, "heartbeat_timeout": 0.75}, environ={})
    msg = str(exc.value)
    assert "heartbeat_timeout must be at least 2 x heartbeat_period" in msg
    assert "timeout=0.75s" in msg and "period=0.5s" in msg


def test_heartbeat_ratio_checked_across_sources():
    # period from the environment, timeout left at its default of 1.0
    with pytest.raises(ConfigError, match="at least 2 x heartbeat_period"):
        Settings.resolve({}, environ={"MIXLE_MPI_HEARTBEAT_PERIOD": "0.6"})
    # the argument rescues it
    s = Settings.resolve({"heartbeat_timeout": 1.2}, environ={"MIXLE_MPI_HEARTBEAT_PERIOD": "0.6"})
    assert s.heartbeat_timeout == 1.2


def test_unknown_override_names_listed():
    with pytest.raises(ConfigError) as exc:
        Settings.resolve({"heartbeat": 1.0, "zeta": 2, "blas_threads": 2}, environ={})
    msg = str(exc.value)
    assert "['heartbeat', 'zeta']" in msg  # the unknown names, sorted
    for name in NAMES:
        assert repr(name) in msg  # and every valid name


def test_unknown_override_none_is_ignored():
    # None means "not given", so even an unknown name with None is dropped silently
    assert Settings.resolve({"nonsense": None}, environ={}) == Settings()


def test_config_error_is_value_error():
    with pytest.raises(ValueError):
        Settings.resolve({"blas_threads": 0}, environ={})


def test_settings_frozen():
    s = Settings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.blas_threads = 2  # type: ignore[misc]


@pytest.mark.parametrize("value", ["false", "no", 0.0, 2])
def test_respawn_must_be_bool(value):
    with pytest.raises(ConfigError):
        Settings.resolve({"respawn": value}, environ={})


def test_heartbeat_fanin_is_off_or_at_least_two():
    assert Settings().heartbeat_fanin == 16
    assert Settings.resolve({}, environ={"MIXLE_MPI_HEARTBEAT_FANIN": "0"}).heartbeat_fanin == 0
    with pytest.raises(ConfigError, match="heartbeat_fanin must be 0 .* or at least 2; found 1"):
        Settings(heartbeat_fanin=1)
    with pytest.raises(ConfigError, match="heartbeat_fanin must be an integer >= 0; found -3"):
        Settings(heartbeat_fanin=-3)
