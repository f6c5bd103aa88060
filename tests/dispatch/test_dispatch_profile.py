"""Site profiles: TOML in, validated dataclasses out, errors that name the key and the fix."""

from __future__ import annotations

import pytest

from rankgate.dispatch.profile import (
    ProfileError,
    find_profile,
    load_profile,
    profile_from_dict,
    time_limit_minutes,
)

pytestmark = pytest.mark.unit

FULL = """
target = "slurm-ssh"
host = "ci@login.example"
partition = "gpu"
account = "proj42"
qos = "normal"
nodes = 2
tasks_per_node = 4
gpus_per_node = 4
time_limit = "01:30:00"
modules = ["cuda/12.8", "nccl"]
pre_exec = ["source /opt/venv/bin/activate"]
results_dir = "/scratch/ci"
[container]
runtime = "apptainer"
image = "/scratch/rankgate.sif"
mounts = ["/data:/data"]
[env]
NCCL_DEBUG = "WARN"
"""


def test_full_profile_loads(tmp_path):
    path = tmp_path / "juwels.toml"
    path.write_text(FULL)
    profile = load_profile(path)
    assert profile.name == "juwels"
    assert profile.world_size == 8
    assert profile.container.runtime == "apptainer"
    assert profile.env == {"NCCL_DEBUG": "WARN"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"tasks_per_nodes": 2}, r"unknown key\(s\) \['tasks_per_nodes'\]"),
        ({"container": {"runtim": "none"}}, r"\[container\]: unknown key\(s\) \['runtim'\]"),
        ({"nodes": -1}, r"nodes = -1: must be 1 to 1000000"),
        ({"tasks_per_node": 0}, r"tasks_per_node = 0: must be 1 to 1000000"),
        ({"gpus_per_node": -2}, r"gpus_per_node = -2: must be 0 to 1000000"),
        ({"nodes": "2"}, r"nodes = '2' must be int"),
        ({"target": "pbs"}, r"target = 'pbs': use one of"),
        ({"target": "slurm-ssh"}, r"needs host"),
        ({"target": "interlink-rest"}, r"needs \[interlink\] url and token_file"),
        ({"time_limit": "1h"}, r"time_limit = '1h': write minutes"),
        # SLURM reads a zero limit as UNLIMITED and 1:99 as 3 minutes: both refused.
        ({"time_limit": "0"}, r"time_limit = '0': SLURM reads a zero limit as no limit"),
        ({"time_limit": "00:00:00"}, r"time_limit = '00:00:00': SLURM reads a zero limit"),
        ({"time_limit": "0-0"}, r"time_limit = '0-0': SLURM reads a zero limit"),
        ({"time_limit": "1:99"}, r"time_limit = '1:99': 99 seconds is out of range \(0-59\)"),
        ({"time_limit": "1:60:00"}, r"'1:60:00': 60 minutes is out of range \(0-59\)"),
        ({"time_limit": "1-24:00"}, r"'1-24:00': 24 hours is out of range \(0-23\)"),
        # A job folder pytest or sbatch would read differently from what was written.
        (
            {"results_dir": "/scratch/$USER/ci"},
            r"results_dir = '/scratch/\$USER/ci' holds '\$': pytest expands \$NAME in its "
            r"--junitxml path.*write the path out in full",
        ),
        ({"results_dir": "/scratch/a\\b"}, r"holds '\\\\': sbatch reads a backslash"),
        ({"workdir": '/w/a"b'}, r"workdir = '/w/a\"b' holds '\"': an #SBATCH line cannot"),
        ({"container": {"runtime": "enroot"}}, r"needs container.image"),
        ({"container": {"runtime": "docker", "image": "x"}}, r"use one of"),
        ({"env": {"BAD-NAME": "1"}}, r"not valid variable names"),
        ({"interlink": {"run_timeout": 0}}, r"interlink.run_timeout must be > 0"),
        # Nested tables are type-checked too: a string would be splatted per character.
        (
            {"container": {"runtime": "apptainer", "image": "x", "options": "--cleanenv"}},
            r"\[container\]: options = '--cleanenv' must be list\[str\]; "
            r"write a list of strings, one word per item: options = \[",
        ),
        (
            {"container": {"mounts": "/data:/data"}},
            r"\[container\]: mounts = '/data:/data' must be list\[str\]",
        ),
        (
            {"interlink": {"queue_timeout": "10"}},
            r"\[interlink\]: queue_timeout = '10' must be float; "
            r"write a number of seconds, without quotes: queue_timeout = 60",
        ),
        ({"interlink": {"poll_interval": True}}, r"poll_interval = True must be float"),
        ({"interlink": {"node": 3}}, r"\[interlink\]: node = 3 must be str; write a string"),
        ({"container": {"image": ["a.sif"]}}, r"\[container\]: image = \['a.sif'\] must be str"),
    ],
    # The messages are too long for ids that every pytest writes alike (9.2 shortens
    # a value over 100 characters to its argument's name).
    ids=[
        "unknown-key", "container-unknown-key", "nodes-negative", "tasks-per-node-zero",
        "gpus-per-node-negative", "nodes-a-string", "unknown-target", "slurm-ssh-without-host",
        "interlink-rest-without-url", "time-limit-1h", "time-limit-0", "time-limit-00:00:00",
        "time-limit-0-0", "time-limit-1:99", "time-limit-1:60:00", "time-limit-1-24:00",
        "results-dir-dollar", "results-dir-backslash", "workdir-quote", "enroot-without-image",
        "docker-runtime", "env-bad-name", "run-timeout-zero", "container-options-a-string",
        "container-mounts-a-string", "queue-timeout-a-string", "poll-interval-a-bool",
        "node-an-int", "image-a-list",
    ],
)  # fmt: skip
def test_bad_profiles_say_what_is_wrong(data, expected):
    with pytest.raises(ProfileError, match=expected):
        profile_from_dict(data, name="p", where="site.toml")


