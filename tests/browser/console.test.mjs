// The web console in a real browser: Debian's headless Chromium driven by
// playwright-core, against a running `keel serve` (KEEL_URL) with the
// testbed and order-hooks guests deployed. Fails on the first assertion
// that does not hold; saves a screenshot of a run's page (SCREENSHOT).
import assert from "node:assert/strict";
import { chromium } from "playwright-core";

const base = process.env.KEEL_URL;
const screenshot = process.env.SCREENSHOT || "console.png";
assert.ok(base, "set KEEL_URL to the server's URL");

async function api(path, body) {
  const response = await fetch(base + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const value = await response.json();
  assert.ok(response.ok, `${path}: ${response.status} ${JSON.stringify(value)}`);
  return value;
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  page.setDefaultTimeout(15000);
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));

  // The runs list refreshes live: a run started after the page loaded appears.
  await page.goto(base + "/");
  await page.getByRole("heading", { name: "Runs" }).waitFor();
  const run = await api("/v1/workflows/ten_steps/runs", { input: 10, wait_ms: 10000 });
  assert.equal(run.status, "completed");
  const row = page.locator(`[data-testid=run-row][data-run-id="${run.run_id}"]`);
  await row.waitFor();
  assert.match(await row.innerText(), /ten_steps/);
  assert.match(await row.innerText(), /completed/);

  // Its page: ten steps on the timeline, each with its step ID.
  await row.getByRole("link").click();
  await page.locator("[data-testid=run-id]", { hasText: run.run_id }).waitFor();
  const steps = page.locator("[data-testid=timeline-row][data-kind=step]");
  await steps.nth(9).waitFor();
  assert.equal(await steps.count(), 10);
  for (let i = 0; i < 10; i++) {
    assert.equal(await steps.nth(i).locator("[data-testid=step-id]").innerText(), `${run.run_id}-noop-${i}`);
  }
  assert.equal((await page.locator("[data-testid=output]").innerText()).trim(), "45");
  await page.screenshot({ path: screenshot, fullPage: true });

  // The status filter shows only failed runs.
  const failed = await api("/v1/workflows/trap/runs", { wait_ms: 10000 });
  assert.equal(failed.status, "failed");
  await page.goto(base + "/#/runs?status=failed");
  await page.locator(`[data-testid=run-row][data-run-id="${failed.run_id}"]`).waitFor();
  assert.equal(await page.locator("[data-testid=run-row]").count(), 1);

  // A failed run is retried from its page: the journal records the retry.
  await page.goto(`${base}/#/runs/${failed.run_id}`);
  // A long error wraps instead of being cut.
  // Found and measured in one task: the page re-renders, and a detached element has no style.
  const wraps = await page.waitForFunction(() => {
    const e = document.querySelector("pre[data-testid=error]");
    return e && e.isConnected && getComputedStyle(e).whiteSpace;
  });
  assert.equal(await wraps.jsonValue(), "pre-wrap");
  await page.locator("[data-testid=retry]").click();
  await page.getByText("Run retried").waitFor();
  const retriedJournal = await api(`/v1/runs/${failed.run_id}/journal`);
  assert.ok(retriedJournal.some((e) => e.kind === "run_retried"), "the retry is journaled");

  // A run asleep for 30 s (under the park limit, kept in memory) is
  // waiting, on a timer, not running.
  const asleep = await api("/v1/workflows/sleeper/runs", { input: 30000, wait_ms: 10000, return_on_wait: true });
  assert.equal(asleep.status, "waiting");
  await page.goto(`${base}/#/runs/${asleep.run_id}`);
  await page.locator("h1 [data-testid=status]", { hasText: "waiting" }).waitFor();
  await page.locator("[data-testid=waiting-on]", { hasText: "a timer due" }).waitFor();

  // A run waiting for a hook is cancelled from its page.
  const waiting = await api("/v1/workflows/order_updates/runs", {
    input: { order_id: "browser-1", note: "placed" }, hook: { token: "order:browser-1" }, wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(waiting.status, "waiting");
  await api("/v1/hooks/order:browser-1/resume?wait_ms=10000&return_on_wait=true", { note: "gift wrap" });
  await page.goto(`${base}/#/runs/${waiting.run_id}`);
  await page.locator("[data-testid=timeline-row][data-kind=hook]").waitFor();
  await page.locator("[data-testid=hooks]", { hasText: "gift wrap" }).waitFor();
  // Paused from its page: a payload queues and is not taken; the runs
  // list shows it under `paused`; resumed, it takes the payload.
  await page.locator("[data-testid=pause]").click();
  await page.locator("h1 [data-testid=status]", { hasText: "paused" }).waitFor();
  await page.locator("[data-testid=paused]", { hasText: "by api" }).waitFor();
  await api("/v1/hooks/order:browser-1/resume", { note: "while paused" });
  assert.equal((await api(`/v1/runs/${waiting.run_id}`)).status, "paused");
  await page.goto(`${base}/#/runs?status=paused`);
  await page.locator(`[data-testid=run-row][data-run-id="${waiting.run_id}"]`).waitFor();
  await page.goto(`${base}/#/runs/${waiting.run_id}`);
  await page.locator("[data-testid=resume]").click();
  await page.locator("h1 [data-testid=status]", { hasText: "waiting" }).waitFor();
  await page.locator("[data-testid=hooks]", { hasText: "while paused" }).waitFor();
  page.once("dialog", (dialog) => dialog.accept("no longer wanted"));
  await page.locator("[data-testid=cancel]").click();
  await page.locator("h1 [data-testid=status]", { hasText: "cancelled" }).waitFor();
  await page.locator("[data-testid=error]", { hasText: "cancelled by api: no longer wanted" }).waitFor();
  // Its hook closed with it.
  await page.locator("[data-testid=hooks]", { hasText: "closed" }).waitFor();
  const after = await api(`/v1/runs/${waiting.run_id}`);
  assert.equal(after.status, "cancelled");
  assert.equal(after.error.message, "cancelled by api: no longer wanted");

  // An ended run is deleted from its page, after a confirmation.
  page.once("dialog", (dialog) => dialog.accept());
  await page.locator("[data-testid=delete]").click();
  await page.getByText("Run deleted").waitFor();
  await page.getByRole("heading", { name: "Runs" }).waitFor();
  assert.equal((await fetch(`${base}/v1/runs/${waiting.run_id}`)).status, 404, "the deleted run is gone");

  // A run's streams show on its page: a step's tokens without the chunks
  // of its failed first attempt, and a workflow's stream growing live.
  const streamed = await api("/v1/workflows/step_stream/runs", { input: null, wait_ms: 10000 });
  assert.equal(streamed.status, "completed");
  await page.goto(`${base}/#/runs/${streamed.run_id}`);
  const tokens = page.locator('[data-testid=stream][data-stream="tokens"]');
  await page.locator('[data-testid=stream-state][data-stream="tokens"]', { hasText: "closed" }).waitFor();
  const text = await tokens.innerText();
  assert.match(text, /restarted: attempt 2/);
  // Each chunk on a line of its own.
  assert.match(text, /a2-0\na2-1\na2-2/);
  // The marker names the step by its ID, which holds the run ID: leave
  // it out, or a run ID with `a1-` in it would look like a dropped chunk.
  const written = text.replace(/\[step [^\]]* restarted: attempt \d+\]/g, "");
  assert.doesNotMatch(written, /a1-/, "the failed attempt's chunks are dropped");
  // The step's failed first attempt is labelled as the attempt's, with a
  // row per attempt and its time; the step itself completed.
  const attempts = page.locator("[data-testid=timeline-row][data-kind=step] [data-testid=attempts]");
  await attempts.waitFor();
  assert.match(await attempts.locator("summary").innerText(), /2 attempts, 1 failed before it completed/);
  await attempts.locator("summary").click();
  assert.equal(await attempts.locator("[data-testid=attempt-row]").count(), 2);
  assert.match(await attempts.locator("[data-testid=attempt-row][data-attempt='1']").innerText(), /failed:/);
  assert.match(await attempts.locator("[data-testid=attempt-row][data-attempt='2']").innerText(), /succeeded/);
  const live = await api("/v1/workflows/streamer/runs", {
    input: { count: 6, pause_at: 3, token: "go:browser" }, wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(live.status, "waiting");
  await page.goto(`${base}/#/runs/${live.run_id}`);
  const progress = page.locator('[data-testid=stream][data-stream="progress"]');
  await progress.filter({ hasText: '{"i":2}' }).waitFor();
  assert.doesNotMatch(await progress.innerText(), /"i":3/);
  await api("/v1/hooks/go:browser/resume?wait_ms=10000", true);
  // The page follows the stream as the run writes the rest, to its close.
  await progress.filter({ hasText: '{"i":5}' }).waitFor();
  await page.locator('[data-testid=stream-state][data-stream="progress"]', { hasText: "closed" }).waitFor();
  assert.match(await progress.innerText(), /\{"i":4\}\n\{"i":5\}/, "one chunk a line");
  // Chunks that say they are tokens flow as one text.
  const told = await api("/v1/workflows/streamer/runs", { input: { count: 3, tokens: true }, wait_ms: 10000 });
  assert.equal(told.status, "completed");
  await page.goto(`${base}/#/runs/${told.run_id}`);
  await page.locator('[data-testid=stream-state][data-stream="progress"]', { hasText: "closed" }).waitFor();
  assert.equal((await page.locator('[data-testid=stream][data-stream="progress"]').innerText()).trim(), "t0 t1 t2");

  // A hook's payloads show with the workflow's replies to them.
  const replying = await api("/v1/workflows/replier/runs", { input: "ask:browser", wait_ms: 10000, return_on_wait: true });
  assert.equal(replying.status, "waiting");
  const answer = await api("/v1/hooks/ask:browser/resume?payload_id=q-1&wait_reply_ms=10000", { q: "weather?" });
  assert.deepEqual(answer.reply, { echo: { q: "weather?" }, n: 1 });
  await page.goto(`${base}/#/runs/${replying.run_id}`);
  const reply = page.locator("[data-testid=hooks] [data-testid=hook-reply]");
  await reply.waitFor();
  assert.equal(await reply.innerText(), '{"echo":{"q":"weather?"},"n":1}');

  // A run's children as a tree, with links both ways: `start_order` ends
  // at once and its child, closed by `abandon`, waits on its hook.
  const parent = await api("/v1/workflows/start_order/runs", { input: { order_id: "browser-3", note: "placed" }, wait_ms: 10000 });
  assert.equal(parent.status, "completed");
  const childId = parent.output.started;
  await page.goto(`${base}/#/runs/${parent.run_id}`);
  const child = page.locator(`[data-testid=children] [data-testid=child][data-close=abandon]`);
  // The child is driven at once and may still be running when the page
  // first draws; the page redraws as it changes.
  await page.locator(`[data-testid=children] [data-testid=child][data-close=abandon]`, { hasText: "waiting" }).waitFor();
  assert.match(await child.innerText(), /order_updates/);
  assert.match(await child.innerText(), /waiting/);
  assert.match(await child.innerText(), /goes on when this run ends/);
  // Its timeline's row of the child says what the child has come to, not
  // that its start completed.
  await page.locator("[data-testid=timeline-row][data-kind=child] [data-testid=row-status]", { hasText: "waiting" }).waitFor();
  await child.getByRole("link", { name: childId }).click();
  await page.locator("[data-testid=run-id]", { hasText: childId }).waitFor();
  await page.locator("[data-testid=parent]", { hasText: parent.run_id }).click();
  await page.locator("[data-testid=run-id]", { hasText: parent.run_id }).waitFor();
  const parentView = await api(`/v1/runs/${parent.run_id}`);
  assert.deepEqual(parentView.children.map((c) => [c.run_id, c.close, c.status]), [[childId, "abandon", "waiting"]]);
  assert.equal((await api(`/v1/runs/${childId}`)).parent_run_id, parent.run_id);

  // A run started in a caller's trace shows the trace ID to look it up by.
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const traced = await (await fetch(base + "/v1/workflows/ten_steps/runs", {
    method: "POST",
    headers: { "content-type": "application/json", traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
    body: JSON.stringify({ input: 2, wait_ms: 10000 }),
  })).json();
  await page.goto(`${base}/#/runs/${traced.run_id}`);
  assert.equal(await page.locator("[data-testid=trace]").innerText(), traceId);

  // Its read-only link opens, with no cookie, a page of that run alone.
  await page.locator("[data-testid=share]").click();
  const link = await page.locator("[data-testid=share-link]").inputValue();
  assert.match(link, /\/share#run=.*&token=ks1\./);
  const stranger = await (await browser.newContext()).newPage();
  await stranger.goto(link);
  assert.equal(await stranger.locator("[data-testid=share-run-id]").innerText(), traced.run_id);
  assert.equal(await stranger.locator("[data-testid=share-status]").innerText(), "completed");
  // Its wordmark reads against what is behind it (WCAG's 4.5:1).
  const [ink, paper] = await stranger.locator("header .logo").evaluate((logo) => {
    let under = logo;
    while (under && getComputedStyle(under).backgroundColor === "rgba(0, 0, 0, 0)") under = under.parentElement;
    return [getComputedStyle(logo).color, under ? getComputedStyle(under).backgroundColor : "rgb(255, 255, 255)"];
  });
  const luminance = (rgb) => {
    const [r, g, b] = rgb.match(/\d+/g).slice(0, 3).map((c) => {
      const v = Number(c) / 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const [light, dark] = [luminance(ink), luminance(paper)].sort((a, b) => b - a);
  assert.ok((light + 0.05) / (dark + 0.05) >= 4.5, `the share page's wordmark (${ink} on ${paper}) is readable`);
  const token = decodeURIComponent(new URL(link).hash.split("token=")[1]);
  const listed = await fetch(base + "/v1/runs", { headers: { authorization: `Bearer ${token}` } });
  assert.equal(listed.status, 403, "the link's token reads that run only");
  await stranger.close();

  // The runs list filters by attributes, set at start and by the workflow.
  const tagged = await api("/v1/workflows/tagged/runs", { input: "acme", attributes: { plan: "pro" }, wait_ms: 10000 });
  assert.equal(tagged.status, "completed");
  assert.deepEqual(tagged.attributes, { plan: "pro", stage: "done", tenant: "acme" });
  await api("/v1/workflows/tagged/runs", { input: "globex", attributes: { plan: "pro" }, wait_ms: 10000 });
  await page.goto(base + "/#/runs");
  await page.locator("[data-testid=attr-filter]").fill("tenant=acme plan=pro");
  await page.locator("[data-testid=attr-filter]").press("Enter");
  await page.locator(`[data-testid=run-row][data-run-id="${tagged.run_id}"]`).waitFor();
  await page.waitForFunction(() => document.querySelectorAll("[data-testid=run-row]").length === 1);
  assert.match(await page.locator("[data-testid=run-row]").innerText(), /stage=done/);

  // A bulk retry from the runs list: the failed runs of one tenant,
  // counted, confirmed, carried out as a job whose page shows its progress.
  const bulkRuns = [];
  for (const tenant of ["bulk-acme", "bulk-acme", "bulk-other"]) {
    const r = await api("/v1/workflows/trap/runs", { attributes: { tenant }, wait_ms: 10000 });
    assert.equal(r.status, "failed");
    if (tenant === "bulk-acme") bulkRuns.push(r.run_id);
  }
  await page.goto(base + "/#/runs?status=failed&attr=tenant%3Dbulk-acme");
  await page.locator(`[data-testid=run-row][data-run-id="${bulkRuns[0]}"]`).waitFor();
  await page.locator("[data-testid=bulk-action]").selectOption("retry");
  let asked = "";
  page.once("dialog", (dialog) => { asked = dialog.message(); dialog.accept(); });
  await page.locator("[data-testid=bulk-apply]").click();
  await page.locator("[data-testid=job-state]", { hasText: "completed" }).waitFor();
  assert.match(asked, /retry 2 run\(s\)/);
  assert.equal(await page.locator("[data-testid=job-counts]").innerText(), "2 done, 0 skipped, 0 failed of 2");
  for (const id of bulkRuns) {
    const journal = await api(`/v1/runs/${id}/journal`);
    assert.equal(journal.filter((e) => e.kind === "run_retried").length, 1, `${id} was retried once`);
  }
  await page.goto(base + "/#/jobs");
  const jobRow = page.locator("[data-testid=job-row]", { hasText: "tenant=bulk-acme" });
  await jobRow.waitFor();
  assert.match(await jobRow.innerText(), /retry/);

  // The other pages render what the API holds.
  await page.goto(base + "/#/deployments");
  await page.locator("[data-testid=deployments-table]", { hasText: "testbed" }).waitFor();
  const testbedRow = page.locator('[data-testid=deployment-row][data-name="testbed"]');
  assert.equal(await testbedRow.count(), 1);
  assert.equal(await testbedRow.locator("[data-testid=build]").innerText(), "current");
  // The deployment's page: its workflows' schemas, and a grant added there.
  await testbedRow.getByRole("link", { name: "testbed" }).click();
  const decideRow = page.locator('[data-testid=workflow-row][data-workflow="decide"]');
  await decideRow.waitFor();
  assert.match(await decideRow.innerText(), /"type": "string"/);
  await page.locator("[data-testid=grant-value]").fill("browser.example.com");
  await page.locator("[data-testid=grant]").click();
  await page.locator("[data-testid=grants]", { hasText: "http browser.example.com" }).waitFor();
  assert.ok((await api("/v1/deployments/testbed")).grants.http.includes("browser.example.com"));

  // A hook resumed from its run's page: its payload type shown, a payload
  // that does not fit refused with the place named (nothing delivered),
  // then one that fits.
  const deciding = await api("/v1/workflows/decide/runs", { input: "browser", wait_ms: 10000, return_on_wait: true });
  assert.equal(deciding.status, "waiting");
  await page.goto(`${base}/#/runs/${deciding.run_id}`);
  const form = page.locator("[data-testid=resume-form]");
  await form.waitFor();
  await form.locator("[data-testid=resume-schema] summary").click();
  await form.locator("[data-testid=resume-schema] pre", { hasText: "approved" }).waitFor();
  await form.locator("[data-testid=resume-payload]").fill('{"approved": "yes", "note": "ok"}');
  await form.locator("[data-testid=resume]").click();
  await form.locator("[data-testid=resume-error]", { hasText: "invalid_input" }).waitFor();
  assert.match(await form.locator("[data-testid=resume-error]").innerText(), /at \/approved/);
  assert.equal((await api(`/v1/runs/${deciding.run_id}`)).status, "waiting");
  await form.locator("[data-testid=resume-payload]").fill('{"approved": true, "note": "from the console"}');
  await form.locator("[data-testid=resume]").click();
  await page.getByText("Payload delivered").waitFor();
  await page.locator("h1 [data-testid=status]", { hasText: "completed" }).waitFor();
  assert.deepEqual((await api(`/v1/runs/${deciding.run_id}`)).output, { approved: true, note: "from the console" });
  // A held token is listed with its run; a token nobody holds is not.
  const holder = await api("/v1/workflows/order_updates/runs", {
    input: { order_id: "browser-2", note: "placed" }, hook: { token: "order:browser-2" }, wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(holder.status, "waiting");
  // Its page says which hook resumes it.
  await page.goto(base + `/#/runs/${holder.run_id}`);
  await page.locator("[data-testid=waiting-token]", { hasText: "order:browser-2" }).waitFor();
  await page.goto(base + "/#/hooks");
  const held = page.locator("tr", { hasText: "order:browser-2" });
  await held.waitFor();
  assert.ok((await held.innerText()).includes(holder.run_id), "the hook's row names its run");
  assert.ok(!(await held.innerText()).includes("command"), "no internal jargon");
  assert.equal(await page.getByText("order:browser-1", { exact: true }).count(), 0, "a cancelled run's token is not held");
  // The schedules page: a schedule with its spec in words, paused and
  // resumed from the page; its own page lists the next fire times, and a
  // trigger adds a fire whose run it links.
  await api("/v1/schedules", { name: "browser-hourly", workflow: "ten_steps", input: 3, every_ms: 3600000 });
  await page.goto(base + "/#/schedules");
  const scheduleRow = page.locator('[data-testid=schedule-row][data-schedule="browser-hourly"]');
  await scheduleRow.waitFor();
  assert.equal(await scheduleRow.locator("[data-testid=schedule-spec]").innerText(), "every 1h");
  await scheduleRow.getByRole("button", { name: "Pause" }).click();
  await scheduleRow.locator("[data-testid=schedule-state]", { hasText: "paused" }).waitFor();
  assert.equal((await api("/v1/schedules/browser-hourly")).paused, true);
  await scheduleRow.getByRole("button", { name: "Resume" }).click();
  await scheduleRow.locator("[data-testid=schedule-state]", { hasText: "active" }).waitFor();
  await scheduleRow.getByRole("link", { name: "browser-hourly" }).click();
  await page.locator("[data-testid=upcoming] li").nth(4).waitFor();
  assert.equal(await page.locator("[data-testid=upcoming] li").count(), 5);
  await page.locator("[data-testid=trigger]").click();
  const fireRow = page.locator("[data-testid=fire-row]", { hasText: "browser-hourly:" });
  await fireRow.waitFor();
  assert.match(await fireRow.innerText(), /started/);
  const fired = (await api("/v1/schedules/browser-hourly")).recent[0];
  assert.equal(fired.outcome, "started");
  // Backfill from the page: a range holding two of its hourly fire times
  // (whole hours, as `every 1h` fires) starts a run for each.
  const hour = 3600000;
  const local = (ms) => new Date(ms - new Date(ms).getTimezoneOffset() * 60000).toISOString().slice(0, 16);
  const thisHour = Math.floor(Date.now() / hour) * hour;
  const backfill = page.locator("[data-testid=backfill]");
  await backfill.getByLabel("Backfill from").fill(local(thisHour - 3 * hour + hour / 2));
  await backfill.getByLabel("Backfill to").fill(local(thisHour - hour + hour / 2));
  await backfill.getByRole("button", { name: "Backfill" }).click();
  await page.locator("#toast", { hasText: "Backfilled 2 fires" }).waitFor();
  const backfilled = (await api("/v1/schedules/browser-hourly")).recent.filter((f) => f.nominal_ms < thisHour);
  assert.deepEqual(backfilled.map((f) => f.nominal_ms).sort(), [thisHour - 2 * hour, thisHour - hour]);
  assert.ok(backfilled.every((f) => f.outcome === "started" && f.run_id), JSON.stringify(backfilled));
  await page.locator("[data-testid=fire-row]").nth(2).waitFor();
  await page.locator("[data-testid=fire-row]", { hasText: fired.run_id }).getByRole("link").click();
  await page.locator("[data-testid=run-id]", { hasText: fired.run_id }).waitFor();

  // Flow control: a run holding the one slot of `one_at_a_time`, another
  // queued behind it, shown with its key and place; the limits page pauses
  // the workflow (limit 0) and resumes it, which starts nothing while the
  // holder runs.
  const slotHolder = await api("/v1/workflows/one_at_a_time/runs", {
    input: ["holder", 600000], wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(slotHolder.status, "waiting");
  const queued = await api("/v1/workflows/one_at_a_time/runs", {
    input: ["next", 0], priority: 2, wait_ms: 10000, return_on_wait: true,
  });
  assert.equal(queued.status, "queued");
  await page.goto(base + "/#/runs?status=queued");
  const queuedRow = page.locator(`[data-testid=run-row][data-run-id="${queued.run_id}"]`);
  await queuedRow.waitFor();
  assert.match(await queuedRow.innerText(), /queued/);
  await queuedRow.getByRole("link").click();
  const slot = page.locator("[data-testid=concurrency]");
  await slot.waitFor();
  assert.match(await slot.innerText(), /key all \(limit 1, priority 2\): queued, 1 in line/);
  // A full load of the page, not only a change of its hash.
  await page.goto(base + "/#/limits");
  await page.reload();
  await page.getByRole("heading", { name: "Limits" }).waitFor();
  const limitRow = page.locator('[data-testid=limit-row][data-workflow="one_at_a_time"][data-key="all"]');
  await limitRow.waitFor({ timeout: 30000 });
  assert.equal(await limitRow.locator("[data-testid=in-progress]").innerText(), "1");
  assert.equal(await limitRow.locator("[data-testid=queued]").innerText(), "1");
  await limitRow.getByRole("button", { name: "Pause" }).click();
  await limitRow.locator("[data-testid=limit]", { hasText: "0" }).waitFor();
  assert.ok((await api("/v1/limits")).limits.some((l) => l.key === "all" && l.limit === 0));
  await limitRow.getByRole("button", { name: "Resume" }).click();
  await limitRow.locator("[data-testid=limit]", { hasText: "1" }).waitFor();
  assert.equal((await api(`/v1/runs/${queued.run_id}`)).status, "queued", "the holder still has the slot");

  // A run whose worker was killed in the middle of its step
  // (scripts/e2e-server.sh): the server took it over, and the step shows
  // the attempt lost with the dead worker before the one that completed it.
  const lostRun = process.env.KEEL_LOST_RUN;
  assert.ok(lostRun, "set KEEL_LOST_RUN to the run whose worker was killed");
  const ended = await api(`/v1/runs/${lostRun}/result?wait_ms=30000`);
  assert.equal(ended.status, "completed");
  assert.equal(ended.output, 2, "the step completed on its second attempt");
  await page.goto(`${base}/#/runs/${lostRun}`);
  const lostAttempts = page.locator("[data-testid=timeline-row][data-kind=step] [data-testid=attempts]");
  await lostAttempts.locator("summary").click();
  const lostAttempt = lostAttempts.locator('[data-testid=attempt-row][data-attempt="1"]');
  await lostAttempt.waitFor();
  assert.match(await lostAttempt.innerText(), /lost with its worker:\s+lost with worker \S+, which stopped while the attempt ran; worker \S+ took the run over/);
  assert.match(await lostAttempts.locator('[data-testid=attempt-row][data-attempt="2"]').innerText(), /succeeded/);

  // An upgrade judged from the console: a build whose step_then_sleep
  // starts with another step is deployed as the testbed's next; its dry
  // run lists the waiting run of step_then_sleep as pinned, naming where
  // its journal and the new code part, and moves nothing.
  const reorderedPath = process.env.KEEL_REORDERED;
  assert.ok(reorderedPath, "set KEEL_REORDERED to the testbed's reordered build");
  const pinnedRun = await api("/v1/workflows/step_then_sleep/runs", { input: [5, 3600000], wait_ms: 10000, return_on_wait: true });
  assert.equal(pinnedRun.status, "waiting");
  const { readFile } = await import("node:fs/promises");
  const deployed = await fetch(`${base}/v1/deployments?name=testbed`, {
    method: "POST", headers: { "content-type": "application/wasm" }, body: await readFile(reorderedPath),
  });
  const deployedText = await deployed.text();
  assert.equal(deployed.status, 201, deployedText);
  const reordered = JSON.parse(deployedText);
  await page.goto(`${base}/#/deployments/testbed`);
  await page.locator("[data-testid=upgrade-dry-run]").click();
  await page.waitForURL(/#\/jobs\//);
  await page.locator("[data-testid=job-state]", { hasText: "completed" }).waitFor();
  const verdict = await page.locator("[data-testid=upgrade-verdict]").innerText();
  assert.match(verdict, /would move, [1-9]\d* stay pinned/, verdict);
  const pinnedRow = page.locator("[data-testid=upgrade-pinned] [data-testid=pinned-row]", { hasText: pinnedRun.run_id });
  await pinnedRow.waitFor();
  assert.match(await pinnedRow.innerText(), /does not replay on build/);
  assert.equal((await api(`/v1/runs/${pinnedRun.run_id}`)).component_hash, pinnedRun.component_hash, "a dry run moves nothing");
  assert.notEqual(reordered.hash, pinnedRun.component_hash);

  assert.deepEqual(errors, [], "the console threw");
  console.log(`console test passed; screenshot in ${screenshot}`);
} finally {
  await browser.close();
}
