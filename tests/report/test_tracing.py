"""Traces: with OTEL_EXPORTER_OTLP_ENDPOINT set, a span per stage, test and rank reaches a
real OTLP/HTTP receiver that the test starts on localhost (an ephemeral port) and that
decodes what arrives with opentelemetry-proto."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rankgate.pipeline import executor
from rankgate.pipeline.executor import Options
from rankgate.pipeline.stages import Command, Stage

pytestmark = [pytest.mark.dist, pytest.mark.slow]  # the traced run starts real ranks

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the trace extra: pip install -e '.[dev]'",
)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="pip install -e '.[dev]'")

SUITE = textwrap.dedent(
    """
    import pytest

    @pytest.mark.world(2)
    def test_rank1_fails(rank):
        assert rank == 0

    @pytest.mark.world(2)
    def test_both_pass(rank):
        pass

    def test_single():
        pass
    """
)


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP trace receiver: every span of every request, decoded."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.spans: list[dict] = []
        self.paths: list[str] = []
        self.lock = threading.Lock()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = trace_service.ExportTraceServiceRequest.FromString(body)
        spans = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    spans.append({
                        "name": s.name, "trace": s.trace_id.hex(), "id": s.span_id.hex(),
                        "parent": s.parent_span_id.hex(), "status": s.status.code,
                        "attributes": {a.key: _value(a.value) for a in s.attributes},
                        "service": resource.get("service.name"),
                    })  # fmt: skip
        with self.server.lock:
            self.server.paths.append(self.path)
            self.server.spans.extend(spans)
        reply = trace_service.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:  # quiet
        pass


def _value(v):
    return getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None


@pytest.fixture
def receiver():
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def plugin_args() -> list[str]:
    """-p for the tracing plugin unless its entry point is installed (then it loads itself)."""
    names = {ep.name for ep in importlib.metadata.entry_points(group="pytest11")}
    return [] if "rankgate-tracing" in names else ["-p", "rankgate.report.tracing_plugin"]


def traced_stage(work: Path) -> Stage:
    (work / "test_traced.py").write_text(SUITE)
    (work / "pytest.ini").write_text("[pytest]\n")
    pytest_cmd = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(),
                  str(work / "test_traced.py"))  # fmt: skip
    return Stage(
        name="traced", description="a traced stage", where=("local",), paths=("**",),
        commands=(Command(argv=pytest_cmd, label="pytest"),), dagger="x", workflow="a:b",
    )  # fmt: skip


def by_name(spans: list[dict]) -> dict[str, dict]:
    return {s["name"]: s for s in spans}


def test_a_stage_its_tests_and_their_ranks_arrive_as_one_trace(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    for name in ("TRACEPARENT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
                 "OTEL_EXPORTER_OTLP_PROTOCOL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    from rankgate.report import tracing

    tracing.shutdown()  # a fresh provider for this endpoint
    try:
        outcome = executor.run_stage(traced_stage(tmp_path), Options(out_dir=tmp_path / "out"))
    finally:
        tracing.shutdown()
    assert outcome.status == "failed"  # test_rank1_fails
    assert set(receiver.paths) == {"/v1/traces"}
    spans = by_name(receiver.spans)
    stage = spans["stage traced"]
    assert stage["status"] == 2 and stage["attributes"]["rankgate.outcome"] == "failed"
    (session,) = [s for s in receiver.spans if s["attributes"].get("rankgate.kind") == "session"]
    assert session["parent"] == stage["id"] and session["trace"] == stage["trace"]

    tests = {s["name"]: s for s in receiver.spans if s["attributes"].get("rankgate.kind") == "test"}
    assert set(tests) == {
        "test_traced.py::test_rank1_fails", "test_traced.py::test_both_pass",
        "test_traced.py::test_single",
    }  # fmt: skip
    failing = tests["test_traced.py::test_rank1_fails"]
    assert failing["parent"] == session["id"] and failing["status"] == 2
    assert failing["attributes"]["rankgate.failing_ranks"] == "1"
    assert failing["attributes"]["rankgate.world"] == 2
    assert tests["test_traced.py::test_single"]["status"] == 1  # OK

    ranks = [s for s in receiver.spans if s["attributes"].get("rankgate.kind") == "rank"]
    seen = sorted(
        (next(n for n, t in tests.items() if t["id"] == r["parent"]),
         r["attributes"]["rankgate.rank"], r["attributes"]["rankgate.outcome"], r["status"])
        for r in ranks
    )  # fmt: skip
    assert seen == [
        ("test_traced.py::test_both_pass", 0, "passed", 1),
        ("test_traced.py::test_both_pass", 1, "passed", 1),
        ("test_traced.py::test_rank1_fails", 0, "passed", 1),
        ("test_traced.py::test_rank1_fails", 1, "failed", 2),
    ]
    assert {s["trace"] for s in receiver.spans} == {stage["trace"]}
    assert {s["service"] for s in receiver.spans} == {"rankgate"}


def test_a_traceparent_from_outside_is_the_parent_as_dagger_sets_it(receiver, tmp_path):
    (tmp_path / "test_traced.py").write_text("def test_one():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    env = {**os.environ, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
           "TRACEPARENT": f"00-{trace_id}-{parent_id}-01"}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *plugin_args(), "test_traced.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    kinds = {s["attributes"]["rankgate.kind"]: s for s in receiver.spans}
    session, test = kinds["session"], kinds["test"]
    assert (session["trace"], session["parent"]) == (trace_id, parent_id)
    assert test["name"] == "test_traced.py::test_one" and test["parent"] == session["id"]


def test_without_an_endpoint_nothing_is_set_up(tmp_path):
    probe = (
        "import os, sys\n"
        "from rankgate.report import tracing\n"
        "print(json.dumps([tracing.enabled(), 'opentelemetry.sdk.trace' in sys.modules]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run([sys.executable, "-c", "import json\n" + probe], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert json.loads(done.stdout) == [False, False]
