"""A dataset of tokenised samples, one JSON object a line.

Each line is ``{"input_ids": [int, ...], "labels": [int, ...]}``; ``labels`` is
optional (default: every token is a target) and uses the Hugging Face convention:
``labels[i]`` is the token at position ``i`` (the collator shifts it), ``-100`` means
"not a target". Blank lines are skipped. Every problem is a :class:`DatasetError`
naming the file and line, raised while the file is read, so a bad file fails before
training starts rather than mid-run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rankgate.errors import RankgateError

IGNORE_INDEX = -100


class DatasetError(RankgateError, ValueError):
    """A JSONL file that cannot be used; the message names the file, line and fix."""

    def __init__(self, path: Path, line: int | None, problem: str) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True)
class Sample:
    """One tokenised sequence."""

    input_ids: tuple[int, ...]
    """Token ids."""
    labels: tuple[int, ...]
    """Same length as ``input_ids``; ``labels[i]`` is position i's token or IGNORE_INDEX."""

    def __len__(self) -> int:
        return len(self.input_ids)


def _int_list(value, key: str, path: Path, line: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise DatasetError(path, line, f'"{key}" must be a list of integers')
    return tuple(value)


def parse_sample(text: str, path: Path, line: int) -> Sample:
    """One line's sample; ``path`` and ``line`` only name the place in errors."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(
            path, line, f"not valid JSON ({exc.msg} at column {exc.colno}); each line must be "
            'one JSON object such as {"input_ids": [1, 2, 3]}'
        ) from None  # fmt: skip
    if not isinstance(record, dict):
        raise DatasetError(path, line, f"expected a JSON object, got {type(record).__name__}")
    if "input_ids" not in record:
        raise DatasetError(path, line, f'no "input_ids" key (keys: {sorted(record)})')
    input_ids = _int_list(record["input_ids"], "input_ids", path, line)
    if not input_ids:
        raise DatasetError(path, line, '"input_ids" is empty; drop empty samples')
    if "labels" in record:
        labels = _int_list(record["labels"], "labels", path, line)
        if len(labels) != len(input_ids):
            raise DatasetError(
                path,
                line,
                f'"labels" has {len(labels)} entries, "input_ids" {len(input_ids)}; '
                "they must have the same length",
            )
    else:
        labels = input_ids
    return Sample(input_ids, labels)


class JsonlDataset:
    """All samples of one JSONL file, read and checked when it is opened."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.samples: list[Sample] = []
        try:
            raw = self.path.read_bytes()
        except OSError as exc:
            raise DatasetError(self.path, None, f"cannot be read: {exc.strerror}") from None
        for number, line in enumerate(raw.splitlines(), start=1):
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    self.path,
                    number,
                    f"not valid UTF-8 (byte {line[exc.start]:#04x} at offset {exc.start} of "
                    "the line); write the file as UTF-8",
                ) from None
            if text.strip():
                self.samples.append(parse_sample(text, self.path, number))
        if not self.samples:
            raise DatasetError(
                self.path, None, "has no samples (the file is empty or has only blank lines)"
            )

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Sample:
        return self.samples[index]

    def lengths(self) -> list[int]:
        return [len(s) for s in self.samples]
