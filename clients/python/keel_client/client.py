"""The keel client: start runs safely (the client picks the run ID, so a
lost answer is retried into the same run), read their results, follow their
events and streams, resume their hooks and wait for their replies.
Asynchronous, over httpx."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from .errors import (
    HookConflict,
    IdempotencyCollision,
    KeelError,
    RunExists,
    RunFailed,
    StartOutcomeUnknown,
    error_of,
)
from .models import (
    ChunkView,
    HookView,
    JournalEntry,
    QueriesView,
    ReplyView,
    RunView,
    Scope,
    StreamView,
    TokenView,
)

__all__ = ["Answer", "AsyncKeel", "RunEvent", "RunHandle"]


@dataclass(frozen=True)
class Answer:
    """A payload delivered by `AsyncKeel.ask` and the workflow's reply."""

    #: The run the payload went to, as it was when the answer came.
    run: RunView
    #: The payload's ID: `AsyncKeel.reply(token, payload_id)` reads the reply later.
    payload_id: str
    #: The workflow's reply, if it came within the wait (else None).
    reply: Any = None


@dataclass(frozen=True)
class RunEvent:
    """An event of a run: a journal entry (`kind == "entry"`), or its
    record as it changed (`kind == "run"`)."""

    kind: str
    entry: JournalEntry | None = None
    run: RunView | None = None


