"""Enrolment: a new node trades the one-time bootstrap token an operator gave it for a node token.

The agent POSTs ``{"bootstrap_token", "hostname", "facts"}`` as JSON to ``/api/v1/enrol/`` on
the portal that serves its WebSocket URL (``ws`` becomes ``http``, ``wss`` becomes ``https``).
The portal answers 201 ``{"node": "<name>", "token": "<node token>"}``, or a 4xx
``{"errors": [{"field", "reason"}]}`` when it refuses. The node token is kept in the agent's
state directory, readable by its owner only, and used from then on.

Standard library only (urllib): enrolment adds no dependency to a GPU node's install.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ENROL_PATH = "/api/v1/enrol/"
TOKEN_FILE = "token"


class EnrolmentRefused(Exception):
    """The portal said no (a 4xx): retrying with the same bootstrap token will not help."""

    def __init__(self, status: int, errors: list[dict[str, Any]]) -> None:
        reasons = "; ".join(f"{e.get('field')}: {e.get('reason')}" for e in errors) or "no reason"
        super().__init__(f"the portal refused enrolment ({status}): {reasons}")
        self.status = status
        self.errors = errors


class EnrolmentUnavailable(Exception):
    """The portal could not be reached or failed (a 5xx): worth trying again later."""


@dataclass(frozen=True)
class Enrolled:
    """What enrolment gave: the node's name in the portal and its agent token."""

    node: str
    token: str


def enrol_url(ws_url: str) -> str:
    """The enrolment endpoint on the host that serves `ws_url`."""
    parts = urlsplit(ws_url)
    schemes = {"ws": "http", "wss": "https"}
    if parts.scheme not in schemes or not parts.netloc:
        raise ValueError(f"expected a ws:// or wss:// URL, got {ws_url!r}")
    return urlunsplit((schemes[parts.scheme], parts.netloc, ENROL_PATH, "", ""))


def enrol(
    ws_url: str,
    bootstrap_token: str,
    hostname: str,
    facts: dict[str, Any],
    *,
    timeout_s: float = 30.0,
    ssl_context: ssl.SSLContext | None = None,
) -> Enrolled:
    """Enrol once; raises EnrolmentRefused or EnrolmentUnavailable."""
    body = {"bootstrap_token": bootstrap_token, "hostname": hostname, "facts": facts}
    request = urllib.request.Request(
        enrol_url(ws_url),
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=ssl_context) as response:
            return _enrolled(response.status, response.read())
    except urllib.error.HTTPError as exc:
        if 400 <= exc.code < 500:
            raise EnrolmentRefused(exc.code, _errors(exc.read())) from None
        raise EnrolmentUnavailable(f"the portal answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise EnrolmentUnavailable(f"cannot reach {enrol_url(ws_url)}: {reason}") from None


def load_token(state_dir: Path) -> str | None:
    """The node token kept in `state_dir`, or None before enrolment."""
    try:
        token = (Path(state_dir) / TOKEN_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return token or None


def save_token(state_dir: Path, token: str) -> Path:
    """Keep the node token in `state_dir`, readable and writable by the owner only (0600)."""
    directory = Path(state_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = directory / TOKEN_FILE
    temporary = directory / f".{TOKEN_FILE}.tmp-{os.getpid()}"
    # Created 0600 from the start: the token is never readable by others, not even briefly.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(token + "\n")
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    return path


def _enrolled(status: int, raw: bytes) -> Enrolled:
    try:
        data = json.loads(raw)
        enrolled = Enrolled(str(data["node"]), str(data["token"]))
    except (ValueError, KeyError, TypeError):
        raise EnrolmentUnavailable(f"the portal answered {status} without a token") from None
    if status != 201 or not enrolled.token:
        raise EnrolmentUnavailable(f"the portal answered {status} without a token")
    return enrolled


def _errors(raw: bytes) -> list[dict[str, Any]]:
    try:
        errors = json.loads(raw)["errors"]
    except (ValueError, KeyError, TypeError):
        return [{"field": None, "reason": raw.decode(errors="replace")[:200]}]
    return [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
