"""A real HTTP server standing in for the interLink API, for the interLink tests.

It speaks the API as interLink does (``/status`` and ``/getLogs`` are GET requests with
JSON bodies; a bearer token is required), checks every request body against the
OpenAPI spec in tests/dispatch/specs (strictly: a key the spec does not name
is a violation), checks every answer it gives against the spec too, and runs each
pod's command for real as a local process (the image is not used), so the pod's
output, exit code and timing are genuine.

The same server also answers the few Kubernetes API calls the interlink-kube target
makes (create, read, read log, delete a pod in ``/api/v1/namespaces/<ns>/pods``), with
the same token, so the Kubernetes client is exercised over real HTTP too.

Knobs: ``queue_delay`` (seconds a pod waits before it starts, like a SLURM queue),
``fail_status`` (answer /status with HTTP 500), ``forget_pods`` (answer /status as if
the pods never existed). An image containing ``missing`` never starts (ErrImagePull).
``misbehave`` answers every authorised request (REST and Kubernetes alike) like a
careless server: ``echo-error`` (HTTP 500 whose body echoes the Authorization header),
``echo-text`` (HTTP 200, not JSON, echoing it), ``echo-json`` (HTTP 500 with a JSON
body holding ``echo(token)``: the token URL-encoded, upper-cased, cut short ...) or
``redirect`` (302 to ``/moved``).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

TOKEN = "rg-test-token-5f0c1e9d7a"
"""The bearer token the fake server and the tests share (the tests import it from here:
`from conftest import ...` would find another folder's conftest when stages collect
several folders in one run)."""

# Copies of the interLink API and plugin specs (data), so the contract tests always run.
SPEC_DIR = Path(__file__).resolve().parent / "specs"
API_SPEC = SPEC_DIR / "interlink-openapi.json"


def _strict(node):
    """A copy of a schema tree where objects with properties allow no other keys."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if out.get("type") == "object" and "properties" in out:
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


class Spec:
    """Validators for the request and answer bodies of the interLink API."""

    def __init__(self, path: Path = API_SPEC) -> None:
        self.doc = json.loads(path.read_text())
        # The spec is generated from Go types and describes two of them by their Go shape;
        # on the wire (Kubernetes' JSON) a Quantity is a string such as "2" or "16Gi",
        # and an IntOrString is either.
        schemas = self.doc["components"]["schemas"]
        schemas["ResourceQuantity"] = {"type": "string"}
        schemas["IntstrIntOrString"] = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        self.strict_components = _strict(copy.deepcopy(self.doc["components"]))

    def _schema(self, path: str, part: str) -> dict | None:
        (operation,) = self.doc["paths"][path].values()  # the spec lists one method each
        if part == "request":
            body = operation.get("requestBody")
            return body["content"]["application/json"]["schema"] if body else None
        answer = operation["responses"]["200"].get("content")
        return answer["application/json"]["schema"] if answer else None

    def errors(self, path: str, part: str, document, *, strict: bool) -> list[str]:
        schema = self._schema(path, part)
        if schema is None:
            return [] if document in (None, b"", "") else [f"{path} takes no {part} body"]
        # Imported here so that TOKEN imports without the [dev] extra (conftest needs it).
        from openapi_schema_validator import OAS30Validator

        components = self.strict_components if strict else self.doc["components"]
        validator = OAS30Validator({**schema, "components": components})
        return [
            f"{path} {part}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
            for e in validator.iter_errors(document)
        ]


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class FakePod:
    pod: dict
    created: float
    process: subprocess.Popen | None = None
    output: Path | None = None
    jid: str = ""


