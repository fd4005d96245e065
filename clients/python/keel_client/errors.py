"""The errors a keel server answers with, as exceptions by kind."""

from __future__ import annotations

from typing import Any

from .models import Problem, RunView

__all__ = [
    "HookConflict",
    "IdempotencyCollision",
    "InvalidInput",
    "KeelError",
    "NotFound",
    "RunExists",
    "RunFailed",
    "StartOutcomeUnknown",
    "Unauthorized",
    "error_of",
]


class KeelError(Exception):
    """An error the server answered with: its `kind` (stable, snake case:
    `run_not_found`, `hook_conflict`, ...), message, HTTP `status` (0 when no
    answer came) and the `ids` it names (`run_id`, `token`, ...)."""

    def __init__(
        self, kind: str, message: str, status: int, ids: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.ids = ids or {}


class HookConflict(KeelError):
    """The start hook token is held by another run."""

    @property
    def token(self) -> str | None:
        return self.ids.get("token")

    @property
    def conflicting_run_id(self) -> str | None:
        return self.ids.get("conflicting_run_id")


class IdempotencyCollision(KeelError):
    """The workflow's idempotency key admitted another run already."""

    @property
    def existing_run_id(self) -> str | None:
        return self.ids.get("existing_run_id")

    @property
    def key(self) -> str | None:
        return self.ids.get("key")


class InvalidInput(KeelError):
    """The input or payload does not fit its schema at `problems`' paths."""

    def __init__(
        self,
        kind: str,
        message: str,
        status: int,
        ids: dict[str, str],
        problems: list[Problem],
    ) -> None:
        super().__init__(kind, message, status, ids)
        self.problems = problems

    @property
    def paths(self) -> list[str]:
        """The JSON pointers of the places that do not fit."""
        return [p["path"] for p in self.problems]


class RunExists(KeelError):
    """A run of that ID exists already (a run ID the caller chose twice)."""


class NotFound(KeelError):
    """No such run, hook, workflow, deployment or webhook."""


class Unauthorized(KeelError):
    """The token is missing, wrong or expired (401), or out of its scope
    (403)."""


class RunFailed(KeelError):
    """The run ended without completing: `run` says how."""

    def __init__(self, run: RunView) -> None:
        error = run.get("error") or {}
        super().__init__(
            error.get("kind", run["status"]),
            error.get("message", f"run {run['run_id']} ended {run['status']}"),
            0,
            {"run_id": run["run_id"]},
        )
        self.run = run


class StartOutcomeUnknown(KeelError):
    """No answer came for a start after every retry: the run may or may not
    exist. Look it up by `run_id`, or start again with the same run ID,
    which is safe."""

    def __init__(self, run_id: str, cause: BaseException | None) -> None:
        super().__init__(
            "start_outcome_unknown",
            f"no answer to the start of run {run_id} ({cause}); look it up, or start again with the same run ID",
            0,
            {"run_id": run_id},
        )
        self.run_id = run_id
        self.__cause__ = cause


_BY_KIND: dict[str, type[KeelError]] = {
    "hook_conflict": HookConflict,
    "idempotency_collision": IdempotencyCollision,
    "run_exists": RunExists,
    "unauthorized": Unauthorized,
    "forbidden": Unauthorized,
}


def error_of(status: int, body: Any) -> KeelError:
    """The exception for an error answer with `status` and `body`."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict):
        return KeelError("internal", f"the server answered {status} without an error body", status)
    kind, message = detail.get("kind", "internal"), detail.get("message", "")
    ids = detail.get("ids") or {}
    if kind == "invalid_input":
        return InvalidInput(kind, message, status, ids, detail.get("problems") or [])
    cls = _BY_KIND.get(kind, NotFound if status == 404 else KeelError)
    return cls(kind, message, status, ids)
