"""Start keel workflow runs, follow them and their streams, resume their
hooks and wait for their replies."""

from .client import Answer, AsyncKeel, RunEvent, RunHandle
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
    "Answer",
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
