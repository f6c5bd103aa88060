"""A misspelt rankgate option stops the run at once, naming the option meant: pytest only
warned of an unknown ini key and ran on with the default (a 300 s timeout for the 5 s
asked), and named nothing for an unknown command-line option."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.dist

SOURCE = """
def test_plain():
    pass
"""


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        ((), "rankgate_timout = 5", "unknown ini option rankgate_timout in */tox.ini: "
         "did you mean rankgate_timeout?"),
        ((), "rankgate_reruns = 1\nrankgate_quarantin = q.toml",
         "unknown ini option rankgate_quarantin in */tox.ini: did you mean rankgate_quarantine?"),
        (("-o", "rankgate_start_timeot=9"), "",
         "unknown ini option rankgate_start_timeot (-o): did you mean rankgate_start_timeout?"),
        (("-o", "rankgate_zzz=1"), "",
         "unknown ini option rankgate_zzz (-o): rankgate's are rankgate_cold_workers, rankgate_flaky, *"),
        (("--rankgate-timout=5",), "",
         "unknown option --rankgate-timout=5: did you mean --rankgate-timeout?"),
        # pytest's parser matches no prefix: an abbreviation is unknown too, and named
        (("--rankgate-time", "5"), "",
         "unknown option --rankgate-time: did you mean --rankgate-timeout?"),
        (("--rankgate-shrd=1/2",), "", "unknown option --rankgate-shrd=1/2: did you mean --rankgate-shard?"),
    ],
    ids=["ini", "ini_second_key", "override", "override_far", "cli", "cli_prefix", "cli_shard"],
)  # fmt: skip
def test_an_unknown_rankgate_option_is_a_usage_error_naming_the_nearest(inner, args, ini, message):
    result = inner(SOURCE, *args, ini=ini)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}"])
    result.stdout.no_fnmatch_line("*passed*")


def test_the_options_spelt_right_run(inner):
    result = inner(SOURCE, "--rankgate-timeout=5", ini="rankgate_timeout = 5\nrankgate_reruns = 0")
    result.assert_outcomes(passed=1)
