"""The errors a workflow or step raises or catches."""

from __future__ import annotations

from typing import Optional

__all__ = [
    "Cancelled",
    "FatalError",
    "HookConflict",
    "HookForceClaimed",
    "KeelError",
    "PayloadError",
    "RetryableError",
    "StartRefused",
    "StepFailed",
]


class KeelError(Exception):
    """Base of keel's errors."""


class FatalError(KeelError):
    """Raised by a step: it fails at once, without retries."""


class RetryableError(KeelError):
    """Raised by a step: retried under its policy, no sooner than
    ``retry_after`` seconds (when given). Any other exception a step raises
    is retryable too."""

    def __init__(self, message: str, retry_after: Optional[float] = None):
        super().__init__(message)
        self.retry_after = retry_after


class StepFailed(KeelError):
    """Raised in a workflow by a step that failed for good: a fatal error,
    or its retries exhausted."""

    def __init__(self, step_name: str, step_id: str, message: str, fatal: bool, attempts: int):
        how = "failed" if fatal else f"failed after {attempts} attempts"
        super().__init__(f"step `{step_name}` ({step_id}) {how}: {message}")
        self.step_name = step_name
        self.step_id = step_id
        self.message = message
        self.fatal = fatal
        self.attempts = attempts


class Cancelled(KeelError):
    """The run was cancelled (``by`` is ``api``, ``cli``, ``parent RUN_ID``
    or ``deadline``). Catch it to clean up inside :func:`keel.shield`."""

    def __init__(self, reason: str, by: str):
        super().__init__(f"the run was cancelled by {by}: {reason}")
        self.reason = reason
        self.by = by


class HookConflict(KeelError):
    """Another run holds the token."""

    def __init__(self, token: str, conflicting_run_id: str):
        super().__init__(f"the hook token `{token}` is held by run {conflicting_run_id}")
        self.token = token
        self.conflicting_run_id = conflicting_run_id


class HookForceClaimed(KeelError):
    """Another run took this hook's token over with ``force``."""

    def __init__(self, token: str, claimed_by_run_id: str):
        super().__init__(f"the hook token `{token}` was taken over by run {claimed_by_run_id}")
        self.token = token
        self.claimed_by_run_id = claimed_by_run_id


class StartRefused(KeelError):
    """Starting a run was refused."""


class PayloadError(KeelError):
    """A value does not fit its type (a step's output, a hook's payload)."""
