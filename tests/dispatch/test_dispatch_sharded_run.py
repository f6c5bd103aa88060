"""Sharded dispatch, short of a cluster: the profile's shards, the command's --shards."""

from __future__ import annotations

import pytest

from rankgate.cli import main
from rankgate.dispatch.profile import ProfileError, profile_from_dict
from rankgate.dispatch.sharded_run import shard_stage
from rankgate.pipeline.options import Options

pytestmark = pytest.mark.unit


def test_profile_shards_and_durations():
    profile = profile_from_dict({"shards": 4, "durations": "/scratch/d.json"}, name="p")
    assert (profile.shards, profile.durations) == (4, "/scratch/d.json")
    assert profile_from_dict({}, name="p").shards == 1


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"shards": 0}, "shards = 0: must be 1 to 1000"),
        ({"shards": 1001}, "shards = 1001: must be 1 to 1000"),
        ({"shards": "2"}, "shards = '2' must be int"),
        ({"durations": 'a"b.json'}, "durations = 'a\"b.json' holds '\"'"),
    ],
)
def test_bad_shards_say_what_is_wrong(data, problem):
    with pytest.raises(ProfileError) as caught:
        profile_from_dict(data, name="p")
    assert problem in str(caught.value)


@pytest.mark.parametrize(
    ("shards", "problem"),
    [("0", "--shards: must be an integer >= 1, got 0"), ("x", "'x' is not an integer")],
)  # fmt: skip
def test_dispatch_shards_bad_value_exits_2(tmp_path, capsys, shards, problem):
    profile = tmp_path / "site.toml"
    profile.write_text("")
    with pytest.raises(SystemExit) as stopped:
        main(["dispatch", "--profile", str(profile), "--stage", "hpc", "--shards", shards])
    assert stopped.value.code == 2
    assert problem in capsys.readouterr().err


def test_dispatch_shards_beyond_the_limit_exits_2(tmp_path, capsys):
    profile = tmp_path / "site.toml"
    profile.write_text("")
    code = main(["dispatch", "--profile", str(profile), "--stage", "hpc", "--shards", "5000"])
    assert code == 2
    assert "shards = 5000: must be 1 to 1000" in capsys.readouterr().err


def test_nox_posargs_shards_reach_the_dispatch_command(tmp_path, monkeypatch):
    from rankgate.pipeline import stages
    from rankgate.pipeline.stage_commands import _dispatch_command

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.toml").write_text("")
    options = Options.from_args(["--profile", "p.toml", "--shards", "2", "-x"])
    assert (options.shards, options.pytest_args) == (2, ("-x",))
    argv = _dispatch_command(stages.get("hpc"), options).argv
    assert argv == (
        "rankgate",
        "dispatch",
        "--profile",
        "p.toml",
        "--stage",
        "hpc",
        "--shards",
        "2",
    )
    assert "--shards" not in _dispatch_command(stages.get("hpc"), Options()).argv


@pytest.mark.parametrize("value", ["0", "two", "-1"])
def test_nox_posargs_bad_shards_stop_at_once(value):
    with pytest.raises(SystemExit, match=f"--shards '{value}': give a whole number of jobs"):
        Options.from_args(["--shards", value])


def test_a_shards_job_says_which_shard_it_is():
    assert shard_stage("hpc", 2, 3) == "hpc-shard2of3"


def test_a_durations_file_that_is_not_json_exits_2_before_any_job(tmp_path, capsys):
    durations = tmp_path / "d.json"
    durations.write_text("{not json")
    profile = tmp_path / "site.toml"
    profile.write_text(
        f'shards = 2\ndurations = "{durations}"\nresults_dir = "{tmp_path / "results"}"\n'
    )
    code = main(["dispatch", "--profile", str(profile), "--stage", "hpc", "--", "-k", "x"])
    assert code == 2
    err = capsys.readouterr().err
    assert f"profile durations = '{durations}'" in err and "not JSON" in err
    assert not (tmp_path / "results").exists()  # nothing was submitted
