"""JsonlDataset: samples are read and checked; each bad file names the file, line and fix."""

from __future__ import annotations

import json

import pytest

from rankgate.workloads.data import DatasetError, JsonlDataset, Sample

pytestmark = pytest.mark.unit


def _write(tmp_path, content: bytes | str):
    path = tmp_path / "data.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return path


def test_reads_samples_and_defaults_labels_to_the_tokens(tmp_path):
    lines = [
        json.dumps({"input_ids": [1, 2, 3]}),
        "",  # blank lines are skipped
        json.dumps({"input_ids": [4, 5], "labels": [-100, 5], "source": "extra keys are ignored"}),
    ]
    data = JsonlDataset(_write(tmp_path, "\n".join(lines) + "\n"))
    assert len(data) == 2
    assert data[0] == Sample((1, 2, 3), (1, 2, 3))
    assert data[1] == Sample((4, 5), (-100, 5))
    assert data.lengths() == [3, 2]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"input_ids": [1, 2', "not valid JSON (Expecting ',' delimiter at column 20)"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('{"tokens": [1]}', "no \"input_ids\" key (keys: ['tokens'])"),
        ('{"input_ids": []}', '"input_ids" is empty; drop empty samples'),
        ('{"input_ids": [1, "2"]}', '"input_ids" must be a list of integers'),
        ('{"input_ids": [1, true]}', '"input_ids" must be a list of integers'),
        ('{"input_ids": [1, 2], "labels": [1]}', '"labels" has 1 entries, "input_ids" 2'),
    ],
)
def test_a_malformed_line_names_the_file_and_line(tmp_path, line, problem):
    path = _write(tmp_path, '{"input_ids": [1]}\n\n' + line + '\n{"input_ids": [2]}\n')
    with pytest.raises(DatasetError) as caught:
        JsonlDataset(path)
    assert str(caught.value).startswith(f"{path}:3: {problem}")
    assert (caught.value.path, caught.value.line) == (path, 3)


@pytest.mark.parametrize("content", ["", "\n  \n\n"])
def test_an_empty_file_is_an_error(tmp_path, content):
    path = _write(tmp_path, content)
    with pytest.raises(DatasetError, match="has no samples"):
        JsonlDataset(path)


def test_invalid_utf8_names_the_line_and_byte(tmp_path):
    path = _write(tmp_path, b'{"input_ids": [1]}\n{"input_ids": [2], "text": "caf\xe9"}\n')
    with pytest.raises(DatasetError) as caught:
        JsonlDataset(path)
    assert str(caught.value) == (
        f"{path}:2: not valid UTF-8 (byte 0xe9 at offset 31 of the line); write the file as UTF-8"
    )


def test_a_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(DatasetError, match=r"missing\.jsonl: cannot be read: No such file"):
        JsonlDataset(tmp_path / "missing.jsonl")
