import pytest

from rankgate.harness.spec import WorldMarkerError, WorldSpec, parse_world_marker, resolve_backend

pytestmark = pytest.mark.unit


def test_defaults():
    assert parse_world_marker((2,), {}) == WorldSpec(size=2, backend="auto", timeout=None)


def test_keywords():
    spec = parse_world_marker((), {"n": 4, "backend": "gloo", "timeout": 5})
    assert spec == WorldSpec(size=4, backend="gloo", timeout=5.0)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((True,), {}, "world size must be an integer, got True"),
        ((2, 3), {}, "world() takes one positional argument (n), got 2"),
        ((2,), {"n": 2}, "world() got n both positionally and as a keyword"),
        ((2,), {"timeout": True}, "timeout must be a number of seconds, got True"),
        ((2,), {"timeout": float("nan")}, "timeout must be > 0 seconds, got nan"),
    ],
)
def test_rejects(args, kwargs, message):
    with pytest.raises(WorldMarkerError) as info:
        parse_world_marker(args, kwargs)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("requested", "size", "gpus", "expected"),
    [
        ("auto", 2, 2, "cpu:gloo,cuda:nccl"),
        ("auto", 4, 8, "cpu:gloo,cuda:nccl"),
        ("auto", 2, 1, "gloo"),
        ("auto", 1, 0, "gloo"),
        ("nccl", 2, 0, "nccl"),
        ("gloo", 2, 8, "gloo"),
    ],
)
def test_resolve_backend(requested, size, gpus, expected):
    assert resolve_backend(requested, size, gpus) == expected
