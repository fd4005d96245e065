// keel's MCP endpoint driven by the official TypeScript MCP SDK
// (@modelcontextprotocol/sdk, on a protocol version with sessions) against
// a real `keel serve`: scripts/mcp.sh starts it and sets KEEL_URL and
// KEEL_TOKEN.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const URL_ = process.env.KEEL_URL;
const TOKEN = process.env.KEEL_TOKEN;

// A client connected to keel's endpoint with `token` (none: no header).
async function connect(token = TOKEN) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(`${URL_}/mcp`), {
    requestInit: { headers },
  });
  const client = new Client({ name: "keel-mcp-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

async function api(method, path, body) {
  const response = await fetch(`${URL_}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.ok(response.ok, `${method} ${path}: ${response.status}`);
  return response.json();
}

const runOf = (result) => result.structuredContent.run;

test("the tools are the deployed workflows, with their schemas", async () => {
  const client = await connect();
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  assert.ok(byName["keel-resume-hook"] && byName["keel-await-run"]);
  assert.match(byName.chat.description, /^Holds the conversation/);
  assert.deepEqual(Object.keys(byName.chat.inputSchema.properties).sort(), ["conversation", "model_url"]);
  assert.equal(byName.ten_steps.inputSchema.properties.input.type, "integer");
  await client.close();
});

test("a call answers with the output; a streaming one sends its chunks as progress, in order", async () => {
  const client = await connect();
  const done = await client.callTool({ name: "ten_steps", arguments: { input: 5 } });
  assert.equal(done.isError, false);
  assert.equal(runOf(done).output, 10); // 0 + 1 + 2 + 3 + 4

  // StreamPlan has no schema: the input is the argument `input`.

  const progress = [];
  const streamed = await client.callTool({ name: "streamer", arguments: { input: { count: 4 } } }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  assert.equal(runOf(streamed).status, "completed");
  const chunks = progress.map((p) => JSON.parse(p.message));
  assert.deepEqual(chunks.map((c) => c.index), [0, 1, 2, 3, 4]);
  assert.deepEqual(chunks.slice(0, 4).map((c) => c.value.i), [0, 1, 2, 3]);
  assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3, 4, 5]);
  await client.close();
});

test("a waiting run is answered through the resume tool and read as a resource", async () => {
  const client = await connect();
  const token = `mcp-ts:${randomUUID()}`;
  const waiting = await client.callTool({ name: "replier", arguments: { input: token } });
  assert.equal(runOf(waiting).status, "waiting");
  assert.deepEqual(waiting.structuredContent.hooks.map((h) => h.token), [token]);
  const answered = await client.callTool({ name: "keel-resume-hook", arguments: { token, payload: "stop" } });
  assert.deepEqual(runOf(answered).reply, { echo: "stop", n: 1 });
  const done = await client.callTool({ name: "keel-await-run", arguments: { run_id: runOf(waiting).run_id } });
  assert.equal(runOf(done).output, 1);
  const read = await client.readResource({ uri: `keel://runs/${runOf(waiting).run_id}` });
  assert.equal(JSON.parse(read.contents[0].text).run.status, "completed");
  await client.close();
});

test("a subscriber hears a run change to its end", { timeout: 30_000 }, async () => {
  const client = await connect();
  const token = `mcp-ts:${randomUUID()}`;
  const waiting = await client.callTool({ name: "replier", arguments: { input: token } });
  const uri = `keel://runs/${runOf(waiting).run_id}`;
  let heard = 0;
  let completed;
  const done = new Promise((resolve) => (completed = resolve));
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, async (n) => {
    assert.equal(n.params.uri, uri);
    heard += 1;
    const read = await client.readResource({ uri });
    if (JSON.parse(read.contents[0].text).run.status === "completed") completed();
  });
  await client.subscribeResource({ uri });
  await client.callTool({ name: "keel-resume-hook", arguments: { token, payload: "stop" } });
  await done; // node:test's own timeout bounds the wait
  assert.ok(heard >= 1);
  await client.unsubscribeResource({ uri });
  await client.close();
});

test("a call retried with its key starts one run", async () => {
  const client = await connect();
  const _meta = { "keel/idempotency_key": randomUUID() };
  const first = await client.callTool({ name: "ten_steps", arguments: { input: 8 }, _meta });
  const again = await client.callTool({ name: "ten_steps", arguments: { input: 8 }, _meta });
  assert.equal(runOf(first).run_id, runOf(again).run_id);
  const { runs } = await api("GET", "/v1/runs?workflow=ten_steps&limit=500");
  assert.equal(runs.filter((r) => r.run_id === runOf(first).run_id).length, 1);
  await client.close();
});

test("an unauthenticated client and a token outside its scope are refused", async () => {
  await assert.rejects(connect(null), /401|nauthorized/);
  const { token } = await api("POST", "/v1/tokens", {
    scope: { kind: "read_run", run_id: "no-such-run" },
  });
  const client = await connect(token);
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name), ["keel-await-run"]);
  await assert.rejects(
    client.callTool({ name: "ten_steps", arguments: { input: 1 } }),
    /outside its scope/,
  );
  await client.close();
});
