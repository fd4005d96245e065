"""The component's export: the host asks it for the manifest, runs a
workflow in the deterministic sandbox and runs one step attempt."""

from __future__ import annotations

import json
import random
import traceback
from typing import Any

# Every module the SDK calls at run time is imported here, at build time:
# componentize-py snapshots the interpreter after these imports, and a
# sandbox has no files to import a module from later.
import componentize_py_types  # noqa: F401
from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import keel_workflow_types as types
from wit_world.imports import outgoing_handler, step_context, wasi_http_types  # noqa: F401
from wit_world.imports import workflow_context

from . import _codec, _executor, _registry
from .errors import FatalError, RetryableError

SCHEMAS = "keel:schemas"


def _describe(e: BaseException) -> str:
    text = str(e)
    name = type(e).__name__
    if isinstance(e, _codec.DecodeError) or name in ("StepFailed", "Cancelled", "KeelError"):
        return text
    # Without source lines: reading them would open files.
    frames = list(traceback.walk_tb(e.__traceback__))
    at = f" (at {frames[-1][0].f_code.co_filename}:{frames[-1][1]})" if frames else ""
    return f"{name}: {text}{at}" if text else f"{name}{at}"


class Guest(exports.Guest):
    def get_manifest(self) -> types.Manifest:
        return types.Manifest(
            sdk_version=_registry.SDK_VERSION,
            workflows=[
                types.WorkflowInfo(
                    name=w.name,
                    idempotency=types.Idempotency(key=w.idempotency[0], ttl_ms=w.idempotency[1])
                    if w.idempotency
                    else None,
                    on_events=list(w.on_events),
                )
                for w in _registry.WORKFLOWS.values()
            ],
            steps=[
                types.StepInfo(
                    name=s.name,
                    retry=types.RetryPolicy(
                        max_retries=s.max_retries,
                        initial_backoff_ms=s.initial_backoff_ms,
                        backoff_factor=s.backoff_factor,
                        max_backoff_ms=s.max_backoff_ms,
                    ),
                )
                for s in _registry.STEPS.values()
            ],
        )

    def run_workflow(self, name: str, input: str) -> str:
        if name == SCHEMAS:
            return _registry.schemas()
        w = _registry.WORKFLOWS.get(name)
        if w is None:
            raise Err(f"this component exports no workflow `{name}`")
        try:
            value = _codec.decode(w.input_hint, json.loads(input)) if w.has_input else None
        except (ValueError, _codec.DecodeError) as e:
            raise Err(f"the run's input does not match the workflow's input type: {e}")
        # Randomness in a workflow is the run's: the same on every replay.
        random.seed(workflow_context.metadata().run_id)
        executor = _executor.Executor(workflow_context, workflow_context.await_any)
        _executor.install(executor)
        try:
            output = executor.run(w.fn(value) if w.has_input else w.fn())
            return json.dumps(_codec.encode(output))
        except Exception as e:  # noqa: BLE001 - the workflow's error ends the run
            raise Err(_describe(e))
        finally:
            _executor.install(None)

    def run_step(self, name: str, input: str) -> str:
        s = _registry.STEPS.get(name)
        if s is None:
            raise Err(types.StepError_Fatal(f"this component exports no step `{name}`"))
        try:
            data = json.loads(input)
            if len(s.hints) == 1:
                args = [_codec.decode(s.hints[0], data)]
            elif isinstance(data, list) and len(data) == len(s.hints):
                args = [_codec.decode(h, v, f"/{i}") for i, (h, v) in enumerate(zip(s.hints, data))]
            else:
                raise _codec.DecodeError("", f"expected an array of {len(s.hints)} arguments")
        except (ValueError, _codec.DecodeError) as e:
            raise Err(types.StepError_Fatal(f"the step's input does not match its arguments: {e}"))
        try:
            output = _drive(s.fn(*args))
            return json.dumps(_codec.encode(output))
        except FatalError as e:
            raise Err(types.StepError_Fatal(str(e)))
        except RetryableError as e:
            after = None if e.retry_after is None else _registry.duration_ms(e.retry_after)
            raise Err(types.StepError_Retryable(types.RetryableError(str(e), after)))
        except Exception as e:  # noqa: BLE001 - any other error is retried
            raise Err(types.StepError_Retryable(types.RetryableError(_describe(e), None)))


def _drive(result: Any) -> Any:
    """A step's result: a coroutine is run to its end (keel's HTTP client
    completes without suspending; asyncio is not available in steps)."""
    if not hasattr(result, "send"):
        return result
    try:
        waited = result.send(None)
    except StopIteration as stop:
        return stop.value
    result.close()
    raise FatalError(
        f"a step awaited {waited!r}, which keel cannot wait for in a step; use keel.http "
        "(it completes without suspending) and plain calls"
    )