class AsyncKeel:
    """A keel server, reached over HTTP.

    `token` is the server's token or a scoped one. A start with no answer
    is sent again `retries` times, the pause doubling from
    `retry_delay_s`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        retries: int = 3,
        retry_delay_s: float = 0.2,
        timeout_s: float = 75.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"accept": "application/json"}
        if token:
            headers["authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(
            base_url=url.rstrip("/"),
            headers=headers,
            timeout=timeout_s,
            transport=transport,
        )
        self._retries = retries
        self._retry_delay_s = retry_delay_s

    async def __aenter__(self) -> AsyncKeel:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the client's connections."""
        await self._http.aclose()

    async def start(
        self,
        workflow: str,
        input: Any,
        *,
        run_id: str | None = None,
        token: str | None = None,
        token_retention_ms: int | None = None,
        attributes: Mapping[str, str] | None = None,
        metadata: Any = None,
        deployment: str | None = None,
        delay_ms: int | None = None,
        timeout_ms: int | None = None,
        wait_ms: int | None = None,
        return_on_wait: bool = False,
    ) -> RunHandle:
        """Starts a run of `workflow` with `input`.

        The run ID is chosen before the request is sent, so a start whose
        answer is lost is sent again with the same ID: the run is admitted
        once, and the retry's `run_exists` (or `hook_conflict` naming this
        run) means it was. After every retry, `StartOutcomeUnknown` names
        the run to look up."""
        run_id = run_id or str(uuid.uuid4())
        body: dict[str, Any] = {"input": input, "run_id": run_id, "return_on_wait": return_on_wait}
        optional = {
            "deployment": deployment,
            "attributes": dict(attributes) if attributes else None,
            "additional_metadata": metadata,
            "delay_ms": delay_ms,
            "timeout_ms": timeout_ms,
            "wait_ms": wait_ms,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        if token is not None:
            body["hook"] = {"token": token}
            if token_retention_ms is not None:
                body["hook"]["retention_ms"] = token_retention_ms
        path = f"/v1/workflows/{_segment(workflow)}/runs"
        last: BaseException | None = None
        for attempt in range(self._retries + 1):
            if attempt > 0:
                await asyncio.sleep(self._retry_delay_s * 2 ** (attempt - 1))
            try:
                run = await self.request("POST", path, body)
                return RunHandle(self, run_id, run)
            except (KeelError, httpx.TransportError) as e:
                if attempt > 0 and _admitted_before(e, run_id):
                    handle = self.run(run_id)
                    if wait_ms and not return_on_wait:
                        run = await handle.wait(wait_ms=wait_ms, once=True)
                    else:
                        run = await handle.get()
                    return RunHandle(self, run_id, run)
                if not _unanswered(e):
                    raise
                last = e
        raise StartOutcomeUnknown(run_id, last)

    def run(self, run_id: str) -> RunHandle:
        """The run `run_id`."""
        return RunHandle(self, run_id)

    async def get_hook(self, token: str) -> HookView:
        """The hook holding `token`."""
        return await self.request("GET", f"/v1/hooks/{_segment(token)}")

    async def resume(
        self,
        token: str,
        payload: Any,
        *,
        payload_id: str | None = None,
        wait_ms: int | None = None,
        wait_reply_ms: int | None = None,
    ) -> RunView:
        """Delivers `payload` to the hook holding `token`. With
        `payload_id`, a retry is delivered once (even once the run has
        ended). With `wait_reply_ms`, the answer carries the workflow's
        `reply` to it if one came within that long."""
        params = {"payload_id": payload_id, "wait_ms": wait_ms, "wait_reply_ms": wait_reply_ms}
        return await self.request(
            "POST", f"/v1/hooks/{_segment(token)}/resume", payload, params=params
        )

    async def ask(
        self,
        token: str,
        payload: Any,
        *,
        payload_id: str | None = None,
        wait_ms: int = 30_000,
    ) -> Answer:
        """Request and reply: delivers `payload` to the hook holding `token`
        under a payload ID (chosen if not given, so a retry with the same ID
        is delivered once) and waits up to `wait_ms` for the workflow's
        reply. `reply` is None if none came yet: read it later with
        `reply(token, payload_id)`, or ask again with the same ID."""
        payload_id = payload_id or str(uuid.uuid4())
        run = await self.resume(
            token, payload, payload_id=payload_id, wait_reply_ms=min(wait_ms, 60_000)
        )
        return Answer(run=run, payload_id=payload_id, reply=run.get("reply"))

    async def reply(self, token: str, payload_id: str, *, wait_ms: int | None = None) -> ReplyView:
        """The workflow's reply to the payload of ID `payload_id` delivered
        to `token`, waiting up to `wait_ms` for it (`reply` None until it
        comes)."""
        params = {"wait_ms": None if wait_ms is None else min(wait_ms, 60_000)}
        path = f"/v1/hooks/{_segment(token)}/replies/{_segment(payload_id)}"
        return await self.request("GET", path, params=params)

    async def create_token(self, scope: Scope, *, ttl_ms: int | None = None) -> TokenView:
        """Mints a scoped token (needs the server's own token)."""
        body: dict[str, Any] = {"scope": scope}
        if ttl_ms is not None:
            body["ttl_ms"] = ttl_ms
        return await self.request("POST", "/v1/tokens", body)

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
    ) -> Any:
        """A JSON request: the parsed answer, or the `KeelError` it was."""
        response = await self._http.request(
            method,
            path,
            params=_params(params),
            content=None if body is None else json.dumps(body),
            headers=None if body is None else {"content-type": "application/json"},
        )
        return _answer(response)


_UNSET: Any = object()
"""No value given (an input may be JSON's null)."""


