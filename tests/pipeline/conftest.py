"""Shared fixtures of the pipeline tests."""

from __future__ import annotations

import pytest

from ci.tests import dagger_typedefs


@pytest.fixture(scope="session")
def registered(request) -> dict:
    """The Dagger module's functions and arguments as its SDK registers them (no engine),
    computed once per run with ci/tests' fixture of the same name."""
    return dagger_typedefs.registered(request)


@pytest.fixture(scope="session")
def collected_tree(tmp_path_factory):
    """Every test of the tree (one collection, a subprocess): node ID -> marker names.
    Under xdist the workers share one collection through their common temp dir."""
    from tree_collection import collect_once_for_run

    return collect_once_for_run(tmp_path_factory)
