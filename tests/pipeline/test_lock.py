"""The lock and pyproject.toml agree; every way they can disagree is named."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rankgate.pipeline import lock

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The files the lock is made from, and the lock, in a folder of their own."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "requirements", tmp_path / "requirements")
    return tmp_path


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_lock_agrees_with_pyproject():
    assert lock.problems(ROOT) == []


def test_the_lock_pins_every_package_with_hashes_and_leaves_torch_out():
    pins = lock.pins((ROOT / lock.LOCK).read_text())
    names = {p.name for p in pins}
    assert {"pytest", "nox", "deepspeed", "ray", "sympy", "uv"} <= names
    assert not names & {"torch", "nvidia-cuda-nvrtc-cu12"}  # a CUDA torch pins its own
    assert all(p.hashes for p in pins)


def test_a_dependency_added_without_making_the_lock_again_is_named(checkout):
    edit(checkout / "pyproject.toml", '"hypothesis", ', '"hypothesis", "left-pad", ')
    assert lock.problems(checkout) == [
        "pyproject.toml's dependencies or requirements/torch-deps.in changed since "
        "requirements/dev-lock.txt was made: make it again with python -m rankgate.pipeline.lock",
        *(
            f"left-pad is not pinned in requirements/dev-lock.txt for Python {python}"
            for python in lock.PYTHONS
        ),
    ]


def test_a_range_the_pin_is_outside_of_is_named(checkout):
    edit(checkout / "pyproject.toml", '"ruff>=0.6"', '"ruff>=99"')
    found = lock.problems(checkout)
    assert found[0].startswith("pyproject.toml's dependencies or requirements/torch-deps.in")
    assert len(found) == 1 + len(lock.PYTHONS)
    assert found[1].startswith("ruff>=99: requirements/dev-lock.txt has ruff==")
    assert found[1].endswith("for Python 3.10; make it again with python -m rankgate.pipeline.lock")


def test_a_dependency_removed_is_named(checkout):
    edit(checkout / "pyproject.toml", '"hypothesis", ', "")
    assert lock.problems(checkout) == [
        "pyproject.toml's dependencies or requirements/torch-deps.in changed since "
        "requirements/dev-lock.txt was made: make it again with python -m rankgate.pipeline.lock"
    ]


def test_a_comment_in_pyproject_changes_nothing(checkout):
    edit(checkout / "pyproject.toml", "[project.scripts]", "# a note\n[project.scripts]")
    assert lock.problems(checkout) == []


def test_torch_and_a_pin_without_hashes_are_refused(checkout):
    path = checkout / lock.LOCK
    path.write_text(path.read_text() + "torch==2.13.0\n    # via rankgate\n")
    assert lock.problems(checkout) == [
        "requirements/dev-lock.txt pins torch: it is the machine's own, leave it out",
        "requirements/dev-lock.txt: torch==2.13.0 has no hash",
    ]


def test_a_missing_lock_says_how_to_make_it(checkout):
    (checkout / lock.LOCK).unlink()
    assert lock.problems(checkout) == [
        "requirements/dev-lock.txt is missing: make it with python -m rankgate.pipeline.lock"
    ]


def test_pins_read_markers_and_count_hashes():
    text = (
        "numpy==2.2.6 ; python_full_version < '3.11' \\\n"
        "    --hash=sha256:aa \\\n"
        "    --hash=sha256:bb\n"
        "    # via rankgate\n"
        "Foo_Bar==1.0 \\\n"
        "    --hash=sha256:cc\n"
    )
    assert lock.pins(text) == [
        lock.Pin("numpy", "2.2.6", "python_full_version < '3.11'", 2),
        lock.Pin("foo-bar", "1.0", "", 1),
    ]
