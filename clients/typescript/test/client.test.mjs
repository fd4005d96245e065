// The client against a real `keel serve` (KEEL_URL), with the testbed and
// order-hooks guests deployed: scripts/clients.sh starts one and runs this.
import assert from "node:assert/strict";
import http from "node:http";
import { test } from "node:test";

import { HookConflict, IdempotencyCollision, InvalidInput, Keel, RunExists, RunFailed } from "../dist/index.js";

const url = process.env.KEEL_URL;
assert.ok(url, "KEEL_URL names the keel server to test against (scripts/clients.sh sets it)");
const keel = new Keel({ url });
const unique = () => crypto.randomUUID().slice(0, 8);

test("a run started with its input completes with its output", async () => {
  const run = await keel.start("ten_steps", 3);
  assert.equal(await run.result(), 3);
  const got = await run.get();
  assert.equal(got.status, "completed");
  assert.equal(got.run_id, run.id);
});

test("a start token held by a live run is refused, naming that run", async () => {
  const token = `order:ts-${unique()}`;
  const input = { order_id: token.slice(6), note: "placed" };
  const first = await keel.start("order_updates", input, { token, waitMs: 10_000, returnOnWait: true });
  await assert.rejects(keel.start("order_updates", input, { token }), (e) => {
    assert.ok(e instanceof HookConflict, `${e}`);
    assert.equal(e.conflictingRunId, first.id);
    assert.equal(e.token, token);
    return true;
  });
  await keel.run(first.id).cancel({ force: true });
});

test("a second start of one idempotency key names the first run", async () => {
  const id = unique();
  const first = await keel.start("idempotent_task", { id });
  await assert.rejects(keel.start("idempotent_task", { id }), (e) => {
    assert.ok(e instanceof IdempotencyCollision, `${e}`);
    assert.equal(e.existingRunId, first.id);
    return true;
  });
});

test("input that does not fit is refused with the paths that do not", async () => {
  await assert.rejects(keel.start("ten_steps", "ten"), (e) => {
    assert.ok(e instanceof InvalidInput, `${e}`);
    assert.deepEqual(e.paths, ["/"]);
    return true;
  });
  // A payload that does not fit the hook's type: likewise, nothing delivered.
  const order = `ts-${unique()}`;
  const run = await keel.start("order_updates", { order_id: order, note: "placed" }, {
    waitMs: 10_000,
    returnOnWait: true,
  });
  await assert.rejects(keel.hooks.resume(`order:${order}`, { note: 5 }), (e) => {
    assert.ok(e instanceof InvalidInput, `${e}`);
    assert.deepEqual(e.paths, ["/note"]);
    return true;
  });
  await run.cancel({ force: true });
});

test("a run ID chosen twice is refused as existing", async () => {
  const runId = `ts-${unique()}`;
  await keel.start("ten_steps", 1, { runId });
  await assert.rejects(keel.start("ten_steps", 1, { runId }), RunExists);
});

test("hooks resume a waiting run to its end, and its events follow it", async () => {
  const order = `ts-${unique()}`;
  const run = await keel.start("order_updates", { order_id: order, note: "placed" }, {
    token: `order:${order}`,
    waitMs: 10_000,
    returnOnWait: true,
  });
  const seen = [];
  const following = (async () => {
    for await (const event of run.events()) {
      seen.push(event.kind === "entry" ? event.entry.kind : `run:${event.run.status}`);
    }
  })();
  await keel.hooks.resume(`order:${order}`, { note: "paid", done: false }, { payloadId: "p-1" });
  // A retry of a delivery with its payload ID is not delivered again.
  await keel.hooks.resume(`order:${order}`, { note: "paid", done: false }, { payloadId: "p-1" });
  await keel.hooks.resume(`order:${order}`, { note: "sent", done: true });
  assert.deepEqual(await run.result(), ["placed", "paid", "sent"]);
  await following;
  assert.equal(seen[0], "run_started");
  assert.equal(seen.filter((k) => k === "hook_received").length, 2, seen.join(" "));
  assert.equal(seen.filter((k) => k === "run_completed").length, 1, seen.join(" "));
});