def test_error_names_the_file(tmp_path):
    path = tmp_path / "site.toml"
    path.write_text("nodes = -3\n")
    with pytest.raises(ProfileError, match=r"site\.toml: nodes = -3"):
        load_profile(path)


def test_gpus_asked_of_a_profile_without_gpus():
    profile = profile_from_dict({}, name="cpu-only")
    with pytest.raises(ProfileError, match=r"stage gpu needs GPUs but profile 'cpu-only'"):
        profile.require_gpus("stage gpu")
    profile_from_dict({"gpus_per_node": 1}, name="g").require_gpus("stage gpu")


@pytest.mark.parametrize(
    ("value", "minutes"),
    [
        ("30", 30),
        ("1:30", 1.5),
        ("1:59", 1 + 59 / 60),
        ("100:00", 100),  # the first field is not bounded: 100 minutes
        ("01:30:00", 90),
        ("2-00:00:00", 2880),
        ("1-2", 1560),
        ("0:30", 0.5),
    ],
)
def test_time_limits(value, minutes):
    assert time_limit_minutes(value) == minutes


def test_find_profile_by_name_and_path(tmp_path):
    (tmp_path / "site.toml").write_text("")
    assert find_profile("site", [tmp_path]) == tmp_path / "site.toml"
    assert find_profile(str(tmp_path / "site.toml"), []) == tmp_path / "site.toml"
    with pytest.raises(ProfileError, match="RANKGATE_PROFILES"):
        find_profile("nowhere", [tmp_path])


def test_invalid_toml_is_a_profile_error(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("nodes = \n")
    with pytest.raises(ProfileError, match="not valid TOML"):
        load_profile(path)


def test_whole_seconds_are_accepted_where_a_float_is_expected():
    profile = profile_from_dict({"interlink": {"queue_timeout": 10}}, name="p")
    assert profile.interlink.queue_timeout == 10


def test_a_workdir_may_hold_a_dollar_it_is_only_read_quoted():
    assert profile_from_dict({"workdir": "/w/$x"}, name="p").workdir == "/w/$x"
