"""HTTP from steps, over wasi:http: the host lets a step reach only the
hosts its deployment granted (``keel deploy --allow-http HOST``).

>>> response = await keel.http.post(url, json={"amount": 10},
...                                  headers={"Idempotency-Key": meta.step_id})
>>> response.raise_for_status()
>>> response.json()["charge_id"]

The calls complete without suspending (a step attempt runs on its own),
so they are ``async`` only to read naturally in ``async def`` steps;
:func:`request_sync` is the same call for plain functions.
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any, Optional, Union
from urllib.parse import urlsplit

__all__ = ["HttpError", "Response", "get", "post", "put", "delete", "request", "request_sync"]

_CHUNK = 4096


class HttpError(Exception):
    """The request failed before an answer (refused, unreachable, not
    granted), or :meth:`Response.raise_for_status` found an error status."""

    def __init__(self, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.status = status


@dataclass
class Response:
    """An answer: its status, headers (lower-case names) and body."""

    status: int
    headers: dict = field(default_factory=dict)
    content: bytes = b""

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return _json.loads(self.content)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def raise_for_status(self) -> "Response":
        """Raises :class:`HttpError` on a 4xx or 5xx status."""
        if self.status >= 400:
            raise HttpError(f"HTTP {self.status}: {self.text[:500]}", self.status)
        return self


def _method(types: Any, name: str) -> Any:
    known = {
        "GET": "Method_Get", "HEAD": "Method_Head", "POST": "Method_Post", "PUT": "Method_Put",
        "DELETE": "Method_Delete", "OPTIONS": "Method_Options", "PATCH": "Method_Patch",
    }
    cls = known.get(name.upper())
    return getattr(types, cls)() if cls else types.Method_Other(name)


def request_sync(
    method: str,
    url: str,
    *,
    headers: Optional[dict] = None,
    content: Union[bytes, str, None] = None,
    json: Any = None,
    timeout: Optional[float] = None,
) -> Response:
    """Sends one request and reads the whole answer."""
    from componentize_py_types import Err
    from wit_world.imports import outgoing_handler
    from wit_world.imports import wasi_http_types as types

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise HttpError(f"`{url}` is not an http:// or https:// URL")
    headers = dict(headers or {})
    body = content.encode() if isinstance(content, str) else content
    if json is not None:
        body = _json.dumps(json).encode()
        if not any(k.lower() == "content-type" for k in headers):
            headers["Content-Type"] = "application/json"
    # A body of known length goes with its Content-Length, never chunked:
    # many servers and proxies do not take chunked request bodies (and
    # read an empty one instead). A POST, PUT or PATCH without a body says
    # it has none.
    if not any(k.lower() in ("content-length", "transfer-encoding") for k in headers):
        if body is not None:
            headers["Content-Length"] = str(len(body))
        elif method.upper() in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = "0"
    fields = types.Fields.from_list([(k.lower(), str(v).encode()) for k, v in headers.items()])
    req = types.OutgoingRequest(fields)
    req.set_method(_method(types, method))
    req.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
    req.set_authority(parts.netloc)
    req.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    if timeout is not None:
        nanos = int(timeout * 1e9)
        req.set_connect_timeout(nanos)
        req.set_first_byte_timeout(nanos)
    outgoing = req.body()
    try:
        future = outgoing_handler.handle(req, None)
    except Err as e:
        raise HttpError(f"{method} {url} was refused: {e.value}") from None
    if body:
        stream = outgoing.write()
        for start in range(0, len(body), _CHUNK):
            stream.blocking_write_and_flush(body[start : start + _CHUNK])
        stream.__exit__(None, None, None)
    types.OutgoingBody.finish(outgoing, None)
    pollable = future.subscribe()
    pollable.block()
    pollable.__exit__(None, None, None)
    answer = future.get()
    future.__exit__(None, None, None)
    if answer is None or not hasattr(answer, "value") or type(answer).__name__ != "Ok":
        raise HttpError(f"{method} {url} got no answer")
    inner = answer.value
    if type(inner).__name__ != "Ok":
        raise HttpError(f"{method} {url} failed: {inner.value}")
    response = inner.value
    status = response.status()
    got = {}
    for name, value in response.headers().entries():
        got[name.lower()] = value.decode("latin-1")
    incoming = response.consume()
    stream = incoming.stream()
    chunks = []
    while True:
        try:
            chunks.append(stream.blocking_read(64 * 1024))
        except Err as e:
            if type(e.value).__name__ == "StreamError_Closed":
                break
            raise HttpError(f"{method} {url}: reading the answer failed: {e.value}") from None
    stream.__exit__(None, None, None)
    types.IncomingBody.finish(incoming)
    response.__exit__(None, None, None)
    return Response(status, got, b"".join(chunks))


async def request(method: str, url: str, **kwargs: Any) -> Response:
    """Sends one request; see :func:`request_sync`."""
    return request_sync(method, url, **kwargs)


async def get(url: str, **kwargs: Any) -> Response:
    return request_sync("GET", url, **kwargs)


async def post(url: str, **kwargs: Any) -> Response:
    return request_sync("POST", url, **kwargs)


async def put(url: str, **kwargs: Any) -> Response:
    return request_sync("PUT", url, **kwargs)


async def delete(url: str, **kwargs: Any) -> Response:
    return request_sync("DELETE", url, **kwargs)
