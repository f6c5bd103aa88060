"""Warnings in a world test's body, judged and reported as pytest does for a plain test.

pytest runs each test under the warning filters of its ini ``filterwarnings``, ``-W``
and the test's ``filterwarnings`` marks, and records what the test warned for its
warnings summary. A world test's body runs on the ranks, so the controller's filters
travel with the task (``error`` fails the rank at the line that warned, as it fails a
plain test), and what each rank recorded comes back to be warned again in the
controller, once per distinct warning, where pytest records it.

Standard library only: the rank side runs inside the rank processes.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Iterator


def current_filters() -> tuple[bytes, ...]:
    """The controller's warning filters now (pytest's for this test), each pickled on
    its own: one whose category cannot be pickled is left out, the rest still travel."""
    kept = []
    for entry in warnings.filters:
        blob = _pickled_filter(entry)
        if blob is not None:
            kept.append(blob)
    return tuple(kept)


_PICKLED: dict[tuple, bytes | None] = {}
"""Each filter entry pickled once: the same few (ini, -W, marks) come with every test.
An entry is an immutable tuple (action, message, category, module, line); a category
is keyed by its identity, so a class made anew is pickled anew."""
_MEMO_LIMIT = 4096


def _pickled_filter(entry: tuple) -> bytes | None:
    try:
        return _PICKLED[entry]
    except KeyError:
        pass
    except TypeError:  # an entry that cannot be a key: pickled every time, as it comes
        return _pickle_or_none(entry)
    if len(_PICKLED) >= _MEMO_LIMIT:
        _PICKLED.clear()
    blob = _PICKLED[entry] = _pickle_or_none(entry)
    return blob


def _pickle_or_none(entry: tuple) -> bytes | None:
    try:
        return pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return None


@contextlib.contextmanager
def recording(filters: tuple[bytes, ...]) -> Iterator[list]:
    """On a rank: the test body under the controller's filters; yields the warnings it
    recorded. Without filters (an older controller, a task made by hand) the rank's own
    filters stay."""
    with warnings.catch_warnings(record=True) as log:
        if filters:
            # catch_warnings made a fresh list and reset the "already warned" registries
            warnings.filters[:] = [entry for entry in map(_loaded, filters) if entry is not None]
        yield log


def _loaded(blob: bytes):
    try:
        return pickle.loads(blob)
    except Exception:  # a category its module does not give on this rank
        return None


def records(log: list) -> list[dict]:
    """What a rank sends back of each recorded warning: the warning pickled when it can
    be (custom arguments kept), else its category and text."""
    sent = []
    for message in log:
        try:
            warning = pickle.dumps(message.message, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:
            warning = b""
        sent.append(
            {
                "warning": warning,
                "category": f"{message.category.__module__}.{message.category.__qualname__}",
                "text": str(message.message),
                "filename": message.filename,
                "lineno": message.lineno,
            }
        )
    return sent


def warn_again(per_rank: list[list[dict]]) -> None:
    """In the controller, inside pytest's recording: each distinct warning the ranks
    recorded, once, at the file and line that warned. The ranks already applied the
    filters, so here every one is shown ("always"), never turned into an error twice."""
    if not any(per_rank):
        return  # the usual test: no filters changed, none to restore
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        for record in (r for rank_records in per_rank for r in rank_records):
            key = (record["category"], record["text"], record["filename"], record["lineno"])
            if key in seen:
                continue
            seen.add(key)
            where = record["filename"], record["lineno"]
            warnings.warn_explicit(_warning(record), UserWarning, *where)


def _warning(record: dict) -> Warning:
    """The rank's warning object; a UserWarning naming its category when it cannot be
    rebuilt here."""
    if record["warning"]:
        with contextlib.suppress(Exception):
            warning = pickle.loads(record["warning"])
            if isinstance(warning, Warning):
                return warning
    return UserWarning(f"{record['category']}: {record['text']}")
