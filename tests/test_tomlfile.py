"""The one reader of users' TOML files: each way a file can be wrong, named with its path."""

from __future__ import annotations

import pytest

from rankgate import tomlfile

pytestmark = pytest.mark.unit


def test_a_good_file_is_its_table(tmp_path):
    (tmp_path / "ok.toml").write_text('nodes = 2\n[slurm]\npartition = "gpu"\n')
    assert tomlfile.read(tmp_path / "ok.toml") == {"nodes": 2, "slurm": {"partition": "gpu"}}


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.mkdir(), "a folder, not a TOML file"),
        (lambda p: p.write_bytes(b"name = 'caf\xe9'\n"),
         "not UTF-8 text (byte 0xe9 at offset 11); save it as UTF-8"),
        (lambda p: p.write_text("nodes = \n"), "not valid TOML: "),
    ],
    ids=["missing", "folder", "latin1", "broken"],
)  # fmt: skip
def test_each_bad_file_is_named_with_what_is_wrong(tmp_path, make, says):
    path = tmp_path / "site.toml"
    make(path)
    with pytest.raises(tomlfile.TomlFileError) as info:
        tomlfile.read(path)
    assert str(info.value).startswith(f"{path}: {says}"), str(info.value)
