"""What a workflow or a step declares beyond its code, as
``@keel.workflow`` and ``@keel.step`` take it: concurrency limits per key,
rate limits, and schedules. The host reads them at deploy and refuses a
deployment whose declarations it cannot honour, naming the problem."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Union

from ._registry import duration_ms, optional_ms

__all__ = ["Concurrency", "RateLimit", "Schedule"]

_ON_LIMIT = ("queue", "cancel_newest", "cancel_in_progress")
_OVERLAP = ("skip", "buffer-one", "allow-all")
_NO_INPUT = object()


@dataclass(frozen=True)
class Concurrency:
    """At most ``limit`` runs of a workflow (or attempts of a step) of one
    key at once. ``key`` is a CEL expression over ``input`` (and, for a
    workflow, ``additional_metadata``): ``"input.tenant_id"``; a constant
    such as ``"'all'"`` makes one limit for all. A workflow's
    ``on_limit`` says what a run beyond the limit does: ``"queue"`` (by
    priority), ``"cancel_newest"`` or ``"cancel_in_progress"``."""

    key: str
    limit: int
    on_limit: str = "queue"

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError("Concurrency(key=...) is a CEL expression such as \"input.tenant_id\"")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"Concurrency(limit=...) is a whole number of 1 or more, not {self.limit!r}")
        if self.on_limit not in _ON_LIMIT:
            raise ValueError(f"Concurrency(on_limit=...) is one of {', '.join(_ON_LIMIT)}, not {self.on_limit!r}")

    def workflow_manifest(self) -> dict:
        return {"key": self.key, "limit": self.limit, "on_limit": self.on_limit}

    def step_manifest(self, step: str) -> dict:
        if self.on_limit != "queue":
            raise ValueError(f"step `{step}`: a step's attempts beyond its concurrency limit wait; on_limit is for workflows")
        return {"key": self.key, "limit": self.limit}


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` attempts of the steps sharing ``key`` start in any
    window of ``per`` (seconds, or ``"1s"``, ``"1m"``), across every worker.
    ``key`` is a CEL expression over the step's ``input``; ``"'openai'"``
    is one limit for every step naming it."""

    key: str
    limit: int
    per: Union[str, float]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError("RateLimit(key=...) is a CEL expression such as \"'openai'\"")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"RateLimit(limit=...) is a whole number of 1 or more, not {self.limit!r}")
        if duration_ms(self.per, "RateLimit(per=...)") < 1:
            raise ValueError("RateLimit(per=...) is a window of at least 1ms")

    def manifest(self) -> dict:
        return {"key": self.key, "limit": self.limit, "per_ms": duration_ms(self.per, "RateLimit(per=...)")}


@dataclass(frozen=True)
class Schedule:
    """Starts the workflow on time, once per fire across workers: on a
    ``cron`` spec (five fields, read in ``tz``, an IANA zone such as
    ``"Europe/Berlin"``; UTC without it) or ``every`` interval (seconds, or
    ``"1h"``). ``overlap`` says what a fire does while the previous fire's
    run is live (``"skip"``, ``"buffer-one"``, ``"allow-all"``); fires
    missed while no worker ran are still run within ``catchup_window`` (a
    year by default). ``input`` is every fire's input (JSON)."""

    cron: Optional[str] = None
    tz: Optional[str] = None
    every: Union[str, float, None] = None
    overlap: Optional[str] = None
    catchup_window: Union[str, float, None] = None
    input: Any = _NO_INPUT

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise ValueError("a Schedule has a cron spec or an every interval: give one of them")
        if self.tz is not None and self.cron is None:
            raise ValueError("Schedule(tz=...) is the zone a cron spec is read in; give cron=...")
        if self.overlap is not None and self.overlap not in _OVERLAP:
            raise ValueError(f"Schedule(overlap=...) is one of {', '.join(_OVERLAP)}, not {self.overlap!r}")
        self.manifest()

    def manifest(self) -> dict:
        return {
            "cron": self.cron,
            "tz": self.tz,
            "every_ms": optional_ms(self.every, "Schedule(every=...)"),
            "overlap": self.overlap,
            "catchup_window_ms": optional_ms(self.catchup_window, "Schedule(catchup_window=...)"),
            "input": None if self.input is _NO_INPUT else json.dumps(self.input),
        }