test("a paused run takes no payload until it is resumed", async () => {
  const order = `ts-${unique()}`;
  const run = await keel.start("order_updates", { order_id: order, note: "placed" }, {
    waitMs: 10_000,
    returnOnWait: true,
  });
  const paused = await run.pause();
  assert.equal(paused.status, "paused");
  assert.equal(paused.paused?.by, "api");
  await keel.hooks.resume(`order:${order}`, { note: "sent", done: true });
  assert.equal((await run.get()).status, "paused", "the payload queues");
  const resumed = await run.resume();
  assert.ok(["completed", "running"].includes(resumed.status), resumed.status);
  assert.deepEqual(await run.result(), ["placed", "sent"]);
});

test("a run's queries read its state, and a name it never set is refused", async () => {
  const token = `total:ts-${unique()}`;
  const run = await keel.start("running_total", token, { waitMs: 10_000, returnOnWait: true });
  assert.deepEqual((await run.queries()).queries, { count: 0, total: 0 });
  await keel.hooks.resume(token, 5);
  await keel.hooks.resume(token, 0);
  assert.equal(await run.result(), 5);
  const queries = await run.queries();
  assert.deepEqual(queries.queries, { count: 1, total: 5 });
  assert.ok(queries.position > 0);
  assert.equal(await run.query("total"), 5);
  await assert.rejects(run.query("balance"), (e) => e.kind === "query_not_found");
});

test("an ended run restarts from a step, and a fork starts from one with its own IDs", async () => {
  const run = await keel.start("two_steps", 5, { waitMs: 10_000 });
  assert.deepEqual(await run.result(), [6, 10]);
  const restarted = await run.restart({ fromStep: "mul" });
  assert.equal(restarted.status, "completed");
  const fork = await run.fork({ at: 1, input: 6 });
  assert.notEqual(fork.id, run.id);
  assert.deepEqual(await fork.result(), [7, 12]);
  assert.equal((await fork.get()).attributes?.forked_from, run.id);
});

test("a run that ends without completing is a RunFailed with the run", async () => {
  const order = `ts-${unique()}`;
  const waiting = await keel.start("order_updates", { order_id: order, note: "placed" }, {
    waitMs: 10_000,
    returnOnWait: true,
  });
  await waiting.cancel({ force: true });
  await assert.rejects(waiting.result(), (e) => {
    assert.ok(e instanceof RunFailed, `${e}`);
    assert.equal(e.run.status, "cancelled");
    return true;
  });
});

/**
 * A proxy to the server that, for the first start it forwards, lets the
 * server answer and then cuts the client's connection: the answer is lost
 * after the run was admitted.
 */
async function losingProxy() {
  let lost = 0;
  const target = new URL(url);
  const server = http.createServer((req, res) => {
    const forward = http.request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        if (lost === 0 && req.method === "POST" && req.url.includes("/runs")) {
          lost += 1;
          answer.resume();
          answer.on("end", () => req.socket.destroy());
          return;
        }
        res.writeHead(answer.statusCode, answer.headers);
        answer.pipe(res);
      },
    );
    req.pipe(forward);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close(), lost: () => lost };
}

test("a start whose answer is lost is retried into exactly one run", async () => {
  const proxy = await losingProxy();
  try {
    const tag = unique();
    const client = new Keel({ url: proxy.url, retryDelayMs: 10 });
    const run = await client.start("ten_steps", 2, { attributes: { tag } });
    assert.equal(proxy.lost(), 1, "the first answer was cut");
    assert.equal(await run.result(), 1);
    const listed = await keel.request("GET", `/v1/runs?attr=tag=${tag}`);
    assert.deepEqual(
      listed.runs.map((r) => r.run_id),
      [run.id],
      "one run, the one the client named",
    );
  } finally {
    proxy.close();
  }
});

