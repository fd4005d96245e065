"""keel's Python SDK: durable workflows and steps, built into a
WebAssembly component with componentize-py (``python -m keel build``).

>>> import keel
>>> from dataclasses import dataclass
>>>
>>> @dataclass
... class Order:
...     order_id: str
...     amount: int
>>>
>>> @keel.step(max_retries=3, initial_backoff="100ms")
... async def charge(order: Order) -> str:
...     meta = keel.step_metadata()          # meta.step_id: an idempotency key
...     ...
>>>
>>> @keel.workflow
... async def process_order(order: Order) -> str:
...     return await charge(order)
"""

from __future__ import annotations

import datetime as _dt
import json as _json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, NoReturn, Optional, TypeVar, Union

from . import _codec, _host, _registry, http
from ._declare import Concurrency, RateLimit, Schedule
from ._executor import Command, current, gather, select, shield
from ._saga import Saga
from .errors import (
    Cancelled,
    FatalError,
    HookConflict,
    HookForceClaimed,
    KeelError,
    PayloadError,
    RetryableError,
    StartRefused,
    StepFailed,
)

__all__ = [
    "Cancelled",
    "Concurrency",
    "FatalError",
    "Hook",
    "HookConflict",
    "HookForceClaimed",
    "KeelError",
    "PayloadError",
    "RateLimit",
    "Reply",
    "RetryableError",
    "RunHandle",
    "Saga",
    "Schedule",
    "StartRefused",
    "StepFailed",
    "StepMetadata",
    "WorkflowMetadata",
    "create_hook",
    "gather",
    "log",
    "patched",
    "resume_hook",
    "select",
    "set_attribute",
    "set_query",
    "continue_as_new",
    "shield",
    "sleep",
    "sleep_until",
    "start",
    "step",
    "step_metadata",
    "stream_close",
    "stream_write",
    "workflow",
    "workflow_metadata",
]

T = TypeVar("T")


# ---------------------------------------------------------------- decorators


class Workflow:
    """A function decorated with :func:`workflow`; calling it runs the
    coroutine (useful in tests); the host runs it by name."""

    def __init__(self, definition: _registry.WorkflowDef):
        self.definition = definition
        self.__wrapped__ = definition.fn
        self.__name__ = definition.name
        self.__doc__ = definition.fn.__doc__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.definition.fn(*args, **kwargs)


def workflow(
    fn: Optional[Callable] = None,
    *,
    name: Optional[str] = None,
    idempotency_key: Optional[str] = None,
    idempotency_ttl: Union[str, float] = "24h",
    on_events: Optional[list] = None,
    timeout: Union[str, float, None] = None,
    concurrency: Optional[Concurrency] = None,
    schedule: Optional[Schedule] = None,
    durability: Optional[str] = None,
) -> Any:
    """Declares an ``async def`` taking at most one input (annotated with a
    JSON type: a dataclass, TypedDict, ``dict``, ``str`` ...) as a workflow.

    ``idempotency_key`` is a CEL expression over ``input`` and
    ``additional_metadata``: one run per key is admitted within
    ``idempotency_ttl``. ``on_events`` lists event keys that start a run;
    ``timeout`` is the run's deadline ("1h", or seconds).
    ``concurrency`` limits its runs in progress per key
    (``keel.Concurrency("input.tenant_id", 2)``); ``schedule`` starts it
    on time (``keel.Schedule(cron="0 2 * * *", tz="Europe/Berlin")``);
    ``durability`` is ``"effect_gated"`` (the worker's default unless its
    operator chose another: what a step's effects depend on is durable
    before its first HTTP request, stream chunk or hook resume), ``"strict"`` (every step attempt's start durable before
    it runs) or ``"relaxed"`` (step attempts journaled with the run's next
    wait or end; a crash may run them again, as a retry would).

    >>> @keel.workflow(concurrency=keel.Concurrency("input.user_id", 1))
    ... async def process_order(order: Order) -> Receipt: ...
    """
    if durability is not None and durability not in _registry.DURABILITY:
        raise ValueError(f'durability is "effect_gated" (the default), "strict" or "relaxed", not {durability!r}')
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise TypeError("concurrency takes a keel.Concurrency(key, limit)")
    if schedule is not None and not isinstance(schedule, Schedule):
        raise TypeError("schedule takes a keel.Schedule(cron=... or every=...)")

    def wrap(f: Callable) -> Workflow:
        names, hints, output = _registry.signature(f)
        if len(names) > 1:
            raise TypeError(f"workflow `{f.__name__}` takes one input; put its fields in a dataclass")
        definition = _registry.WorkflowDef(
            name=name or f.__name__,
            fn=f,
            input_hint=hints[0] if hints else Any,
            output_hint=output,
            has_input=bool(names),
            idempotency=(idempotency_key, _registry.duration_ms(idempotency_ttl, "idempotency_ttl"))
            if idempotency_key
            else None,
            on_events=list(on_events or []),
            timeout_ms=_registry.optional_ms(timeout, "timeout"),
            concurrency=concurrency.workflow_manifest() if concurrency else None,
            schedule=schedule.manifest() if schedule else None,
            durability=durability,
        )
        _registry.register_workflow(definition)
        return Workflow(definition)

    return wrap(fn) if fn is not None else wrap