@dataclass
class FakeInterlink:
    token: str
    workdir: Path
    queue_delay: float = 0.0
    fail_status: bool = False
    forget_pods: bool = False
    misbehave: str = ""
    echo: Callable[[str], str] = str
    spec: Spec = field(default_factory=Spec)
    requests: list[dict] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    pods: dict[str, FakePod] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)

    # --- server lifecycle ------------------------------------------------------------

    def start(self) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                fake._handle(self, "GET")

            def do_POST(self):
                fake._handle(self, "POST")

            def do_DELETE(self):
                fake._handle(self, "DELETE")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        for entry in self.pods.values():
            if entry.process and entry.process.poll() is None:
                entry.process.kill()
                entry.process.wait()

    # --- requests --------------------------------------------------------------------

    METHODS = {
        "/pinglink": "POST",
        "/create": "POST",
        "/delete": "POST",
        "/status": "GET",
        "/getLogs": "GET",
    }

    def _handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        raw = req.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        self.requests.append(
            {
                "method": method,
                "path": req.path,
                "body": body,
                "authorization": req.headers.get("Authorization"),
            }
        )
        if req.headers.get("Authorization") != f"Bearer {self.token}":
            # Like a careless proxy: the error echoes what it was given.
            return self._send(req, 401, f"unauthorized: {req.headers.get('Authorization')}")
        if self.misbehave:
            return self._misbehave(req)
        if req.path.startswith("/api/v1/"):
            code, answer = self._kube(method, req.path, body)
            return self._send(req, code, answer)
        expected = self.METHODS.get(req.path)
        if expected is None:
            return self._send(req, 404, "no such endpoint")
        if method != expected:
            return self._send(req, 405, f"{req.path} is {expected}")
        problems = self.spec.errors(req.path, "request", body, strict=True)
        if problems:
            self.violations += problems
            return self._send(req, 400, "; ".join(problems))
        handler = getattr(self, "_" + req.path.strip("/").lower())
        code, answer = handler(body)
        if code == 200 and not isinstance(answer, str):
            self.violations += self.spec.errors(req.path, "response", answer, strict=False)
        self._send(req, code, answer)

    def _misbehave(self, req: BaseHTTPRequestHandler) -> None:
        said = req.headers.get("Authorization")
        if self.misbehave == "echo-error":
            return self._send(req, 500, f"internal error while handling {said}")
        if self.misbehave == "echo-json":
            token = said.removeprefix("Bearer ")
            return self._send(
                req, 500, {"kind": "Status", "message": f"rejected {self.echo(token)}"}
            )
        if self.misbehave == "echo-text":
            return self._send(req, 200, f"<html>signed in as {said}</html>")
        if self.misbehave == "redirect" and req.path != "/moved":
            req.send_response(302)
            req.send_header("Location", "/moved")
            req.send_header("Content-Length", "0")
            req.end_headers()
            return None
        return self._send(req, 200, "{}")

    def _send(self, req, code: int, answer) -> None:
        text = answer if isinstance(answer, str) else json.dumps(answer)
        data = text.encode()
        req.send_response(code)
        kind = "text/plain" if isinstance(answer, str) else "application/json"
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    # --- the Kubernetes API, as far as the interlink-kube target uses it ---------------

    def _kube(self, method: str, path: str, body):
        route = path.split("?")[0].strip("/").split("/")  # api v1 namespaces NS pods [NAME [log]]
        if route[:3] != ["api", "v1", "namespaces"] or len(route) < 5 or route[4] != "pods":
            return 404, {"kind": "Status", "code": 404, "message": f"no route {path}"}
        name = route[5] if len(route) > 5 else None
        entry = next((e for e in self.pods.values() if e.pod["metadata"]["name"] == name), None)
        if method == "POST" and name is None:
            body.setdefault("metadata", {}).setdefault("uid", f"uid-{len(self.pods)}")
            self._create({"pod": body})
            return 201, body
        if entry is None:
            return 404, {"kind": "Status", "code": 404, "message": f'pods "{name}" not found'}
        if method == "GET" and route[-1] == "log":
            return 200, entry.output.read_text(errors="replace") if entry.output else ""
        if method == "GET":
            status = self._container_status(entry)
            phase = {"waiting": "Pending", "running": "Running"}.get(next(iter(status["state"])))
            if phase is None:
                phase = "Succeeded" if status["state"]["terminated"]["exitCode"] == 0 else "Failed"
            return 200, {**entry.pod, "status": {"phase": phase, "containerStatuses": [status]}}
        if method == "DELETE":
            self._delete(entry.pod)
            return 200, entry.pod  # the API server answers a pod delete with the pod
        return 405, {"kind": "Status", "code": 405, "message": method}

    def _pinglink(self, _body):
        return 200, {"status": "ok"}

    def _create(self, body):
        pod = body["pod"]
        uid = pod["metadata"]["uid"]
        self.pods[uid] = FakePod(pod=pod, created=time.monotonic(), jid=str(1000 + len(self.pods)))
        return 200, {"pod": pod, "jobScript": "#!/bin/bash\n# fake", "container": []}

    def _status(self, body):
        if self.fail_status:
            return 500, "status backend down"
        answer = []
        for pod in body or []:
            uid = pod["metadata"]["uid"]
            entry = self.pods.get(uid)
            if entry is None or self.forget_pods:
                continue
            answer.append(
                {
                    "name": pod["metadata"]["name"],
                    "namespace": pod["metadata"]["namespace"],
                    "UID": uid,
                    "JID": entry.jid,
                    "containers": [self._container_status(entry)],
                }
            )
        return 200, answer

    def _container_status(self, entry: FakePod) -> dict:
        container = entry.pod["spec"]["containers"][0]
        base = {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": False,
            "restartCount": 0,
        }
        if "missing" in container["image"]:
            state = {"waiting": {"reason": "ErrImagePull", "message": "image not found"}}
            return {**base, "state": state}
        if time.monotonic() - entry.created < self.queue_delay:
            return {**base, "state": {"waiting": {"reason": "PodPending"}}}
        if entry.process is None:
            self._launch(entry, container)
        code = entry.process.poll()
        if code is None:
            return {**base, "ready": True, "state": {"running": {"startedAt": _now()}}}
        return {
            **base,
            "state": {
                "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
            },
        }

    def _launch(self, entry: FakePod, container: dict) -> None:
        entry.output = self.workdir / f"{entry.pod['metadata']['name']}.out"
        env = {**os.environ, **{e["name"]: e["value"] for e in container.get("env", [])}}
        with open(entry.output, "wb") as out:
            entry.process = subprocess.Popen(
                container["command"],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _getlogs(self, body):
        entry = self.pods.get(body["PodUID"])
        if entry is None:
            return 404, "no such pod"
        if entry.output is None:
            return 200, ""
        return 200, entry.output.read_text(errors="replace")

    def _delete(self, pod):
        entry = self.pods.pop(pod["metadata"]["uid"], None)
        if entry and entry.process and entry.process.poll() is None:
            os.killpg(entry.process.pid, 9)
            entry.process.wait()
        self.deleted.append(pod["metadata"]["name"])
        return 200, ""
