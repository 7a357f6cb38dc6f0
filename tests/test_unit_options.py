"""The option table (core/options.py) is the one source of every option: Settings, FitConfig,
the job file's checks, the fit and fitjob flags and the docs agree with it."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import pickle
import re

import pytest
import tomllib

from mixle_mpi.cli.commands import build_parser
from mixle_mpi.cli.jobconfig import FitConfig, resolve
from mixle_mpi.core import options
from mixle_mpi.core.errors import ConfigError
from mixle_mpi.core.settings import Settings
from mixle_mpi.fitting import fitjob, models

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _subparser(name: str, full_help: bool = True) -> argparse.ArgumentParser:
    parser = build_parser(full_help=full_help)
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: a for a in parser._actions for flag in a.option_strings}


def test_each_option_once_and_each_variable_once():
    names = [o.name for o in options.OPTIONS]
    assert len(names) == len(set(names))
    variables = [o.env_var for o in options.OPTIONS if o.env_var]
    assert len(variables) == len(set(variables))
    assert all(v.startswith(options.ENV_PREFIX) for v in variables)
    for o in options.OPTIONS:
        assert o.kind in (bool, int, float, str), o.name
        assert o.setting or o.job or o.fitjob or o.env, f"{o.name} is given nowhere"
        assert not (o.setting and o.env), f"{o.name}: a setting's variable is MIXLE_MPI_<NAME>"
        assert o.default is None or isinstance(o.default, o.kind), o.name


def test_settings_are_the_setting_options_in_order_with_their_defaults():
    got = [(f.name, f.type, f.default) for f in dataclasses.fields(Settings)]
    assert got == [(o.name, o.kind, o.default) for o in options.SETTINGS]
    s = Settings()
    assert pickle.loads(pickle.dumps(s)) == s and Settings.__module__ == "mixle_mpi.core.settings"
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.spares = 3


def test_settings_bounds_come_from_the_table():
    for o in options.SETTINGS:
        if o.kind is int:
            with pytest.raises(ConfigError, match=f"{o.name} must be an integer >= {o.at_least}"):
                Settings.resolve({o.name: o.at_least - 1}, environ={})
        if o.kind is float and o.positive:
            with pytest.raises(ConfigError, match=f"{o.name} must be a finite number > 0"):
                Settings.resolve({o.name: 0.0}, environ={})
        elif o.kind is float:  # 0 turns something off; below it is refused
            assert Settings.resolve({o.name: 0.0}, environ={})
            with pytest.raises(ConfigError, match=f"{o.name} must be a finite number >= 0"):
                Settings.resolve({o.name: -1.0}, environ={})


def test_fitconfig_is_the_job_options_and_a_setting_is_left_to_the_handle():
    got = {f.name: (f.type, f.default) for f in dataclasses.fields(FitConfig)}
    assert list(got) == [o.name for o in options.JOB]
    for o in options.JOB:
        assert got[o.name] == (o.job_type, None if o.setting else o.default)
    assert pickle.loads(pickle.dumps(FitConfig())) == FitConfig()


def test_every_job_option_is_in_exactly_one_help_group():
    grouped = [name for names in options.FIT_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(o.name for o in options.JOB)


def test_the_fit_and_chaos_flags_are_the_job_options():
    for command in ("fit", "chaos"):
        flags = _flags(_subparser(command))
        for o in options.JOB:
            action = flags[o.flag]
            assert action.dest == o.name and action.default is None
            if o.kind is bool:
                assert flags["--no-" + o.flag[2:]].dest == o.name
            else:
                assert action.metavar == (o.metavar or o.name.upper())


def test_short_help_shows_only_the_options_with_a_short_text():
    short = _flags(_subparser("fit", full_help=False))
    for o in options.JOB:
        assert (short[o.flag].help != argparse.SUPPRESS) == bool(o.short), o.name
    assert all(o.job for o in options.OPTIONS if o.short)


def test_the_job_file_checks_follow_the_table():
    base = {"data": "builtin:iris", "model": "gmm:k=2"}
    for o in options.JOB:
        if o.at_least is not None:
            with pytest.raises(
                ConfigError, match=re.escape(f"{o.name} must be an integer >= {o.at_least}")
            ):
                resolve({**base, o.name: o.at_least - 1}, {})
        if o.positive:
            with pytest.raises(ConfigError, match=re.escape(f"{o.name} must be a number > 0")):
                resolve({**base, o.name: 0}, {})
        if o.choices:
            with pytest.raises(
                ConfigError, match=re.escape(f"{o.name} must be one of {list(o.choices)}")
            ):
                resolve({**base, o.name: "nonsense"}, {})


def test_the_example_job_file_uses_only_job_options():
    doc = tomllib.loads((ROOT / "jobs" / "job.toml").read_text())
    assert set(doc["fit"]) <= {o.name for o in options.JOB}


def test_the_fitjob_flags_are_the_fitjob_options_with_their_defaults():
    parser = fitjob.build_parser()
    flags = _flags(parser)
    assert set(flags) - {"-h", "--help"} == {o.flag for o in options.FITJOB}
    args = vars(parser.parse_args([]))
    assert args == {o.name: o.fitjob.default for o in options.FITJOB}
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-its", "ten"])  # argparse's usage error, as before


def test_the_fitjob_model_help_names_every_built_in_model():
    text = options.BY_NAME["model"].fitjob.help
    assert re.findall(r"\b(gmm1d|diag|full|poisson|hmm|composite)\b", text) == list(models.MODELS)


def test_the_flags_of_other_commands_named_by_options_exist():
    for o in options.OPTIONS:
        for entry in o.flags:
            command, flag = entry.split(" ")
            assert flag in _flags(_subparser(command)), f"{o.name}: {entry}"


def test_the_user_guide_settings_table_names_every_setting():
    guide = (ROOT / "docs" / "user-guide.md").read_text()
    section = guide.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([a-z_]+)` \|", section, re.M)
    assert sorted(listed) == sorted(o.name for o in options.SETTINGS)


def test_env_var_names_a_typo_at_once():
    assert options.env_var("failover") == "MIXLE_MPI_FAILOVER"
    assert options.env_var("log_level") == "MIXLE_MPI_LOG_LEVEL"
    with pytest.raises(KeyError):
        options.env_var("fail_over")
