"""Reading a TOML file a user wrote (a dispatch profile, a quarantine list): one error
that names the file and what is wrong with it, whatever went wrong."""

from __future__ import annotations

from pathlib import Path

from rankgate.errors import RankgateError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: a dependency there (pyproject.toml)
    import tomli as tomllib  # type: ignore[no-redef]


class TomlFileError(RankgateError, ValueError):
    """The file cannot be read as TOML; the message starts with its path."""


def read(path: Path) -> dict:
    """The table in TOML file ``path``."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TomlFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TomlFileError(f"{path}: a folder, not a TOML file") from None
    except UnicodeDecodeError as exc:
        raise TomlFileError(
            f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from None
    except OSError as exc:
        raise TomlFileError(f"{path}: cannot read it ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(f"{path}: not valid TOML: {exc}") from None