class Step:
    """A function decorated with :func:`step`. Called from a workflow, it
    returns an awaitable that schedules the step and resolves to its
    journaled output (or raises :class:`StepFailed`)."""

    def __init__(self, definition: _registry.StepDef):
        self.definition = definition
        self.__wrapped__ = definition.fn
        self.__name__ = definition.name
        self.__doc__ = definition.fn.__doc__

    def __call__(self, *args: Any) -> Awaitable:
        d = self.definition
        if len(args) != len(d.params):
            raise TypeError(f"step `{d.name}` takes {len(d.params)} arguments ({len(args)} given)")
        packed = _codec.encode(args[0] if len(args) == 1 else list(args))
        text = _json.dumps(packed)
        wf = _host.workflow()

        def convert(outcome: Any, _id: int) -> Any:
            kind = type(outcome).__name__
            if kind == "Outcome_StepCompleted":
                try:
                    return _codec.decode(d.output_hint, _json.loads(outcome.value))
                except (ValueError, _codec.DecodeError) as e:
                    raise PayloadError(f"output of step `{d.name}` does not decode: {e}") from None
            f = outcome.value
            raise StepFailed(f.step_name, f.step_id, f.message, f.fatal, f.attempts)

        return Command(lambda: wf.schedule_step(d.name, text), convert)


def step(
    fn: Optional[Callable] = None,
    *,
    name: Optional[str] = None,
    max_retries: int = 3,
    initial_backoff: Union[str, float] = "1s",
    backoff_factor: float = 2.0,
    max_backoff: Union[str, float] = "60s",
    retry_budget: Union[str, float, None] = None,
    rate_limit: Optional[RateLimit] = None,
    concurrency: Optional[Concurrency] = None,
) -> Any:
    """Declares a function (``async def`` or ``def``) as a step: it runs in
    a fresh sandbox per attempt with the deployment's grants (HTTP hosts,
    directories, environment variables), and its result is journaled.

    It is retried after any exception but :class:`FatalError`, after
    ``initial_backoff`` times ``backoff_factor`` per retry, at most
    ``max_backoff``; durations are seconds or strings like ``"100ms"``.
    ``rate_limit`` bounds how often attempts of steps sharing its key
    start (``keel.RateLimit("'openai'", 60, "1m")``), ``concurrency`` how
    many run at once (``keel.Concurrency("'ledger'", 1)``), across every
    worker; an attempt beyond them waits for its turn, not counted as an
    attempt.
    """
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise TypeError("rate_limit takes a keel.RateLimit(key, limit, per)")
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise TypeError("concurrency takes a keel.Concurrency(key, limit)")

    def wrap(f: Callable) -> Step:
        names, hints, output = _registry.signature(f)
        definition = _registry.StepDef(
            name=name or f.__name__,
            fn=f,
            params=names,
            hints=hints,
            output_hint=output,
            max_retries=max_retries,
            initial_backoff_ms=_registry.duration_ms(initial_backoff, "initial_backoff"),
            backoff_factor=float(backoff_factor),
            max_backoff_ms=_registry.duration_ms(max_backoff, "max_backoff"),
            retry_budget_ms=_registry.optional_ms(retry_budget, "retry_budget"),
            rate_limit=rate_limit.manifest() if rate_limit else None,
            concurrency=concurrency.step_manifest(name or f.__name__) if concurrency else None,
        )
        _registry.register_step(definition)
        return Step(definition)

    return wrap(fn) if fn is not None else wrap


