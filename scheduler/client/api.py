"""A small client of the portal's REST API: JSON over HTTP(S) with a bearer token, errors as
the API states them (`{"errors": [{"field", "reason"}]}`)."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 30.0
RETRY_AFTER_S = (1.0, 3.0)  # a keyed POST that got no answer, or a 5xx, is sent again after these


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

    def post(self, path: str, body: Any = None, idempotency_key: str | None = None) -> Any:
        """POST `body`. With `idempotency_key` (sent as `Idempotency-Key`) a request that got
        no answer or a server error is sent again: the portal answers a repeat with the first
        answer, so nothing is created twice."""
        body = {} if body is None else body
        if idempotency_key is None:
            return self._call("POST", path, body, TIMEOUT_S)
        headers = {"Idempotency-Key": idempotency_key}
        for wait_s in RETRY_AFTER_S:
            try:
                return self._call("POST", path, body, TIMEOUT_S, headers)
            except (ApiError, Unreachable) as error:
                if isinstance(error, ApiError) and error.status < 500:
                    raise
            time.sleep(wait_s)
        return self._call("POST", path, body, TIMEOUT_S, headers)

    def patch(self, path: str, body: Any) -> Any:
        return self._call("PATCH", path, body, TIMEOUT_S)

    def delete(self, path: str) -> Any:
        return self._call("DELETE", path, None, TIMEOUT_S)

    def pages(self, path: str, **params: Any):
        """Every item of a paginated list, page by page."""
        page = self.get(path, limit=500, **params)
        while True:
            yield from page["results"]
            if not page.get("next"):
                return
            page = self._call("GET", page["next"], None, TIMEOUT_S)

    def _call(
        self, method: str, path: str, body: Any, timeout_s: float, extra: dict | None = None
    ) -> Any:
        url = path if path.startswith(("http://", "https://")) else f"{self.url}{path}"
        headers = {"Accept": "application/json", **(extra or {})}
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
