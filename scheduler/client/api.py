"""A small client of the portal's REST API: JSON over HTTP(S) with a bearer token, errors as
the API states them (`{"errors": [{"field", "reason"}]}`)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 30.0


@dataclass
class ApiError(Exception):
    """The API answered with an error: its status and its (field, reason) pairs."""

    status: int
    errors: list[tuple[str | None, str]]

    def __str__(self) -> str:
        return "; ".join(f"{field}: {reason}" if field else reason for field, reason in self.errors)


class Unreachable(Exception):
    """No answer from the portal: a network error, or no API at that address."""


class Client:
    def __init__(self, url: str, token: str | None, ca_file: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self._ssl = ssl.create_default_context(cafile=ca_file) if ca_file else None

    def get(self, path: str, timeout_s: float = TIMEOUT_S, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        return self._call("GET", path + suffix, None, timeout_s)

    def post(self, path: str, body: Any = None) -> Any:
        return self._call("POST", path, {} if body is None else body, TIMEOUT_S)

    def pages(self, path: str, **params: Any):
        """Every item of a paginated list, page by page."""
        page = self.get(path, limit=500, **params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self._call("GET", page["next"], None, TIMEOUT_S)

    def _call(self, method: str, path: str, body: Any, timeout_s: float) -> Any:
        url = path if path.startswith(("http://", "https://")) else f"{self.url}{path}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=self._ssl) as answer:
                return _json(answer.read(), url)
        except urllib.error.HTTPError as error:
            raise _api_error(error) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as error:
            reason = getattr(error, "reason", error)
            raise Unreachable(f"cannot reach {self.url}: {reason}") from None


def _json(raw: bytes, url: str) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise Unreachable(f"{url} did not answer with JSON: is it the portal's address?") from None


def _api_error(error: urllib.error.HTTPError) -> ApiError:
    try:
        body = json.loads(error.read() or b"null")
        errors = [(e.get("field"), e["reason"]) for e in body["errors"]]
    except (ValueError, KeyError, TypeError, AttributeError):
        errors = [(None, f"HTTP {error.code} {error.reason}")]
    return ApiError(error.code, errors)
