"""The client against a real `keel serve` (KEEL_URL), with the testbed and
order-hooks guests deployed: scripts/clients.sh starts one and runs these."""

import asyncio
import os
import unittest
import uuid

import httpx

from keel_client import (
    AsyncKeel,
    HookConflict,
    IdempotencyCollision,
    InvalidInput,
    KeelError,
    RunExists,
    RunFailed,
    Unauthorized,
)

URL = os.environ.get("KEEL_URL")
if not URL:
    raise RuntimeError("KEEL_URL names the keel server to test against (scripts/clients.sh sets it)")


def unique() -> str:
    return uuid.uuid4().hex[:8]


class LosingTransport(httpx.AsyncBaseTransport):
    """Sends every request to the server, but loses the server's answer to
    the first start: the run was admitted, the client never hears so."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.lost = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.lost == 0 and request.method == "POST" and request.url.path.endswith("/runs"):
            self.lost += 1
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("the connection was cut before the answer", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class CutStream(httpx.AsyncByteStream):
    """The body of a stream, broken off after its first event."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response

    async def __aiter__(self):
        text = b""
        async for data in self.response.aiter_raw():
            text += data
            end = text.find(b"\n\n")
            if end >= 0:
                yield text[: end + 2]
                raise httpx.ReadError("the connection broke mid-stream")

    async def aclose(self) -> None:
        await self.response.aclose()


