"""Whether torch.testing._internal (torch's own distributed test classes) can be imported
here: the planted suites of test_adopt_torchcase.py and test_adopt_own_rendezvous.py
subclass its MultiProcessTestCase, and skip with the reason where it cannot."""

from __future__ import annotations

import pytest

TORCH_TESTING_NEEDS = ("expecttest", "numpy")
"""What torch.testing._internal imports that torch itself does not need."""


def missing_for_torch_testing() -> str | None:
    """Why a planted suite cannot import torch.testing._internal here, or None.

    Checked by importing the modules it needs, not torch.testing._internal itself: that
    import sets global state (default dtype, signal handlers) this process should not get.
    """
    missing = []
    for name in TORCH_TESTING_NEEDS:
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if not missing:
        return None
    return (f"torch.testing._internal needs {' and '.join(missing)}, not installed here "
            f"(pip install {' '.join(missing)})")  # fmt: skip


MISSING = missing_for_torch_testing()
needs_torch_testing = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
