"""The workflows and steps a component exports, as the decorators collect
them, and the manifest and schemas the host reads from them."""

from __future__ import annotations

import inspect
import json
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from . import _codec

__all__ = ["StepDef", "WorkflowDef", "duration_ms", "schemas"]

SDK_VERSION = "python-0.1.0"

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(value: Any, what: str = "a duration") -> int:
    """Milliseconds of ``value``: a number of seconds or a string such as
    ``"250ms"``, ``"1s"``, ``"5m"``, ``"2h"``, ``"1d"``, ``"1m30s"``."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be seconds or a string like \"1s\", not {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"{what} must not be negative: {value!r}")
        return int(round(value * 1000))
    if isinstance(value, str):
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)", value)
        if parts and re.fullmatch(r"(\s*\d+(?:\.\d+)?\s*(ms|s|m|h|d))+\s*", value):
            return int(round(sum(float(n) * _UNITS[u] for n, u in parts)))
    raise ValueError(f"{what} must be seconds or a string like \"250ms\", \"1s\", \"5m\", not {value!r}")


def optional_ms(value: Any, what: str) -> Optional[int]:
    """:func:`duration_ms` of ``value``, or None for None."""
    return None if value is None else duration_ms(value, what)


#: The durability modes a workflow may declare (docs/durability.md).
DURABILITY = ("effect_gated", "strict", "relaxed")


@dataclass
class WorkflowDef:
    """A workflow as ``@keel.workflow`` registers it."""

    name: str
    fn: Callable
    input_hint: Any
    output_hint: Any
    has_input: bool
    idempotency: Optional[tuple] = None
    on_events: list = field(default_factory=list)
    timeout_ms: Optional[int] = None
    #: ``{"key", "limit", "on_limit"}``, as the host reads it.
    concurrency: Optional[dict] = None
    #: ``{"cron", "tz", "every_ms", "overlap", "catchup_window_ms", "input"}``.
    schedule: Optional[dict] = None
    #: One of :data:`DURABILITY`, or ``None``: the worker's default.
    durability: Optional[str] = None


@dataclass
class StepDef:
    """A step as ``@keel.step`` registers it."""

    name: str
    fn: Callable
    params: list
    hints: list
    output_hint: Any
    max_retries: int
    initial_backoff_ms: int
    backoff_factor: float
    max_backoff_ms: int
    retry_budget_ms: Optional[int] = None
    #: ``{"key", "limit", "per_ms"}``, as the host reads it.
    rate_limit: Optional[dict] = None
    #: ``{"key", "limit"}``.
    concurrency: Optional[dict] = None


WORKFLOWS: dict = {}
STEPS: dict = {}


def signature(fn: Callable) -> tuple:
    """``(parameter names, their hints, the return hint)`` of ``fn``."""
    hints = typing.get_type_hints(fn)
    params = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    return (
        [p.name for p in params],
        [hints.get(p.name, Any) for p in params],
        hints.get("return", Any),
    )


def register_workflow(definition: WorkflowDef) -> None:
    if definition.name in WORKFLOWS:
        raise ValueError(f"two workflows are named `{definition.name}`")
    WORKFLOWS[definition.name] = definition


def register_step(definition: StepDef) -> None:
    if definition.name in STEPS:
        raise ValueError(f"two steps are named `{definition.name}`")
    STEPS[definition.name] = definition


def step_args_schema(step: StepDef) -> Any:
    if len(step.hints) == 1:
        return _codec.schema(step.hints[0])
    items = [_codec.schema(h) for h in step.hints]
    return {"type": "array", "prefixItems": items, "minItems": len(items), "maxItems": len(items)}


def schemas() -> str:
    """What the host reads under the workflow name ``keel:schemas``: each
    workflow's input and output schemas and settings, and under
    ``keel:steps`` what steps declare beyond their retry policy."""
    out: dict = {}
    for w in WORKFLOWS.values():
        out[w.name] = {
            "input": _codec.schema(w.input_hint) if w.has_input else None,
            "output": _codec.schema(w.output_hint),
            "schedule": w.schedule,
            "concurrency": w.concurrency,
            "timeout_ms": w.timeout_ms,
            "durability": w.durability,
            "description": inspect.getdoc(w.fn),
        }
    out["keel:steps"] = {
        s.name: {"rate_limit": s.rate_limit, "concurrency": s.concurrency, "retry_budget_ms": s.retry_budget_ms}
        for s in STEPS.values()
        if s.rate_limit is not None or s.concurrency is not None or s.retry_budget_ms is not None
    }
    return json.dumps(out)