# ---------------------------------------------------------------- time


def sleep(duration: Union[str, float]) -> Awaitable[None]:
    """Sleeps durably: the timer survives crashes and restarts, and holds
    nothing while it waits. ``duration`` is seconds or a string ("1h")."""
    ms = _registry.duration_ms(duration, "a sleep")
    wf = _host.workflow()
    return Command(lambda: wf.schedule_sleep(ms), lambda _o, _i: None)


def sleep_until(at: _dt.datetime) -> Awaitable[None]:
    """Sleeps durably until ``at`` (aware, or UTC if naive) on the
    workflow's clock (journal time); a time already past completes at once."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=_dt.timezone.utc)
    seconds = (at - _dt.datetime.now(_dt.timezone.utc)).total_seconds()
    return sleep(max(seconds, 0.0))


# ---------------------------------------------------------------- metadata


@dataclass(frozen=True)
class WorkflowMetadata:
    """The running workflow's run."""

    run_id: str
    workflow_name: str
    started_at: _dt.datetime


@dataclass(frozen=True)
class StepMetadata:
    """The running step attempt. ``step_id`` is stable across retries,
    crashes and replays: use it as an idempotency key."""

    step_id: str
    attempt: int
    step_name: str
    run_id: str
    attempt_started_at: _dt.datetime


def _time(ms: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.timezone.utc)


def workflow_metadata() -> WorkflowMetadata:
    """The run's ID, workflow name and start time (in a workflow)."""
    current()
    m = _host.workflow().metadata()
    return WorkflowMetadata(m.run_id, m.workflow_name, _time(m.started_at_ms))


def step_metadata() -> StepMetadata:
    """The step's ID, attempt, name and run (in a step)."""
    m = _host.step().metadata()
    return StepMetadata(m.step_id, m.attempt, m.step_name, m.run_id, _time(m.attempt_started_at_ms))


def patched(change_id: str) -> bool:
    """True in runs that reach this point after the change ``change_id``
    was deployed; False when replaying a journal recorded before it."""
    current()
    return _host.workflow().patched(change_id)


_LEVELS = ("trace", "debug", "info", "warn", "error")


def log(message: str, level: str = "info") -> None:
    """A log line tagged with the run ID; silent during replay."""
    if level not in _LEVELS:
        raise ValueError(f"level must be one of {_LEVELS}")
    current()
    types = _host.types()
    _host.workflow().log(getattr(types.LogLevel, level.upper()), message)


def set_attribute(key: str, value: str) -> None:
    """Sets the run's searchable attribute ``key`` (journaled)."""
    current()
    _raising(lambda: _host.workflow().set_attribute(key, value))


def set_query(name: str, value: Any) -> None:
    """Sets the run's query ``name`` to ``value`` (JSON-encodable): what
    ``keel runs query RUN NAME`` answers for the run as its journal stands,
    read by replaying it. Never journaled: call it from workflow code
    whenever the state it shows changes. Names are as attributes'; values
    at most 64 KiB of JSON; a workflow sets at most 32 queries."""
    current()
    text = _json.dumps(_codec.encode(value))
    _raising(lambda: _host.workflow().set_query(name, text))


def continue_as_new(input: Any) -> NoReturn:
    """Ends this run and starts a run of the same workflow, on the same
    build, with ``input`` in its place (Temporal's continue-as-new): the new
    run takes over the start token, with the payloads this run did not
    take, its attributes and its parent. Call it from workflow code every
    few thousand events so that a workflow that lives for months keeps its
    journal bounded. Never returns when it succeeds; raises ``KeelError``,
    changing nothing, on an input over the payload bound."""
    current()
    text = _json.dumps(_codec.encode(input))
    _raising(lambda: _host.workflow().continue_as_new(text))
    raise KeelError("continuing as new returned")


