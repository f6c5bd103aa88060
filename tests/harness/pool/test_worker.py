import pytest
import torch.distributed as dist

from rankgate.harness.rankstate import breaks_process_group

pytestmark = pytest.mark.unit

GLOO_TIMEOUT = (
    "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
    "Timed out waiting 2000ms for recv operation to complete"
)


def _raised_from(cause: BaseException) -> BaseException:
    try:
        raise AssertionError("the test's own wrapper") from cause
    except AssertionError as exc:
        return exc


@pytest.mark.parametrize(
    "exc",
    [
        dist.DistBackendError("NCCL communicator was aborted"),
        RuntimeError(GLOO_TIMEOUT),
        RuntimeError("Application timeout caused pair closure"),
        _raised_from(RuntimeError(GLOO_TIMEOUT)),
    ],
    ids=["dist_backend_error", "gloo_timeout", "gloo_pair_closed", "wrapped"],
)
def test_process_group_errors_break_the_group(exc):
    assert breaks_process_group(exc) is True


@pytest.mark.parametrize(
    "exc",
    [AssertionError("assert 1 == 2"), RuntimeError("boom"), ValueError("gloo/transport/")],
    ids=["assertion", "runtime_error", "not_a_runtime_error"],
)
def test_other_errors_keep_the_group(exc):
    assert breaks_process_group(exc) is False
