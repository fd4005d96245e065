// Webhooks as their senders sign them, against a running `keel serve`
// (KEEL_URL) with the testbed guest deployed: Stripe's own library signs
// an event, GitHub's @octokit/webhooks-methods a pull request's. Each
// delivery resumes the run waiting on the hook its body names and ends
// it; the sender's retry of that delivery (Stripe's resend, signed anew;
// GitHub's redelivery, the same GUID) is answered `duplicate: true` and
// journals nothing. Fails on the first assertion that does not hold.
import assert from "node:assert/strict";
import Stripe from "stripe";
import { sign } from "@octokit/webhooks-methods";

const base = process.env.KEEL_URL;
assert.ok(base, "set KEEL_URL to the server's URL");

async function call(method, path, body, headers = {}) {
  const response = await fetch(base + path, {
    method,
    headers: { "content-type": "application/json", ...headers },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: response.status, value: await response.json() };
}

async function ok(method, path, body) {
  const { status, value } = await call(method, path, body);
  assert.ok(status < 300, `${method} ${path}: ${status} ${JSON.stringify(value)}`);
  return value;
}

// A run that ends with the first payload its hook `token` gets.
async function waitingOn(token) {
  const run = await ok("POST", "/v1/workflows/streamer/runs", {
    input: { count: 1, pause_at: 0, token }, wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(run.status, "waiting", JSON.stringify(run));
  return run.run_id;
}

// The run's journal once it has completed: its length.
async function ended(runId) {
  const run = await ok("GET", `/v1/runs/${runId}/result?wait_ms=10000`);
  assert.equal(run.status, "completed", JSON.stringify(run));
  return (await ok("GET", `/v1/runs/${runId}/journal`)).length;
}

const unique = Date.now().toString(36);

// Stripe: the event's ID is the delivery's; a resend is signed anew.
{
  const secret = `whsec_keel_${unique}`;
  const webhook = `stripe-${unique}`;
  await ok("POST", "/v1/webhooks", {
    id: webhook, hook: "pay:{/data/object/metadata/order_id}", scheme: "stripe", secret,
  });
  const order = `o-${unique}`;
  const runId = await waitingOn(`pay:${order}`);
  const payload = JSON.stringify({
    id: `evt_${unique}`, object: "event", type: "payment_intent.succeeded",
    data: { object: { object: "payment_intent", metadata: { order_id: order } } },
  });
  const stripe = new Stripe("sk_test_never_used");
  const deliver = (timestamp) => call("POST", `/v1/webhooks/${webhook}`, payload, {
    "stripe-signature": stripe.webhooks.generateTestHeaderString({ payload, secret, timestamp }),
  });
  const now = Math.floor(Date.now() / 1000);
  const first = await deliver(now);
  assert.equal(first.status, 200, JSON.stringify(first.value));
  assert.equal(first.value.duplicate, false);
  assert.equal(first.value.run_id, runId);
  const written = await ended(runId);
  const resent = await deliver(now + 60);
  assert.equal(resent.status, 200, JSON.stringify(resent.value));
  assert.equal(resent.value.duplicate, true, JSON.stringify(resent.value));
  assert.equal(resent.value.run_id, runId);
  assert.equal(await ended(runId), written, "a resend journals nothing");
}

// GitHub: a redelivery carries the delivery's GUID and the same signature.
{
  const secret = `github-keel-${unique}`;
  const webhook = `github-${unique}`;
  await ok("POST", "/v1/webhooks", {
    id: webhook, hook: "pr:{/pull_request/number}", scheme: "github", secret,
  });
  const number = Date.now() % 100000;
  const runId = await waitingOn(`pr:${number}`);
  const payload = JSON.stringify({ action: "closed", number, pull_request: { number, merged: true } });
  const headers = {
    "x-github-event": "pull_request",
    "x-github-delivery": `d-${unique}`,
    "x-hub-signature-256": await sign(secret, payload),
  };
  const deliver = () => call("POST", `/v1/webhooks/${webhook}`, payload, headers);
  const first = await deliver();
  assert.equal(first.status, 200, JSON.stringify(first.value));
  assert.equal(first.value.duplicate, false);
  assert.equal(first.value.run_id, runId);
  const written = await ended(runId);
  const redelivered = await deliver();
  assert.equal(redelivered.status, 200, JSON.stringify(redelivered.value));
  assert.equal(redelivered.value.duplicate, true, JSON.stringify(redelivered.value));
  assert.equal(redelivered.value.run_id, runId);
  assert.equal(await ended(runId), written, "a redelivery journals nothing");
}

console.log("webhooks test passed: Stripe's resend and GitHub's redelivery are duplicates");