def _json_or_none(value: Any) -> Optional[str]:
    """``value`` as JSON text, or None for None."""
    return None if value is None else _json.dumps(_codec.encode(value))


def _raising(call: Callable[[], Any]) -> Any:
    from componentize_py_types import Err

    try:
        return call()
    except Err as e:
        raise KeelError(str(e.value)) from None


def _in_workflow() -> bool:
    from ._executor import _CURRENT

    return _CURRENT is not None


def stream_write(name: str, value: Any) -> None:
    """Writes ``value`` (as JSON) to the run's stream ``name``: journaled
    from a workflow, at once from a step."""
    chunk = _json.dumps(_codec.encode(value))
    host = _host.workflow() if _in_workflow() else _host.step()
    _raising(lambda: host.stream_write(name, chunk))


def stream_close(name: str) -> None:
    """Closes the run's stream ``name``: readers reach its end."""
    host = _host.workflow() if _in_workflow() else _host.step()
    _raising(lambda: host.stream_close(name))


# ---------------------------------------------------------------- hooks


class Reply:
    """The answer to one payload of a hook, from :meth:`Hook.next_request`."""

    def __init__(self, request: int):
        self._request = request

    def send(self, value: Any) -> None:
        """Replies ``value`` (JSON) to the resume that sent the payload."""
        text = _json.dumps(_codec.encode(value))
        _raising(lambda: _host.workflow().hook_reply(self._request, text))


class Hook(Generic[T]):
    """A hook from :func:`create_hook`: ``await hook.next()`` or ``async for
    payload in hook``. ``with`` disposes of it at the end of the block."""

    def __init__(self, handle: int, token: str, conflict: Optional[str], payload_type: Any):
        self.token = token
        #: The run that holds the token, when this hook registered nothing.
        self.conflict = conflict
        self._handle = handle
        self._type = payload_type
        self._pending: Optional[Command] = None
        self._disposed = False

    def _next(self) -> Command:
        if self._pending is None:
            wf, handle = _host.workflow(), self._handle
            self._pending = Command(lambda: wf.hook_next(handle), self._convert)
        return self._pending

    def _convert(self, outcome: Any, request: int) -> Any:
        self._pending = None
        if type(outcome).__name__ == "Outcome_HookRejected":
            raise HookForceClaimed(self.token, outcome.value.value)
        try:
            return _codec.decode(self._type, _json.loads(outcome.value)), request
        except (ValueError, _codec.DecodeError) as e:
            reason = f"a payload of hook `{self.token}` does not decode: {e}"
            # Journaled, so a retry of the run this fails skips the payload.
            try:
                _host.workflow().hook_refuse(request, reason)
            except Exception:  # noqa: BLE001 - the refusal is best effort
                pass
            raise PayloadError(reason) from None

    async def next_request(self) -> tuple:
        """The next payload and a :class:`Reply` to answer it by."""
        if self.conflict is not None:
            raise HookConflict(self.token, self.conflict)
        payload, request = await self._next()
        return payload, Reply(request)

    async def next(self) -> T:
        """The next payload, in the order they were resumed."""
        payload, _ = await self.next_request()
        return payload

    def __aiter__(self) -> "Hook[T]":
        return self

    async def __anext__(self) -> T:
        return await self.next()

    def dispose(self) -> None:
        """Releases the token at once; retention no longer applies. A hook
        that is never disposed holds its token until the run ends."""
        if not self._disposed:
            self._disposed = True
            _host.workflow().dispose_hook(self._handle)

    def __enter__(self) -> "Hook[T]":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.dispose()


