"""A client of interLink's REST API (the one the virtual kubelet itself calls).

Endpoints, as the API serves them (``../shared/reference/interlink/interlink-openapi.json``
lists every one as POST; ``/status`` and ``/getLogs`` are really GET requests with JSON
bodies):

=========  ======  =====================================================
path       method  body -> answer
=========  ======  =====================================================
/pinglink  POST    none -> InterlinkPingResponse (or plain text)
/create    POST    InterlinkPodCreateRequests -> JSON about the new job
/status    GET     [V1Pod] -> [InterlinkPodStatus]
/getLogs   GET     InterlinkLogStruct -> the container's log, as text
/delete    POST    V1Pod -> nothing
=========  ======  =====================================================

Every request carries ``Authorization: Bearer <token>``; the token is read from the
profile's token file on each request and never appears in an error, a log or a report.
Redirects are refused rather than followed: urllib would re-send the Authorization
header to wherever the server points. Only the standard library is used (urllib), so
GPU hosts without a registry can run it.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from rankgate.dispatch.interlink.manifest import CONTAINER_NAME
from rankgate.dispatch.target import TargetError

REDACTED = "<token>"
PREFIX_CHARS = 8
"""A run of at least this many leading characters of a secret is redacted too."""


def redact(text: str, *secrets: str) -> str:
    """``text`` with every non-empty secret replaced by ``<token>``.

    Servers echo a token in other forms than the one sent, so each secret is also
    matched URL-encoded (``quote`` and ``quote_plus``), in any letter case, and as a
    prefix of at least :data:`PREFIX_CHARS` characters (a token cut short in a message).
    """
    for secret in sorted({x for x in secrets if x}, key=len, reverse=True):
        forms = {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
        for form in sorted(forms, key=len, reverse=True):
            text = _redact_form(text, form)
    return text


def _redact_form(text: str, form: str) -> str:
    """Replace ``form`` and its prefixes of PREFIX_CHARS or more, in any case."""
    head = re.compile(re.escape(form[:PREFIX_CHARS]), re.IGNORECASE)
    kept, pos = [], 0
    while match := head.search(text, pos):
        end, i = match.end(), min(PREFIX_CHARS, len(form))
        while i < len(form) and end < len(text) and text[end].lower() == form[i].lower():
            end, i = end + 1, i + 1
        kept += [text[pos : match.start()], REDACTED]
        pos = end
    return "".join(kept) + text[pos:]


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """Makes a 3xx answer an HTTPError instead of a second request carrying the token."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_RefuseRedirects)


class InterlinkAPIError(TargetError):
    """The API answered with an error status, or could not be reached.

    ``status`` is the HTTP status (None when there was no answer); ``body`` is what the
    API said, verbatim but with the token removed.
    """

    def __init__(self, method: str, path: str, status: int | None, body: str) -> None:
        self.method, self.path, self.status, self.body = method, path, status, body
        said = f"HTTP {status}" if status is not None else "no answer"
        super().__init__(f"interLink {method} {path}: {said}: {body.strip()}")


class InterlinkREST:
    """Talks to one interLink API server."""

    def __init__(self, url: str, token_file: str | Path, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.token_file = Path(token_file).expanduser()
        self.timeout = timeout

    def _token(self) -> str:
        """The token: the file's one line. Anything else is refused without showing it."""
        try:
            text = self.token_file.read_text()
        except OSError as exc:
            raise InterlinkAPIError("-", "-", None, f"cannot read token file: {exc}") from None
        token = text.strip()
        problem = ""
        if not token:
            problem = "is empty"
        elif len(token.splitlines()) > 1:
            problem = f"holds {len(token.splitlines())} lines"
        elif not token.isascii() or not token.isprintable() or " " in token:
            problem = "holds spaces, control or non-ASCII characters"
        if problem:
            raise InterlinkAPIError(
                "-",
                "-",
                None,
                f"token file {self.token_file} {problem}: it must hold the bearer token "
                "alone, on one line (nothing else is sent, and the token is never shown)",
            )
        return token

    def request(self, method: str, path: str, body: Any = None) -> str:
        """Send one request; the answer's text, or :class:`InterlinkAPIError`."""
        return self._send(method, path, body)[0]

    def _send(self, method: str, path: str, body: Any) -> tuple[str, str]:
        """(the answer's text, the token it was sent with, for redacting what it says)."""
        token = self._token()
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _OPENER.open(req, timeout=self.timeout) as answer:
                return answer.read().decode(errors="replace"), token
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            if 300 <= exc.code < 400:
                text = (
                    f"refused to follow a redirect to {exc.headers.get('Location')!r}, which "
                    "would carry the token there; set [interlink] url to the API's own address"
                )
            raise InterlinkAPIError(method, path, exc.code, redact(text, token)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise InterlinkAPIError(method, path, None, redact(str(reason), token)) from None

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        text, token = self._send(method, path, body)
        try:
            return json.loads(text) if text.strip() else None
        except json.JSONDecodeError:
            said = redact(text, token)[:200]
            raise InterlinkAPIError(method, path, 200, f"not JSON: {said!r}") from None

    # --- the five endpoints ------------------------------------------------------------

    def ping(self) -> str:
        return self.request("POST", "/pinglink")

    def create(self, pod: dict) -> Any:
        body = {"pod": pod, "configmaps": [], "secrets": [], "projectedvolumesmaps": []}
        return self._json("POST", "/create", body)

    def status(self, pods: list[dict]) -> list[dict]:
        return self._json("GET", "/status", pods) or []

    def logs(self, pod: dict, *, tail: int | None = None) -> str:
        meta = pod["metadata"]
        opts: dict[str, Any] = {"Timestamps": False, "Follow": False, "Previous": False}
        if tail is not None:
            opts["Tail"] = tail
        body = {
            "Namespace": meta["namespace"],
            "PodUID": meta["uid"],
            "PodName": meta["name"],
            "ContainerName": CONTAINER_NAME,
            "Opts": opts,
        }
        return self.request("GET", "/getLogs", body)

    def delete(self, pod: dict) -> None:
        self.request("POST", "/delete", pod)