class RunHandle:
    """One run: its record, its result, its events."""

    def __init__(self, keel: AsyncKeel, run_id: str, started: RunView | None = None) -> None:
        self._keel = keel
        self.id = run_id
        #: The run as its start answered, if this handle came from a start.
        self.started = started

    def __repr__(self) -> str:
        return f"RunHandle({self.id!r})"

    async def get(self) -> RunView:
        """The run now."""
        return await self._keel.request("GET", f"/v1/runs/{_segment(self.id)}")

    async def wait(self, *, wait_ms: int = 30_000, once: bool = False) -> RunView:
        """The run once it has ended (long polls of up to `wait_ms`; with
        `once`, one poll, answering the run as it then is)."""
        path = f"/v1/runs/{_segment(self.id)}/result"
        params = {"wait_ms": min(wait_ms, 60_000)}
        while True:
            response = await self._keel._http.get(path, params=params)
            run = _answer(response)
            if response.status_code == 200 or once:
                return run

    async def result(self, *, wait_ms: int = 30_000) -> Any:
        """The run's output once it completes; `RunFailed` if it ends
        otherwise."""
        run = await self.wait(wait_ms=wait_ms)
        if run["status"] != "completed":
            raise RunFailed(run)
        return run.get("output")

    async def cancel(self, *, reason: str | None = None, force: bool = False) -> RunView:
        """Cancels the run (its cleanup runs unless `force`)."""
        params = {"reason": reason, "force": "true" if force else None}
        return await self._keel.request(
            "POST", f"/v1/runs/{_segment(self.id)}/cancel", params=params
        )

    async def pause(self, *, wait_ms: int = 10_000) -> RunView:
        """Pauses the run: no step, timer or payload reaches its code until
        `resume` (payloads queue). Answers once its driver has stopped it
        (`paused`), or with the run as it is after `wait_ms`."""
        return await self._keel.request(
            "POST", f"/v1/runs/{_segment(self.id)}/pause", params={"wait_ms": wait_ms}
        )

    async def queries(self) -> QueriesView:
        """The run's state as its workflow's queries show it (`set_query`):
        read by replaying its journal as it stands, live or ended; nothing
        is written. `position` is the journal position the values hold
        at."""
        return await self._keel.request("GET", f"/v1/runs/{_segment(self.id)}/queries")

    async def query(self, name: str) -> Any:
        """The value of the run's query `name`; `KeelError` with kind
        `query_not_found` names the queries it set."""
        answer = await self._keel.request(
            "GET", f"/v1/runs/{_segment(self.id)}/queries/{_segment(name)}"
        )
        return answer["value"]

    async def resume(self, *, wait_ms: int = 10_000) -> RunView:
        """Resumes the paused run where it stood; answers once it waits or
        ends."""
        params = {"wait_ms": wait_ms, "return_on_wait": "true"}
        return await self._keel.request(
            "POST", f"/v1/runs/{_segment(self.id)}/resume", params=params
        )

    async def restart(
        self,
        *,
        from_step: str | None = None,
        at: int | None = None,
        on: str | None = None,
        wait_ms: int = 10_000,
    ) -> RunView:
        """Restarts the ended run from a step (its first scheduling) or a
        journal position (`at`): the steps before keep their results, those
        from there run again under the same step IDs (on build `on` if
        given, refused unless the journal kept replays there). Answers once
        it waits or ends."""
        params = {"wait_ms": wait_ms, "return_on_wait": "true"}
        body = _restart_body(from_step, at, on)
        return await self._keel.request(
            "POST", f"/v1/runs/{_segment(self.id)}/restart", body, params=params
        )

    async def fork(
        self,
        *,
        from_step: str | None = None,
        at: int | None = None,
        on: str | None = None,
        input: Any = _UNSET,
        wait_ms: int = 10_000,
    ) -> "RunHandle":
        """Forks the run from a step or a journal position into a new run
        whose journal carries this one's up to there (its step IDs the
        fork's own), with `input` if given; returns the new run."""
        params = {"wait_ms": wait_ms, "return_on_wait": "true"}
        body = _restart_body(from_step, at, on)
        if input is not _UNSET:
            body["input"] = input
        forked = await self._keel.request(
            "POST", f"/v1/runs/{_segment(self.id)}/fork", body, params=params
        )
        return self._keel.run(forked["run_id"])

    async def events(self) -> AsyncIterator[RunEvent]:
        """The run's journal entries (those written already first) and its
        record whenever it changes, as server-sent events, until it ends."""
        path = f"/v1/runs/{_segment(self.id)}/events"
        async for event, data in _server_sent_events(self._keel._http, path, None):
            yield _run_event(event, data, self.id)

    async def streams(self) -> list[StreamView]:
        """The streams the run wrote."""
        listed = await self._keel.request("GET", f"/v1/runs/{_segment(self.id)}/streams")
        return listed["streams"]

    async def stream(
        self, name: str, *, start: int = 0, reconnects: int | None = None
    ) -> AsyncIterator[ChunkView]:
        """The chunks of the run's stream `name` from index `start`, as they
        are written, until the stream is closed (its last chunk is the
        `closed` one) or the run ends. A connection that breaks is opened
        again after the last chunk received (up to `reconnects` times in a
        row, the client's retries by default): no chunk is missed or given
        twice. A `restart` chunk drops its step's earlier attempts' chunks."""
        keel = self._keel
        reconnects = keel._retries if reconnects is None else reconnects
        path = f"/v1/runs/{_segment(self.id)}/streams/{_segment(name)}"
        next_index, broken = start, 0
        while True:
            try:
                async for event, data in _server_sent_events(keel._http, path, {"from": next_index}):
                    if event == "error":
                        raise KeelError("internal", data, 0, {"run_id": self.id})
                    chunk = json.loads(data)
                    next_index, broken = chunk["index"] + 1, 0
                    yield chunk
                    if chunk["kind"] == "closed":
                        return
                return  # the server ended the stream: the run has ended
            except httpx.TransportError:
                broken += 1
                if broken > reconnects:
                    raise
                await asyncio.sleep(keel._retry_delay_s * 2 ** (broken - 1))


