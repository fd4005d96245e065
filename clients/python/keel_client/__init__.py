"""Start keel workflow runs, follow them and resume their hooks."""

from .client import AsyncKeel, RunEvent, RunHandle
from .errors import (
    HookConflict,
    IdempotencyCollision,
    InvalidInput,
    KeelError,
    NotFound,
    RunExists,
    RunFailed,
    StartOutcomeUnknown,
    Unauthorized,
)

__all__ = [
    "AsyncKeel",
    "HookConflict",
    "IdempotencyCollision",
    "InvalidInput",
    "KeelError",
    "NotFound",
    "RunEvent",
    "RunExists",
    "RunFailed",
    "RunHandle",
    "StartOutcomeUnknown",
    "Unauthorized",
]
