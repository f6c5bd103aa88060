"""Fixtures of the dispatch tests: a real local HTTP server standing in for interLink.

The fake needs openapi_schema_validator and the kubeconfig fixture serves the
kubernetes client (both in the [dev] extra): tests using them skip without them, so
collection works everywhere.
"""

from __future__ import annotations

import sys

import pytest

TOKEN = "rg-test-token-5f0c1e9d7a"


@pytest.fixture
def interlink(tmp_path):
    """A running fake interLink API; its token is in ``fake.token_file``."""
    pytest.importorskip("openapi_schema_validator", reason="needs the [dev] extra")
    from fake_interlink import FakeInterlink

    fake = FakeInterlink(token=TOKEN, workdir=tmp_path)
    fake.url = fake.start()
    fake.token_file = tmp_path / "token"
    fake.token_file.write_text(TOKEN + "\n")
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def interlink_profile(interlink, tmp_path):
    """Profile data for the fake: the local Python stands in for the image's."""
    (tmp_path / "suite").mkdir()
    return {
        "target": "interlink-rest",
        "tasks_per_node": 2,
        "time_limit": "00:10:00",
        "partition": "gpu",
        "workdir": str(tmp_path / "suite"),
        "python": sys.executable,
        "container": {"runtime": "singularity", "image": "/images/rankgate.sif"},
        "interlink": {
            "url": interlink.url,
            "token_file": str(interlink.token_file),
            "node": "vega-new-vk",
            "poll_interval": 0.2,
        },
    }


@pytest.fixture
def kubeconfig(interlink, tmp_path):
    """A kubeconfig pointing the official client at the fake's Kubernetes endpoints."""
    pytest.importorskip("kubernetes", reason="the interlink-kube target needs the [dev] extra")
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: fake\n  cluster:\n    server: {interlink.url}\n"
        f"users:\n- name: ci\n  user:\n    token: {TOKEN}\n"
        "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: ci\n"
        "current-context: fake\n"
    )
    return path
