"""The host's imports, as componentize-py generates them: available only
inside a component, so imported on first use."""

from __future__ import annotations

from typing import Any


def workflow() -> Any:
    from wit_world.imports import workflow_context

    return workflow_context


def step() -> Any:
    from wit_world.imports import step_context

    return step_context


def types() -> Any:
    from wit_world.imports import keel_workflow_types

    return keel_workflow_types
