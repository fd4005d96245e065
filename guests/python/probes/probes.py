"""Python workflows that probe the deterministic sandbox: what they read
of the clock, randomness and hashing must come from the journal or the
run ID, and their I/O must fail the run as a Rust workflow's does."""

import os
import random
import socket
import time

import keel


@keel.step
async def noop(n: int) -> int:
    return n


def _draws() -> list:
    return [time.time_ns() // 1_000_000, random.random(), os.urandom(8).hex(), hash("keel")]


@keel.workflow
async def clock_random() -> dict:
    """Reads the clock, randomness and a string hash around a step."""
    before = _draws()
    step = await noop(7)
    after = _draws()
    meta = keel.workflow_metadata()
    return {
        "before": before,
        "after": after,
        "step": step,
        "run_id": meta.run_id,
        "started_at_ms": int(meta.started_at.timestamp() * 1000),
    }


@keel.workflow
async def read_file(path: str) -> str:
    """Reads a file from the workflow (only steps may)."""
    with open(path) as f:
        return f.read()


@keel.workflow
async def open_socket(port: int) -> str:
    """Connects a socket from the workflow (only steps may)."""
    with socket.create_connection(("127.0.0.1", port), timeout=1):
        return "connected"


@keel.workflow
async def http_in_workflow(url: str) -> int:
    """Sends an HTTP request from the workflow (only steps may)."""
    return (await keel.http.get(url)).status


@keel.workflow
async def sleep_on_clock(seconds: float) -> str:
    """Sleeps on the machine's clock (a workflow must use keel.sleep)."""
    time.sleep(seconds)
    return "slept"


@keel.workflow
async def ten_steps(n: int) -> int:
    """`n` trivial steps in sequence: the W10 benchmark's workflow."""
    total = 0
    for i in range(n):
        total += await noop(i)
    return total


@keel.workflow
async def countdown(n: int) -> int:
    """Counts down from `n`, a step and a new run per number
    (continue_as_new); returns the number it reached, 0."""
    if n > 0:
        await noop(n)
        keel.continue_as_new(n - 1)
    return n


@keel.workflow
async def tagged(tenant: str) -> dict:
    """Logs, sets an attribute, writes and closes a stream and asks for a
    patch: the journaled calls besides steps, timers and hooks."""
    keel.log(f"tagging {tenant}", level="warn")
    keel.set_attribute("tenant", tenant)
    keel.set_query("tenant", {"name": tenant, "stage": "tagging"})
    for i in range(3):
        keel.stream_write("progress", {"i": i})
    keel.stream_close("progress")
    await noop(1)
    keel.set_query("stage", "tagged")
    return {"patched": keel.patched("v2"), "workflow": keel.workflow_metadata().workflow_name}
