"""The adoption lines of ``rankgate_spawn_helpers`` and ``rankgate_world_classes``.

One line per helper or class: the target ``module:name`` and ``key=value`` words::

    pkg.testing:run_distributed_test args=func_args kwargs=func_kwargs env=NUM_NODES=1
    unit.common:DistributedTest marker=world_size setup=pkg:init setup_timeout=900

A bad line is a usage error naming the line and the word.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rankgate.errors import RankgateError

DEFAULT_SETUP_TIMEOUT_S = 900.0
"""How long an adopted ``setup=`` may take the first time on a rank (a C++ op build)."""

ENV_FIELDS = ("rank", "local_rank", "world_size", "local_world_size", "master_addr", "master_port")
"""What ``env=NAME={field}`` may put in a variable."""


class AdoptConfigError(RankgateError, ValueError):
    """An adoption line that cannot be used."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnHelper:
    """A function the tests call to start their ranks: ``helper(func, world, backend, ...)``."""

    target: str
    """``module:function`` of the helper."""
    func: str | None = None
    """Its parameter holding the body to run on every rank (default: the first)."""
    world: str = "world_size"
    """Its parameter holding the number of ranks, or a number when it has none."""
    backend: str | None = "backend"
    """Its parameter holding the backend (None: the helper has none; gloo)."""
    args: str | None = None
    """Its parameter holding the body's positional arguments (a tuple or ``*args``)."""
    kwargs: str | None = None
    """Its parameter holding the body's keyword arguments (a dict or ``**kwargs``)."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the project's code reads, set on each rank: NAME -> template."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorldClass:
    """A base class whose test methods run on several ranks."""

    target: str
    """``module:Class`` of the base class."""
    world: str = "world_size"
    """The class attribute holding the number of ranks."""
    marker: str | None = None
    """The project's own marker that overrides it on one test (its first argument)."""
    backend: str | None = None
    """The class attribute holding the backend (gloo, nccl; anything else: auto)."""
    launcher: str | None = None
    """The class attribute that makes the project's own hooks launch the test; rankgate
    sets it false while it runs the test itself."""
    launches: tuple[tuple[str, str], ...] = ()
    """(attribute, value) pairs: a class with any of them starts its own ranks; it keeps
    the project's launcher and gets ``launches`` (skipped in place)."""
    own_group: tuple[tuple[str, str], ...] = ()
    """(attribute, value) pairs: a class with any of them makes its own process group
    (it tests the project's init code); it runs on rankgate's ranks with rankgate's
    group hidden, without ``setup``, and its init_process_group gets a fresh group."""
    setup: str | None = None
    """``module:function`` each rank calls before the test (the project's init code)."""
    teardown: str | None = None
    """``module:function`` each rank calls after the test: the project's reset of what
    it keeps from the test (its cached process groups, which rankgate ends after every
    test; in its own way every test is a new process)."""
    setup_timeout: float = DEFAULT_SETUP_TIMEOUT_S
    """Seconds ``setup`` may take the first time on a rank (it may build C++ ops), apart
    from every test's own timeout."""
    env: dict[str, str] = field(default_factory=dict)


def parse_spawn_helper(line: str) -> SpawnHelper:
    target, words = _split(line)
    known = {"func", "world", "backend", "args", "kwargs", "env"}
    values = _words(line, words, known)
    env = _env(line, values.pop("env", ""))
    if "backend" in values and values["backend"].lower() == "none":
        values["backend"] = None
    return SpawnHelper(target=target, env=env, **values)


def parse_world_class(line: str) -> WorldClass:
    target, words = _split(line)
    known = {"world", "marker", "backend", "launcher", "launches", "own_group", "setup", "teardown"}
    known |= {"setup_timeout", "env"}
    values = _words(line, words, known)
    env = _env(line, values.pop("env", ""))
    if "setup_timeout" in values:
        values["setup_timeout"] = _seconds(line, values["setup_timeout"])
    launches = _pairs(line, "launches", values.pop("launches", ""))
    own_group = _pairs(line, "own_group", values.pop("own_group", ""))
    for word in ("setup", "teardown"):
        if word in values:
            _check_target(line, values[word])
    return WorldClass(target=target, env=env, launches=launches, own_group=own_group, **values)


def _pairs(line: str, word: str, text: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for pair in filter(None, text.split(",")):
        attr, sep, value = pair.partition(":")
        if not sep or not attr:
            raise AdoptConfigError(f"{line!r}: {word}={pair!r} is not attribute:value")
        pairs.append((attr, value))
    return tuple(pairs)


def _split(line: str) -> tuple[str, list[str]]:
    words = line.split()
    if not words:
        raise AdoptConfigError("an empty adoption line")
    _check_target(line, words[0])
    return words[0], words[1:]


def _check_target(line: str, target: str) -> None:
    module, sep, name = target.partition(":")
    if not (module and sep and name):
        raise AdoptConfigError(f"{line!r}: {target!r} is not module:name")


def _words(line: str, words: list[str], known: set[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or key not in known:
            raise AdoptConfigError(
                f"{line!r}: unknown word {word!r}; valid: "
                + ", ".join(f"{k}=..." for k in sorted(known))
            )
        values[key] = value
    return values


def _env(line: str, text: str) -> dict[str, str]:
    env = {}
    for pair in filter(None, text.split(",")):
        name, sep, template = pair.partition("=")
        if not sep or not name:
            raise AdoptConfigError(f"{line!r}: env={pair!r} is not NAME=value")
        try:
            template.format(**dict.fromkeys(ENV_FIELDS, ""))
        except (KeyError, IndexError, ValueError) as exc:
            raise AdoptConfigError(
                f"{line!r}: env {name}={template!r} uses {exc}; valid fields: "
                + ", ".join("{" + f + "}" for f in ENV_FIELDS)
            ) from None
        env[name] = template
    return env


def _seconds(line: str, text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise AdoptConfigError(f"{line!r}: setup_timeout={text!r} is not a number of seconds > 0")
    return seconds