def create_hook(
    payload_type: Any = Any,
    token: Optional[str] = None,
    *,
    metadata: Any = None,
    min_retention: Union[str, float, None] = None,
    force: bool = False,
) -> Hook:
    """Registers a hook: resumes of ``token`` (by default one derived from
    the run) deliver JSON payloads of ``payload_type``; a resume whose
    payload does not fit its schema is refused. On the run's own start
    token the hook binds to the start hook. When another run holds the
    token nothing is registered: ``hook.conflict`` names that run and
    awaiting the hook raises :class:`HookConflict`."""
    current()
    types = _host.types()
    payload_schema = None if payload_type is Any else _json.dumps(_codec.schema(payload_type))
    options = types.HookOptions(
        token=token,
        metadata=_json_or_none(metadata),
        min_retention_ms=_registry.optional_ms(min_retention, "min_retention"),
        force=force,
        payload_schema=payload_schema,
    )
    hook = _raising(lambda: _host.workflow().create_hook(options))
    reg = hook.registration
    conflict = reg.value if type(reg).__name__ == "HookRegistration_Conflict" else None
    return Hook(hook.handle, hook.token, conflict, payload_type)


def resume_hook(token: str, payload: Any) -> str:
    """From a step: delivers ``payload`` to the active hook holding
    ``token``; returns its run's ID. Raises :class:`KeelError` when no
    active hook holds it."""
    from componentize_py_types import Err

    try:
        return _host.step().resume_hook(token, _json.dumps(_codec.encode(payload)))
    except Err as e:
        if type(e.value).__name__ == "ResumeError_HookNotFound":
            raise KeelError(f"no active hook holds the token `{token}`") from None
        raise KeelError(str(e.value.value)) from None


# ---------------------------------------------------------------- runs


class RunHandle:
    """Another run, started by :func:`start`."""

    def __init__(self, run_id: str):
        self.run_id = run_id

    def status(self) -> str:
        """Its status as of this point of the journal: ``pending``,
        ``running``, ``waiting``, ``completed``, ``failed`` or ``cancelled``."""
        return _host.workflow().read_run_status(self.run_id).name.lower()

    def result(self, output_type: Any = Any) -> Awaitable:
        """Waits for the run to end; its output, or :class:`KeelError`
        when it failed or was cancelled."""
        wf, run_id = _host.workflow(), self.run_id

        def convert(outcome: Any, _id: int) -> Any:
            end = outcome.value
            if end.output is not None and end.status.name == "COMPLETED":
                return _codec.decode(output_type, _json.loads(end.output))
            raise KeelError(f"run {run_id} ended {end.status.name.lower()}: {end.error}")

        return Command(lambda: wf.await_run(run_id), convert)

    def __repr__(self) -> str:
        return f"RunHandle({self.run_id!r})"


async def start(
    workflow: Union[str, Workflow],
    input: Any = None,
    *,
    token: Optional[str] = None,
    metadata: Any = None,
    min_retention: Union[str, float, None] = None,
    deployment: Optional[str] = None,
    close: str = "cancel",
    timeout: Union[str, float, None] = None,
) -> RunHandle:
    """Starts a run of ``workflow`` (of this component, or of the latest
    build of ``deployment``) as a child: when this run ends the child is
    cancelled (``close="cancel"``), goes on (``"abandon"``) or is waited
    for (``"wait"``). With ``token``, only if no run holds it: else
    :class:`HookConflict` names the holder."""
    from componentize_py_types import Err

    current()
    types = _host.types()
    name = workflow.definition.name if isinstance(workflow, Workflow) else workflow
    policies = {"cancel": types.ClosePolicy.CANCEL, "abandon": types.ClosePolicy.ABANDON, "wait": types.ClosePolicy.WAIT}
    if close not in policies:
        raise ValueError(f"close must be one of {sorted(policies)}, not {close!r}")
    options = types.ChildOptions(
        token=token,
        metadata=_json_or_none(metadata),
        min_retention_ms=_registry.optional_ms(min_retention, "min_retention"),
        deployment=deployment,
        close=policies[close],
        timeout_ms=_registry.optional_ms(timeout, "timeout"),
    )
    try:
        run_id = _host.workflow().start_child(name, _json.dumps(_codec.encode(input)), options)
    except Err as e:
        if type(e.value).__name__ == "StartError_HookConflict":
            raise HookConflict(token or "", e.value.value) from None
        raise StartRefused(str(e.value.value)) from None
    return RunHandle(run_id)
