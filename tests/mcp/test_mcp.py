"""keel's MCP endpoint driven by the official Python MCP SDK (`mcp` from
PyPI) against a real `keel serve`: scripts/mcp.sh starts it with the
testbed and the chat agent deployed, and sets KEEL_URL, KEEL_TOKEN and
MODEL_URL."""

import asyncio
import contextlib
import json
import os
import unittest
import urllib.error
import urllib.request
import uuid

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["KEEL_URL"]
TOKEN = os.environ["KEEL_TOKEN"]
MODEL_URL = os.environ["MODEL_URL"]


@contextlib.asynccontextmanager
async def client(token=TOKEN):
    """An MCP client of keel's endpoint, sending `token` (none: no header)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    timeout = httpx2.Timeout(60.0, read=120.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with Client(streamable_http_client(f"{URL}/mcp", http_client=http)) as c:
            yield c


def api(method, path, body=None):
    """A call of keel's HTTP API with the server's token."""
    request = urllib.request.Request(
        f"{URL}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read())


def run_of(result):
    """The run a tool call answered with."""
    assert result.structured_content is not None, result
    return result.structured_content["run"]


class Progress:
    """The progress notifications of one call, as keel sends them."""

    def __init__(self):
        self.received = []

    async def __call__(self, progress, total, message):
        self.received.append((progress, json.loads(message)))


class McpTest(unittest.IsolatedAsyncioTestCase):
    async def test_tools_are_the_deployed_workflows_with_their_schemas(self):
        async with client() as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
        self.assertIn("keel-resume-hook", tools)
        self.assertIn("keel-await-run", tools)
        chat = tools["chat"]
        # The workflow's doc comment, and its input type's schema.
        self.assertTrue(chat.description.startswith("Holds the conversation"), chat.description)
        self.assertEqual(set(chat.input_schema["properties"]), {"conversation", "model_url"})
        # A number is not an object: it is the argument `input`.
        self.assertEqual(tools["ten_steps"].input_schema["properties"]["input"]["type"], "integer")
        self.assertEqual(set(tools["keel-resume-hook"].input_schema["required"]), {"token"})

    async def test_a_call_answers_with_the_output(self):
        async with client() as c:
            result = await c.call_tool("ten_steps", {"input": 3})
        self.assertFalse(result.is_error, result)
        run = run_of(result)
        self.assertEqual((run["status"], run["output"]), ("completed", 3))
        self.assertIn("completed with output: 3", result.content[0].text)

    async def test_a_streaming_run_sends_its_chunks_as_progress_in_order(self):
        progress = Progress()
        async with client() as c:
            # StreamPlan has no schema: the input is the argument `input`.
            result = await c.call_tool("streamer", {"input": {"count": 5}}, progress_callback=progress)
        self.assertEqual(run_of(result)["status"], "completed")
        steps = [p for p, _ in progress.received]
        self.assertEqual(steps, sorted(steps))
        chunks = [m for _, m in progress.received]
        self.assertEqual([(m["stream"], m["index"]) for m in chunks], [("progress", i) for i in range(6)])
        self.assertEqual([m.get("value") for m in chunks[:5]], [{"i": i} for i in range(5)])
        self.assertEqual(chunks[5]["kind"], "closed")

    async def test_a_run_waiting_on_a_hook_is_answered_through_the_resume_tool(self):
        token = f"mcp-py:{uuid.uuid4()}"
        async with client() as c:
            waiting = await c.call_tool("replier", {"input": token})
            run = run_of(waiting)
            self.assertEqual(run["status"], "waiting")
            self.assertEqual([h["token"] for h in waiting.structured_content["hooks"]], [token])
            self.assertIn("keel-resume-hook", waiting.content[0].text)
            answered = await c.call_tool("keel-resume-hook", {"token": token, "payload": "hi"})
            self.assertEqual(run_of(answered)["reply"], {"echo": "hi", "n": 1})
            stopped = await c.call_tool("keel-resume-hook", {"token": token, "payload": "stop"})
            self.assertEqual(run_of(stopped)["reply"], {"echo": "stop", "n": 2})
            done = await c.call_tool("keel-await-run", {"run_id": run["run_id"]})
            self.assertEqual((run_of(done)["status"], run_of(done)["output"]), ("completed", 2))
            # The run as a resource.
            read = await c.read_resource(f"keel://runs/{run['run_id']}")
        detail = json.loads(read.contents[0].text)
        self.assertEqual(detail["run"]["status"], "completed")
        self.assertEqual(detail["run"]["output"], 2)
        self.assertTrue(any(row["kind"] == "hook" for row in detail["timeline"]), detail["timeline"])

    async def test_a_listener_hears_a_run_change_until_it_ends(self):
        token = f"mcp-py:{uuid.uuid4()}"
        async with client() as c:
            waiting = await c.call_tool("replier", {"input": token})
            uri = f"keel://runs/{run_of(waiting)['run_id']}"
            async with c.listen(resource_subscriptions=[uri]) as changes:
                self.assertEqual(changes.honored.resource_subscriptions, [uri])
                await c.call_tool("keel-resume-hook", {"token": token, "payload": "stop"})
                # The server closes the stream once the run has ended.
                heard = await asyncio.wait_for(self._uris(changes), timeout=30)
            self.assertGreater(len(heard), 0)
            self.assertEqual(set(heard), {uri})
            read = await c.read_resource(uri)
        self.assertEqual(json.loads(read.contents[0].text)["run"]["status"], "completed")

    @staticmethod
    async def _uris(changes):
        return [event.uri async for event in changes]

    async def test_a_call_retried_with_its_key_starts_one_run(self):
        key = str(uuid.uuid4())
        meta = {"keel/idempotency_key": key}
        async with client() as c:
            first = await c.call_tool("ten_steps", {"input": 7}, meta=meta)
            again = await c.call_tool("ten_steps", {"input": 7}, meta=meta)
            other = await c.call_tool("ten_steps", {"input": 7})
        self.assertEqual(run_of(first)["run_id"], run_of(again)["run_id"])
        self.assertNotEqual(run_of(first)["run_id"], run_of(other)["run_id"])
        runs = api("GET", "/v1/runs?workflow=ten_steps&limit=500")["runs"]
        self.assertEqual(sum(r["run_id"] == run_of(first)["run_id"] for r in runs), 1)

    async def test_input_that_does_not_fit_names_the_place(self):
        async with client() as c:
            result = await c.call_tool("chat", {"conversation": 5, "model_url": MODEL_URL})
        self.assertTrue(result.is_error)
        error = result.structured_content["error"]
        self.assertEqual(error["kind"], "invalid_input")
        self.assertEqual([p["path"] for p in error["problems"]], ["/conversation"])
        self.assertIn("/conversation", result.content[0].text)
        self.assertNotIn("/tmp", result.content[0].text)

    async def test_a_hook_held_by_another_run_is_named(self):
        token = f"mcp-py:{uuid.uuid4()}"
        async with client() as c:
            first = await c.call_tool("replier", {"input": token})
            second = await c.call_tool("replier", {"input": token})
            await c.call_tool("keel-resume-hook", {"token": token, "payload": "stop"})
        # The second run's hook conflicts: it fails naming the holder.
        self.assertTrue(second.is_error, second)
        self.assertIn(run_of(first)["run_id"], second.content[0].text)

    async def test_an_unauthenticated_client_is_refused(self):
        with self.assertRaises(Exception):
            async with client(token=None) as c:
                await c.list_tools()
        # What the client was told: 401, naming the token.
        request = urllib.request.Request(
            f"{URL}/mcp",
            method="POST",
            data=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
        )
        with self.assertRaises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request)
        self.assertEqual(refused.exception.code, 401)
        self.assertIn("API token", json.loads(refused.exception.read())["error"]["message"])

    async def test_a_scoped_token_reaches_its_scope_alone(self):
        scoped = api("POST", "/v1/tokens", {"scope": {"kind": "start_workflow", "workflow": "ten_steps"}})["token"]
        async with client(token=scoped) as c:
            tools = [t.name for t in (await c.list_tools()).tools]
            self.assertEqual(tools, ["ten_steps"])
            result = await c.call_tool("ten_steps", {"input": 3})
            self.assertEqual(run_of(result)["output"], 3)
            with self.assertRaises(MCPError) as refused:
                await c.call_tool("streamer", {"count": 1})
            self.assertIn("outside its scope", str(refused.exception))
            with self.assertRaises(MCPError):
                await c.read_resource(f"keel://runs/{run_of(result)['run_id']}")

    async def test_the_chat_agent_is_driven_end_to_end(self):
        conversation = f"mcp-{uuid.uuid4().hex[:8]}"
        async with client() as c:
            started = await c.call_tool("chat", {"conversation": conversation, "model_url": MODEL_URL})
            run = run_of(started)
            self.assertEqual(run["status"], "waiting")
            hooks = {h["token"]: h for h in started.structured_content["hooks"]}
            self.assertEqual(set(hooks), {f"chat:{conversation}", f"approve:{conversation}"})
            self.assertEqual(hooks[f"approve:{conversation}"]["payload_schema"]["properties"]["approved"]["type"], "boolean")

            progress = Progress()
            asked = await c.call_tool(
                "keel-resume-hook",
                {"token": f"chat:{conversation}", "payload": "please refund order A-17"},
                progress_callback=progress,
            )
            reply = run_of(asked)["reply"]
            self.assertEqual(reply["awaiting_approval"]["name"], "refund")
            # The answer's tokens came as they were written, in order.
            tokens = [m for _, m in progress.received if m["stream"] == "tokens" and m["kind"] == "data"]
            self.assertGreater(len(tokens), 1)
            self.assertEqual("".join(m["value"]["token"] for m in tokens), reply["answer"])

            approved = await c.call_tool(
                "keel-resume-hook", {"token": f"approve:{conversation}", "payload": {"approved": True}}
            )
            self.assertTrue(run_of(approved)["reply"].startswith("refunded as "), run_of(approved))
            bye = await c.call_tool("keel-resume-hook", {"token": f"chat:{conversation}", "payload": "bye"})
            self.assertEqual(run_of(bye)["reply"]["answer"], "Goodbye.")
            done = await c.call_tool("keel-await-run", {"run_id": run["run_id"]})
        messages = run_of(done)["output"]
        self.assertEqual([m["role"] for m in messages], ["user", "assistant", "tool"])


if __name__ == "__main__":
    unittest.main()