/**
 * A proxy to the server that cuts the first stream it forwards right
 * after its first event: the reader's connection breaks mid-stream.
 */
async function cuttingProxy() {
  let cut = 0;
  const target = new URL(url);
  const server = http.createServer((req, res) => {
    const forward = http.request(
      { host: target.hostname, port: target.port, path: req.url, method: req.method, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode, answer.headers);
        if (cut === 0 && req.url.includes("/streams/")) {
          let text = "";
          answer.on("data", (data) => {
            text += data;
            const end = text.indexOf("\n\n");
            if (end >= 0 && cut === 0) {
              cut += 1;
              res.write(text.slice(0, end + 2));
              answer.destroy();
              req.socket.destroy();
            }
          });
          return;
        }
        answer.pipe(res);
      },
    );
    req.pipe(forward);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}`, close: () => server.close(), cut: () => cut };
}

test("a stream is read as it is written, each chunk once across a broken connection", async () => {
  const token = `go:ts-${unique()}`;
  const run = await keel.start("streamer", { count: 5, pause_at: 2, token }, { waitMs: 10_000, returnOnWait: true });
  assert.equal(run.started.status, "waiting", "it paused on its hook after two chunks");
  const proxy = await cuttingProxy();
  try {
    const client = new Keel({ url: proxy.url, retryDelayMs: 10 });
    const seen = [];
    const reading = (async () => {
      for await (const chunk of client.run(run.id).stream("progress")) {
        seen.push(chunk);
        if (chunk.index === 1) {
          // The rest is written only now, while the reader follows.
          await keel.hooks.resume(token, "go");
        }
      }
    })();
    await reading;
    assert.equal(proxy.cut(), 1, "the first connection broke after its first chunk");
    assert.deepEqual(seen.map((c) => c.index), [0, 1, 2, 3, 4, 5]);
    assert.deepEqual(seen.slice(0, 5).map((c) => c.value), [0, 1, 2, 3, 4].map((i) => ({ i })));
    assert.equal(seen[5].kind, "closed");
  } finally {
    proxy.close();
  }
  assert.equal(await run.result(), 5);
  const [stream] = await run.streams();
  assert.equal(stream.name, "progress");
  assert.equal(stream.closed, true);
  // Read again from anywhere, after the run ended.
  const tail = [];
  for await (const chunk of run.stream("progress", { from: 4 })) tail.push(chunk.index);
  assert.deepEqual(tail, [4, 5]);
});

test("a hook answers a request with the workflow's reply, each payload ID delivered once", async () => {
  const token = `ask:ts-${unique()}`;
  const run = await keel.start("replier", token, { waitMs: 10_000, returnOnWait: true });
  const first = await keel.hooks.ask(token, { q: "weather?" }, { waitMs: 10_000 });
  assert.deepEqual(first.reply, { echo: { q: "weather?" }, n: 1 });
  assert.equal(first.run.run_id, run.id);
  const again = await keel.hooks.ask(token, { q: "weather?" }, { payloadId: first.payloadId, waitMs: 10_000 });
  assert.deepEqual(again.reply, first.reply, "a retry of the same payload ID is answered, not delivered again");
  const later = await keel.hooks.reply(token, first.payloadId);
  assert.deepEqual(later.reply, first.reply);
  assert.equal(later.run_id, run.id);
  const stop = await keel.hooks.ask(token, "stop", { waitMs: 10_000 });
  assert.deepEqual(stop.reply, { echo: "stop", n: 2 });
  assert.equal(await run.result(), 2);
});

test("a scoped token reads its run and nothing else", async () => {
  const run = await keel.start("ten_steps", 1);
  await run.result();
  const minted = await keel.createToken({ kind: "read_run", run_id: run.id }, { ttlMs: 60_000 });
  const scoped = new Keel({ url, token: minted.token });
  assert.equal((await scoped.run(run.id).get()).run_id, run.id);
  await assert.rejects(scoped.start("ten_steps", 1), (e) => e.kind === "forbidden" && e.status === 403);
});