class CuttingTransport(httpx.AsyncBaseTransport):
    """Sends every request to the server, but breaks the first stream it
    reads right after its first event."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.cut = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if self.cut == 0 and "/streams/" in request.url.path:
            self.cut += 1
            return httpx.Response(response.status_code, headers=response.headers, stream=CutStream(response))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class ClientTest(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.keel = AsyncKeel(URL)

    async def asyncTearDown(self) -> None:
        await self.keel.aclose()

    async def waiting_order(self, **options):
        order = f"py-{unique()}"
        run = await self.keel.start(
            "order_updates",
            {"order_id": order, "note": "placed"},
            wait_ms=10_000,
            return_on_wait=True,
            **options,
        )
        return order, run

    async def test_a_run_started_with_its_input_completes_with_its_output(self):
        run = await self.keel.start("ten_steps", 3)
        self.assertEqual(await run.result(), 3)
        got = await run.get()
        self.assertEqual((got["status"], got["run_id"]), ("completed", run.id))

    async def test_a_start_token_held_by_a_live_run_is_refused_naming_that_run(self):
        token = f"order:py-{unique()}"
        input = {"order_id": token[6:], "note": "placed"}
        first = await self.keel.start(
            "order_updates", input, token=token, wait_ms=10_000, return_on_wait=True
        )
        with self.assertRaises(HookConflict) as refused:
            await self.keel.start("order_updates", input, token=token)
        self.assertEqual(refused.exception.conflicting_run_id, first.id)
        self.assertEqual(refused.exception.token, token)
        await first.cancel(force=True)

    async def test_a_second_start_of_one_idempotency_key_names_the_first_run(self):
        key = unique()
        first = await self.keel.start("idempotent_task", {"id": key})
        with self.assertRaises(IdempotencyCollision) as refused:
            await self.keel.start("idempotent_task", {"id": key})
        self.assertEqual(refused.exception.existing_run_id, first.id)

    async def test_input_that_does_not_fit_is_refused_with_its_paths(self):
        with self.assertRaises(InvalidInput) as refused:
            await self.keel.start("ten_steps", "ten")
        self.assertEqual(refused.exception.paths, ["/"])
        order, run = await self.waiting_order()
        with self.assertRaises(InvalidInput) as refused:
            await self.keel.resume(f"order:{order}", {"note": 5})
        self.assertEqual(refused.exception.paths, ["/note"])
        await run.cancel(force=True)

    async def test_a_run_id_chosen_twice_is_refused_as_existing(self):
        run_id = f"py-{unique()}"
        await self.keel.start("ten_steps", 1, run_id=run_id)
        with self.assertRaises(RunExists):
            await self.keel.start("ten_steps", 1, run_id=run_id)

    async def test_hooks_resume_a_waiting_run_and_its_events_follow_it(self):
        order, run = await self.waiting_order()
        seen = []

        async def follow():
            async for event in run.events():
                seen.append(event.entry["kind"] if event.kind == "entry" else f"run:{event.run['status']}")

        following = asyncio.create_task(follow())
        await self.keel.resume(f"order:{order}", {"note": "paid", "done": False}, payload_id="p-1")
        # A retry with the payload ID is not delivered again.
        await self.keel.resume(f"order:{order}", {"note": "paid", "done": False}, payload_id="p-1")
        await self.keel.resume(f"order:{order}", {"note": "sent", "done": True})
        self.assertEqual(await run.result(), ["placed", "paid", "sent"])
        await following
        self.assertEqual(seen[0], "run_started")
        self.assertEqual(seen.count("hook_received"), 2, seen)
        self.assertEqual(seen.count("run_completed"), 1, seen)

    async def test_a_paused_run_takes_no_payload_until_it_is_resumed(self):
        order, run = await self.waiting_order()
        paused = await run.pause()
        self.assertEqual((paused["status"], paused["paused"]["by"]), ("paused", "api"))
        await self.keel.resume(f"order:{order}", {"note": "sent", "done": True})
        self.assertEqual((await run.get())["status"], "paused", "the payload queues")
        await run.resume()
        self.assertEqual(await run.result(), ["placed", "sent"])

    async def test_a_runs_queries_read_its_state_and_a_name_it_never_set_is_refused(self):
        token = f"total:py-{uuid.uuid4()}"
        run = await self.keel.start("running_total", token, wait_ms=10_000, return_on_wait=True)
        self.assertEqual((await run.queries())["queries"], {"count": 0, "total": 0})
        await self.keel.resume(token, 5)
        await self.keel.resume(token, 0)
        self.assertEqual(await run.result(), 5)
        queries = await run.queries()
        self.assertEqual(queries["queries"], {"count": 1, "total": 5})
        self.assertGreater(queries["position"], 0)
        self.assertEqual(await run.query("total"), 5)
        with self.assertRaises(KeelError) as refused:
            await run.query("balance")
        self.assertEqual(refused.exception.kind, "query_not_found")

    async def test_an_ended_run_restarts_and_a_fork_starts_with_its_own_ids(self):
        run = await self.keel.start("two_steps", 5, wait_ms=10_000)
        self.assertEqual(await run.result(), [6, 10])
        restarted = await run.restart(from_step="mul")
        self.assertEqual(restarted["status"], "completed")
        fork = await run.fork(at=1, input=6)
        self.assertNotEqual(fork.id, run.id)
        self.assertEqual(await fork.result(), [7, 12])
        self.assertEqual((await fork.get())["attributes"]["forked_from"], run.id)

    async def test_a_run_that_ends_without_completing_is_a_run_failed(self):
        _, run = await self.waiting_order()
        await run.cancel(force=True)
        with self.assertRaises(RunFailed) as failed:
            await run.result()
        self.assertEqual(failed.exception.run["status"], "cancelled")

    async def test_a_start_whose_answer_is_lost_is_retried_into_exactly_one_run(self):
        transport = LosingTransport()
        tag = unique()
        async with AsyncKeel(URL, transport=transport, retry_delay_s=0.01) as client:
            run = await client.start("ten_steps", 2, attributes={"tag": tag})
        self.assertEqual(transport.lost, 1, "the first answer was lost")
        self.assertEqual(await self.keel.run(run.id).result(), 1)
        listed = await self.keel.request("GET", "/v1/runs", params={"attr": f"tag={tag}"})
        self.assertEqual([r["run_id"] for r in listed["runs"]], [run.id])

    async def test_a_stream_is_read_as_written_each_chunk_once_across_a_broken_connection(self):
        token = f"go:py-{unique()}"
        run = await self.keel.start(
            "streamer", {"count": 5, "pause_at": 2, "token": token}, wait_ms=10_000, return_on_wait=True
        )
        self.assertEqual(run.started["status"], "waiting", "it paused on its hook after two chunks")
        transport = CuttingTransport()
        seen = []
        async with AsyncKeel(URL, transport=transport, retry_delay_s=0.01) as client:
            async for chunk in client.run(run.id).stream("progress"):
                seen.append(chunk)
                if chunk["index"] == 1:
                    # The rest is written only now, while the reader follows.
                    await self.keel.resume(token, "go")
        self.assertEqual(transport.cut, 1, "the first connection broke after its first chunk")
        self.assertEqual([c["index"] for c in seen], [0, 1, 2, 3, 4, 5])
        self.assertEqual([c["value"] for c in seen[:5]], [{"i": i} for i in range(5)])
        self.assertEqual(seen[5]["kind"], "closed")
        self.assertEqual(await run.result(), 5)
        [stream] = await run.streams()
        self.assertEqual((stream["name"], stream["closed"]), ("progress", True))
        tail = [c["index"] async for c in run.stream("progress", start=4)]
        self.assertEqual(tail, [4, 5])

    async def test_a_hook_answers_a_request_with_the_reply_each_payload_id_delivered_once(self):
        token = f"ask:py-{unique()}"
        run = await self.keel.start("replier", token, wait_ms=10_000, return_on_wait=True)
        first = await self.keel.ask(token, {"q": "weather?"}, wait_ms=10_000)
        self.assertEqual(first.reply, {"echo": {"q": "weather?"}, "n": 1})
        self.assertEqual(first.run["run_id"], run.id)
        again = await self.keel.ask(token, {"q": "weather?"}, payload_id=first.payload_id, wait_ms=10_000)
        self.assertEqual(again.reply, first.reply, "a retry of the same payload ID is answered, not delivered again")
        later = await self.keel.reply(token, first.payload_id)
        self.assertEqual((later["reply"], later["run_id"]), (first.reply, run.id))
        stop = await self.keel.ask(token, "stop", wait_ms=10_000)
        self.assertEqual(stop.reply, {"echo": "stop", "n": 2})
        self.assertEqual(await run.result(), 2)

    async def test_a_scoped_token_reads_its_run_and_nothing_else(self):
        run = await self.keel.start("ten_steps", 1)
        await run.result()
        minted = await self.keel.create_token({"kind": "read_run", "run_id": run.id}, ttl_ms=60_000)
        async with AsyncKeel(URL, token=minted["token"]) as scoped:
            self.assertEqual((await scoped.run(run.id).get())["run_id"], run.id)
            with self.assertRaises(Unauthorized) as refused:
                await scoped.start("ten_steps", 1)
        self.assertEqual((refused.exception.kind, refused.exception.status), ("forbidden", 403))


if __name__ == "__main__":
    unittest.main()