async def _server_sent_events(
    http: httpx.AsyncClient, path: str, params: Mapping[str, Any] | None
) -> AsyncIterator[tuple[str, str]]:
    """The `(event, data)` of a `text/event-stream` answer to `GET path`;
    an error answer raises its `KeelError`."""
    headers = {"accept": "text/event-stream"}
    async with http.stream("GET", path, params=params, headers=headers, timeout=None) as response:
        if response.status_code != 200:
            await response.aread()
            _answer(response)
        event, data = "message", []
        async for line in response.aiter_lines():
            if line == "":
                if data:
                    yield event, "\n".join(data)
                event, data = "message", []
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if field == "event":
                    event = value
                elif field == "data":
                    data.append(value)


def _run_event(event: str, data: str, run_id: str) -> RunEvent:
    if event == "entry":
        return RunEvent("entry", entry=json.loads(data))
    if event == "run":
        return RunEvent("run", run=json.loads(data))
    raise KeelError("internal", data, 0, {"run_id": run_id})


def _answer(response: httpx.Response) -> Any:
    value = response.json() if response.content else None
    if response.is_error:
        raise error_of(response.status_code, value)
    return value


def _admitted_before(e: BaseException, run_id: str) -> bool:
    """Whether `e` says the run `run_id` was admitted by an earlier try."""
    return (
        (isinstance(e, RunExists) and e.ids.get("run_id") == run_id)
        or (isinstance(e, HookConflict) and e.conflicting_run_id == run_id)
        or (isinstance(e, IdempotencyCollision) and e.existing_run_id == run_id)
    )


def _unanswered(e: BaseException) -> bool:
    """Whether `e` leaves a start's outcome unknown: no answer, or one
    saying the server could not tell."""
    if isinstance(e, httpx.TransportError):
        return True
    assert isinstance(e, KeelError)
    return e.kind == "start_outcome_unknown" or e.status in (502, 503, 504)


def _params(params: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not params:
        return None
    return {k: v for k, v in params.items() if v is not None}


def _restart_body(from_step: str | None, at: int | None, on: str | None) -> dict[str, Any]:
    """The API's body of a restart or a fork: one of `from_step` and `at`."""
    body: dict[str, Any] = {"from_step": from_step} if at is None else {"at": at}
    if on is not None:
        body["on"] = on
    return body


def _segment(value: str) -> str:
    """`value` as one path segment."""
    from urllib.parse import quote

    return quote(value, safe="")
