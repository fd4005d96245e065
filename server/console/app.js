// keel console: a page per hash route (#/runs, #/runs/ID, #/schedules,
// #/schedules/NAME, #/jobs, #/jobs/ID, #/limits, #/hooks, #/events, #/deployments,
// #/deployments/NAME, #/workers), each
// rendered from the HTTP API.
// No build step and no dependencies: the server serves this file as is.
"use strict";

const main = document.getElementById("main");
let stop = () => {}; // ends the current page's refresh or live stream

// ---- helpers -------------------------------------------------------------

// Read-only links made on runs' pages, by run ID (kept across redraws).
const shareLinks = {};

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  if (response.status === 401) { location.href = "/login"; throw new Error("sign in first"); }
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error ? `${body.error.kind}: ${body.error.message}` : response.statusText);
  return body;
}

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function time(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

function ago(ms) {
  if (!ms) return "";
  const s = Math.round((Date.now() - ms) / 1000);
  if (s < 0) return `in ${duration(-s * 1000)}`;
  if (s < 5) return "just now";
  return `${duration(s * 1000)} ago`;
}

function duration(ms) {
  if (ms == null) return "";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
  if (ms < 3600000) return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
  if (ms < 86400000) return `${Math.floor(ms / 3600000)} h ${Math.round((ms % 3600000) / 60000)} min`;
  return `${Math.floor(ms / 86400000)} d ${Math.round((ms % 86400000) / 3600000)} h`;
}

function json(value) {
  return esc(JSON.stringify(value, null, 2));
}

function badge(status) {
  return `<span class="badge ${esc(status)}" data-testid="status">${esc(status)}</span>`;
}

const ended = (status) => ["completed", "failed", "cancelled", "continued"].includes(status);

function toast(message, bad = false) {
  const t = document.getElementById("toast");
  t.textContent = message;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

function every(ms, fn) {
  fn();
  const id = setInterval(fn, ms);
  return () => clearInterval(id);
}

// ---- pages ---------------------------------------------------------------

function runsPage(params) {
  const status = params.get("status") || "";
  const search = params.get("search") || "";
  const attrs = params.getAll("attr").join(" ");
  main.innerHTML = `
    <h1>Runs</h1>
    <div class="toolbar">
      <select id="status" data-testid="status-filter">
        ${["", "pending", "scheduled", "queued", "running", "waiting", "paused", "completed", "failed", "cancelled", "continued"]
          .map((s) => `<option value="${s}" ${s === status ? "selected" : ""}>${s || "any status"}</option>`).join("")}
      </select>
      <input id="search" type="search" placeholder="Run ID or workflow" value="${esc(search)}" data-testid="search">
      <input id="attrs" type="search" placeholder="Attributes: tenant=acme region=eu" value="${esc(attrs)}" data-testid="attr-filter">
      <span class="muted" id="count"></span>
    </div>
    <div class="toolbar" data-testid="bulk">
      <select id="bulk-action" data-testid="bulk-action">
        <option value="retry">Retry</option><option value="cancel">Cancel</option><option value="delete">Delete</option><option value="pause">Pause</option><option value="resume">Resume</option>
      </select>
      <button id="bulk" data-testid="bulk-apply">every matching run…</button>
    </div>
    <div id="runs"></div>
    <div class="toolbar"><button class="plain" id="more" hidden>Older runs</button></div>`;
  const filters = () => {
    const q = new URLSearchParams();
    const s = document.getElementById("status").value;
    const text = document.getElementById("search").value.trim();
    if (s) q.set("status", s);
    if (text) q.set("search", text);
    for (const pair of document.getElementById("attrs").value.split(/\s+/).filter(Boolean)) q.append("attr", pair);
    return q;
  };
  const apply = () => { location.hash = `#/runs?${filters()}`; };
  document.getElementById("status").onchange = apply;
  document.getElementById("search").onkeydown = (e) => { if (e.key === "Enter") apply(); };
  document.getElementById("attrs").onkeydown = (e) => { if (e.key === "Enter") apply(); };
  document.getElementById("bulk").onclick = () => bulkAction(filters(), document.getElementById("bulk-action").value);
  let limit = 50;
  document.getElementById("more").onclick = () => { limit += 50; refresh(); };
  const refresh = async () => {
    const q = filters();
    q.set("limit", limit);
    try {
      const page = await api(`/v1/runs?${q}`);
      document.getElementById("count").textContent = `${page.runs.length}${page.next_cursor ? "+" : ""} run(s), refreshing live`;
      document.getElementById("more").hidden = !page.next_cursor;
      document.getElementById("runs").innerHTML = page.runs.length === 0
        ? `<div class="card empty">No runs${q.has("status") || q.has("search") || q.has("attr") ? " match" : " yet"}.</div>`
        : `<table data-testid="runs-table"><thead><tr><th>Run</th><th>Workflow</th><th>Status</th><th>Started</th><th>Duration</th><th>Result</th></tr></thead><tbody>
          ${page.runs.map((r) => `<tr data-testid="run-row" data-run-id="${esc(r.run_id)}">
            <td><a class="mono" href="#/runs/${encodeURIComponent(r.run_id)}">${esc(r.run_id)}</a></td>
            <td>${esc(r.workflow)}${Object.entries(r.attributes || {}).map(([k, v]) => ` <span class="muted attr" data-testid="attr">${esc(k)}=${esc(v)}</span>`).join("")}</td><td>${badge(r.status)}</td>
            <td title="${time(r.created_at_ms)}">${ago(r.created_at_ms)}</td>
            <td>${duration((ended(r.status) ? r.updated_at_ms : Date.now()) - r.created_at_ms)}</td>
            <td class="mono">${r.error ? `<span class="error">${esc(r.error.kind)}</span>` : esc(r.output === null || r.output === undefined ? "" : JSON.stringify(r.output)).slice(0, 80)}</td>
          </tr>`).join("")}</tbody></table>`;
    } catch (e) { toast(e.message, true); }
  };
  return every(2000, refresh);
}

// ---- bulk jobs ------------------------------------------------------------

// The runs listing's filter as a bulk operation's.
function bulkFilter(q) {
  const filter = { status: q.getAll("status"), attributes: {} };
  if (q.get("search")) filter.search = q.get("search");
  for (const pair of q.getAll("attr")) {
    const at = pair.indexOf("=");
    if (at > 0) filter.attributes[pair.slice(0, at)] = pair.slice(at + 1);
  }
  return filter;
}

// Counts what the action would act on, asks, then submits the job and
// shows its progress.
async function bulkAction(q, action) {
  const request = { action, filter: bulkFilter(q) };
  try {
    const preview = await api("/v1/runs/bulk", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ ...request, dry_run: true }),
    });
    if (preview.acted_on === 0) { toast(`No matching run to ${action}`, true); return; }
    const more = preview.passed_over ? ` (${preview.passed_over} more match but their status does not take it)` : "";
    if (!confirm(`${action} ${preview.acted_on} run(s)${more}?`)) return;
    const job = await api("/v1/runs/bulk", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(request),
    });
    location.hash = `#/jobs/${encodeURIComponent(job.job_id)}`;
  } catch (e) { toast(e.message, true); }
}

const jobLink = (id) => `<a class="mono" href="#/jobs/${encodeURIComponent(id)}">${esc(id)}</a>`;

function jobProgress(j) {
  const c = j.counts;
  const settled = c.done + c.skipped + c.failed;
  const share = c.matched ? Math.round((settled / c.matched) * 100) : (j.state === "running" ? 0 : 100);
  return `<span class="progress"><span style="width:${share}%"></span></span> <span data-testid="job-counts">${c.done} done, ${c.skipped} skipped, ${c.failed} failed of ${c.matched}</span>`;
}

function filterText(f) {
  const parts = [...f.status.map((s) => `status=${s}`), ...Object.entries(f.attributes).map(([k, v]) => `${k}=${v}`)];
  if (f.workflow) parts.push(`workflow=${f.workflow}`);
  if (f.search) parts.push(`search=${f.search}`);
  if (f.schedule) parts.push(`schedule=${f.schedule}`);
  return parts.map(esc).join(" ");
}

function jobsPage() {
  return tablePage("Jobs", "/v1/jobs", (b) => b.jobs,
    ["Job", "Action", "Filter", "State", "Progress", "Submitted"],
    (j) => `<tr data-testid="job-row" data-job-id="${esc(j.job_id)}"><td>${jobLink(j.job_id)}</td><td>${esc(j.action)}</td><td class="mono">${filterText(j.filter)}</td>
      <td>${badge(j.state)}</td><td>${jobProgress(j)}</td><td title="${time(j.created_at_ms)}">${ago(j.created_at_ms)}</td></tr>`,
    "No bulk job. Select runs on the Runs page and apply an action to every matching one.");
}

// A deployment's build: what it exports (each workflow's input and output
// schema), what its steps may reach, and a form that grants more (runs
// pinned to the build get it at their next activation).
function deploymentPage(target) {
  main.innerHTML = `<p class="muted">Loading deployment…</p>`;
  const grants = (g) => [...g.http.map((h) => `http ${h}`), ...g.dirs.map((x) => `dir ${x}`), ...g.env.map((x) => `env ${x}`)];
  const draw = async () => {
    try {
      const [d, c] = await Promise.all([
        api(`/v1/deployments/${encodeURIComponent(target)}`),
        api(`/v1/deployments/${encodeURIComponent(target)}/component`),
      ]);
      const schema = (v) => v ? `<pre class="wrap">${json(v)}</pre>` : '<span class="muted">any JSON (its type declares no schema)</span>';
      main.innerHTML = `
        <div class="toolbar"><a href="#/deployments">← Deployments</a></div>
        <h1>${esc(d.name)} <span class="muted mono" title="${esc(d.hash)}">${esc(d.hash.slice(0, 16))}…</span></h1>
        <div class="grid">
          <div class="card"><strong>Grants</strong>
            <ul data-testid="grants">${grants(d.grants).map((g) => `<li class="mono">${esc(g)}</li>`).join("") || '<li class="muted">none: its steps reach nothing outside</li>'}</ul>
            <p><select data-testid="grant-kind"><option value="http">HTTP host</option><option value="dirs">directory</option><option value="env">environment variable</option></select>
            <input data-testid="grant-value" class="mono" placeholder="api.example.com"> <button data-testid="grant">Grant</button></p>
            <p class="muted">Runs pinned to this build get a grant at their next activation; retry a run that failed for want of one.</p></div>
          <div class="card"><strong>Steps</strong><ul>${c.steps.map((st) => `<li class="mono">${esc(st.name)}</li>`).join("")}</ul></div>
          <div class="card"><strong>Upgrade</strong>
            <p class="muted">Move the live runs of ${esc(d.name)}'s older builds to this build, each only if its journal replays here; the others stay pinned, listed with their first divergence.</p>
            <p><button data-testid="upgrade-dry-run">Judge (dry run)</button> <button data-testid="upgrade">Upgrade live runs</button></p></div>
        </div>
        <h2>Workflows</h2>
        <table data-testid="workflows"><thead><tr><th>Workflow</th><th>Input</th><th>Output</th></tr></thead><tbody>
          ${c.workflows.map((w) => `<tr data-testid="workflow-row" data-workflow="${esc(w.name)}"><td><strong>${esc(w.name)}</strong></td><td>${schema(w.input_schema)}</td><td>${schema(w.output_schema)}</td></tr>`).join("")}
        </tbody></table>`;
      for (const dryRun of [true, false]) {
        document.querySelector(`[data-testid=${dryRun ? "upgrade-dry-run" : "upgrade"}]`).onclick = async () => {
          if (!dryRun && !confirm(`Move every live run of ${d.name}'s older builds that replays to build ${d.hash.slice(0, 12)}?`)) return;
          try {
            const job = await api(`/v1/deployments/${encodeURIComponent(d.name)}/upgrade`, {
              method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ to: d.hash, dry_run: dryRun }),
            });
            location.hash = `#/jobs/${encodeURIComponent(job.job_id)}`;
          } catch (e) { toast(e.message, true); }
        };
      }
      document.querySelector("[data-testid=grant]").onclick = async () => {
        const kind = document.querySelector("[data-testid=grant-kind]").value;
        const value = document.querySelector("[data-testid=grant-value]").value.trim();
        if (!value) return;
        try {
          await api(`/v1/deployments/${encodeURIComponent(target)}/grants`, {
            method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ [kind]: [value] }),
          });
          toast(`Granted ${value}`);
          draw();
        } catch (e) { toast(e.message, true); }
      };
    } catch (e) { main.innerHTML = `<div class="card error">${esc(e.message)}</div>`; }
  };
  draw();
  return () => {};
}

// An upgrade job's deployment, build and mode, and its verdict in numbers.
function upgradeRows(j) {
  const u = j.upgrade, c = j.counts;
  const mode = `${u.dry_run ? "dry run: judged, none moved" : "runs moved"}${u.ramp ? `, ${u.ramp}% of them (by run ID)` : ""}`;
  return `<dt>Upgrade</dt><dd>the live runs of <strong>${esc(u.name)}</strong> to build <span class="mono" title="${esc(u.to)}">${esc(u.to.slice(0, 12))}</span> (${mode})</dd>
    <dt>Verdict</dt><dd data-testid="upgrade-verdict">${c.done} ${u.dry_run ? "would move" : "moved"}, ${c.failed} stay pinned, ${c.skipped} not concerned</dd>`;
}

// The runs an upgrade leaves pinned, each with its first divergence.
function upgradeVerdicts(j) {
  if (!j.errors.length) return `<p class="muted" data-testid="upgrade-pinned">Every run judged replays on the new build.</p>`;
  return `<h2>Stay pinned: their journal does not replay on the new build</h2>
    <table data-testid="upgrade-pinned"><thead><tr><th>Run</th><th>First divergence</th></tr></thead><tbody>
    ${j.errors.map((e) => `<tr data-testid="pinned-row"><td>${runLink(e.run_id)}</td><td class="error wrap">${esc(e.error)}</td></tr>`).join("")}</tbody></table>`;
}

function jobPage(jobId) {
  main.innerHTML = `<h1>Job <span class="mono">${esc(jobId)}</span></h1><div id="job"><p class="muted">Loading…</p></div>`;
  return every(1000, async () => {
    try {
      const j = await api(`/v1/jobs/${encodeURIComponent(jobId)}`);
      document.getElementById("job").innerHTML = `
        <div class="card"><dl>
          <dt>Action</dt><dd>${esc(j.action)}${j.force ? " (force)" : ""}${j.reason ? ` <span class="muted">${esc(j.reason)}</span>` : ""}</dd>
          <dt>Runs</dt><dd class="mono">${filterText(j.filter)}, admitted before ${time(j.filter.until_ms)}</dd>
          ${j.upgrade ? upgradeRows(j) : ""}
          <dt>State</dt><dd data-testid="job-state">${badge(j.state)} ${j.state === "running" ? '<button data-testid="job-cancel" id="job-cancel">Stop</button>' : ""}</dd>
          <dt>Progress</dt><dd>${jobProgress(j)}</dd>
          <dt>Submitted</dt><dd>${time(j.created_at_ms)}</dd>
          ${j.finished_at_ms ? `<dt>Ended</dt><dd>${time(j.finished_at_ms)} (${duration(j.finished_at_ms - j.created_at_ms)})</dd>` : ""}
          ${j.worker ? `<dt>Worker</dt><dd class="mono">${esc(j.worker)}</dd>` : ""}
        </dl></div>
        ${j.upgrade ? upgradeVerdicts(j) : j.errors.length ? `<h2>Failed</h2><table data-testid="job-errors"><tbody>${j.errors.map((e) => `<tr><td>${runLink(e.run_id)}</td><td class="error wrap">${esc(e.error)}</td></tr>`).join("")}</tbody></table>` : ""}`;
      const cancel = document.getElementById("job-cancel");
      if (cancel) cancel.onclick = async () => {
        try { await api(`/v1/jobs/${encodeURIComponent(jobId)}/cancel`, { method: "POST" }); toast("Job stopped"); } catch (e) { toast(e.message, true); }
      };
    } catch (e) { toast(e.message, true); }
  });
}

// What becomes of a child when its parent ends, in words.
function closeText(close) {
  return close === "abandon" ? "goes on when this run ends"
    : close === "wait" ? "this run's end waits for it" : "cancelled when this run ends";
}

// What a waiting run waits on, in words: a hook's token with how to
// resume it, a timer's due time, another run.
function waitText(w) {
  if (w.kind === "hook") return `hook <code data-testid="waiting-token">${esc(w.token)}</code> <span class="muted">resume: <code>POST /v1/hooks/${esc(encodeURIComponent(w.token))}/resume</code></span>`;
  if (w.kind === "timer") return `a timer due ${time(w.due_at_ms)} (${ago(w.due_at_ms)})`;
  return `run ${runLink(w.run_id)}`;
}

// A run's place in its concurrency group, in words.
function slotText(c) {
  const state = c.state === "queued" ? `queued, ${c.position} in line`
    : c.state === "deferred" ? "asks for a slot when it comes due"
    : c.state === "evicting" ? "holds a slot, being cancelled for a newer run" : "holds a slot";
  return `key <code>${esc(c.key)}</code> (limit ${c.limit}, priority ${c.priority}): ${esc(state)}`;
}

// A row's status; a child's row is its start, and what the child has come
// to is its own run's status.
function rowStatus(row, run) {
  if (row.kind !== "child" || row.status !== "completed") return row.status;
  const child = (run.children || []).find((c) => c.run_id === row.run_id);
  return child ? child.status ?? "gone" : "started";
}

// A step's attempts, each with its start, duration and error: shown when
// one failed, labelled as the attempt's (the step itself may have
// completed after it).
function attemptsText(row, end) {
  const log = row.attempt_log || [];
  if (!log.some((a) => a.error)) return "";
  return `<details class="attempts" data-testid="attempts"${row.status === "completed" ? "" : " open"}><summary class="muted">${log.length} attempt${log.length === 1 ? "" : "s"}${row.status === "completed" ? `, ${log.filter((a) => a.error).length} failed before it completed` : ""}</summary>
    <table class="inner"><tbody>${log.map((a) => `<tr data-testid="attempt-row" data-attempt="${a.attempt}"><td>attempt ${a.attempt}</td><td title="${time(a.started_at_ms)}">${time(a.started_at_ms)}</td>
      <td>${duration((a.ended_at_ms ?? end) - a.started_at_ms)}</td>
      <td>${a.error ? `<span class="muted">${a.lost_with ? "lost with its worker:" : "failed:"}</span> <span class="error wrap">${esc(a.error)}</span>` : a.ended_at_ms ? "succeeded" : "running"}</td></tr>`).join("")}</tbody></table></details>`;
}

// The payloads a hook (created by command `hook`) received, in order:
// each `hook_received` answers the `hook_next` of the same command.
function payloads(journal, hook) {
  const waits = new Set(journal.filter((e) => e.kind === "hook_next" && e.hook === hook).map((e) => e.command));
  return journal.filter((e) => e.kind === "hook_received" && waits.has(e.command));
}

// What a stream shows: each chunk on a line of its own (a string as is,
// anything else as JSON), except a chunk that is a `{"token": "..."}`,
// which continues the text of the tokens before it, as a model's output
// does; a restart drops what the step's earlier attempts wrote.
function streamText(chunks) {
  const kept = [];
  for (const c of chunks) {
    if (c.kind === "restart") {
      for (let i = kept.length - 1; i >= 0; i--) {
        if (kept[i].step_id === c.step_id && kept[i].attempt < c.attempt) kept.splice(i, 1);
      }
      kept.push({ ...c, note: `[step ${c.step_id} restarted: attempt ${c.attempt}]` });
    } else if (c.kind === "data") kept.push(c);
  }
  let text = "";
  let flowing = false;
  for (const c of kept) {
    const token = c.value !== null && typeof c.value === "object" && typeof c.value.token === "string" ? c.value.token : null;
    if (token !== null && !c.note) {
      text += token;
      flowing = true;
      continue;
    }
    const line = c.note ?? (typeof c.value === "string" ? c.value : JSON.stringify(c.value));
    text += `${flowing ? "\n" : ""}${line}\n`;
    flowing = false;
  }
  return text;
}

// The workflow's replies to a hook's payloads, by the `hook_next` command
// each answers.
function replies(journal) {
  return new Map(journal.filter((e) => e.kind === "hook_replied").map((e) => [e.request, e]));
}

function runPage(runId) {
  main.innerHTML = `<p class="muted">Loading run…</p>`;
  let source = null;
  let pending = false;
  // Set once the page is left: a render still awaiting the API then draws
  // nothing and follows nothing.
  let gone = false;
  // The run's streams, each followed live: name -> { chunks, closed, source }.
  const streams = new Map();
  const follow = (name) => {
    const s = { chunks: [], closed: false, source: null };
    streams.set(name, s);
    s.source = new EventSource(`/v1/runs/${encodeURIComponent(runId)}/streams/${encodeURIComponent(name)}`);
    const take = (e) => {
      const chunk = JSON.parse(e.data);
      if (s.chunks.length && s.chunks[s.chunks.length - 1].index >= chunk.index) return;
      s.chunks.push(chunk);
      if (chunk.kind === "closed") s.closed = true;
      drawStream(name);
    };
    for (const kind of ["data", "restart", "closed"]) s.source.addEventListener(kind, take);
    // The server ends the stream at its close or the run's end.
    s.source.onerror = () => { s.source.close(); s.done = true; drawStream(name); };
  };
  const drawStream = (name) => {
    const s = streams.get(name);
    const el = main.querySelector(`[data-testid=stream][data-stream="${CSS.escape(name)}"]`);
    if (!s || !el) return;
    el.textContent = streamText(s.chunks);
    const state = main.querySelector(`[data-testid=stream-state][data-stream="${CSS.escape(name)}"]`);
    if (state) state.textContent = s.closed ? "closed" : s.done ? "ended" : "live";
  };
  const render = async () => {
    if (pending) return;
    pending = true;
    try {
      const d = await api(`/v1/runs/${encodeURIComponent(runId)}/detail`);
      const listed = await api(`/v1/runs/${encodeURIComponent(runId)}/streams`);
      if (gone) return;
      for (const s of listed.streams) if (!streams.has(s.name)) follow(s.name);
      // Not while a payload is being typed: the redraw would take the
      // focus; the next one after it draws.
      if (document.activeElement && document.activeElement.dataset.testid === "resume-payload") return;
      draw(d);
      for (const name of streams.keys()) drawStream(name);
    } catch (e) {
      if (!gone) main.innerHTML = `<div class="card error">${esc(e.message)}</div>`;
    } finally { pending = false; }
  };
  // A payload being written survives the page's redraws.
  const draft = { token: "", text: "", error: "", schemas: new Map() };
  const wireResume = (r) => {
    const form = main.querySelector("[data-testid=resume-form]");
    if (!form) return;
    const select = form.querySelector("[data-testid=resume-token]");
    const area = form.querySelector("[data-testid=resume-payload]");
    const error = form.querySelector("[data-testid=resume-error]");
    const schema = form.querySelector("[data-testid=resume-schema] pre");
    if (draft.token && [...select.options].some((o) => o.value === draft.token)) select.value = draft.token;
    area.value = draft.text;
    error.textContent = draft.error;
    // The hook's payload type, as its workflow declared it.
    const showSchema = async () => {
      const token = select.value;
      if (!draft.schemas.has(token)) {
        draft.schemas.set(token, api(`/v1/hooks/${encodeURIComponent(token)}`).then((h) => h.payload_schema ?? null).catch(() => null));
      }
      const found = await draft.schemas.get(token);
      if (!gone) schema.textContent = found ? JSON.stringify(found, null, 2) : "any JSON (its type declares no schema)";
    };
    showSchema();
    select.onchange = () => { draft.token = select.value; showSchema(); };
    area.oninput = () => { draft.text = area.value; };
    form.querySelector("[data-testid=resume]").onclick = async () => {
      draft.token = select.value;
      let payload;
      try { payload = JSON.parse(area.value); } catch (e) {
        draft.error = `not JSON: ${e.message}`;
        error.textContent = draft.error;
        return;
      }
      try {
        await api(`/v1/hooks/${encodeURIComponent(draft.token)}/resume`, {
          method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload),
        });
        draft.text = "";
        draft.error = "";
        toast("Payload delivered");
        render();
      } catch (e) {
        // The server checks the payload against the hook's type and names
        // each place it does not fit; nothing was delivered.
        draft.error = e.message;
        error.textContent = draft.error;
      }
    };
  };
  // The OpenTelemetry trace its admission journaled, if any.
  const traceOf = (d) => (d.journal || []).find((e) => e.kind === "traced")?.trace_id;
  const draw = (d) => {
    const r = d.run;
    const end = ended(r.status) ? r.updated_at_ms : d.now_ms;
    const span = Math.max(1, end - r.created_at_ms);
    const bar = (row) => {
      const left = ((row.started_at_ms - r.created_at_ms) / span) * 100;
      const width = (((row.ended_at_ms ?? end) - row.started_at_ms) / span) * 100;
      return `<div class="bar"><span class="${esc(row.status)}" style="left:${left.toFixed(2)}%;width:${Math.max(width, 0.5).toFixed(2)}%"></span></div>`;
    };
    const hooks = d.timeline.filter((row) => row.kind === "hook");
    const answered = replies(d.journal);
    const children = d.timeline.filter((row) => row.kind === "child" || row.kind === "await_run");
    main.innerHTML = `
      <div class="toolbar"><a href="#/runs">← Runs</a></div>
      <h1>${esc(r.workflow)} ${badge(r.status)}</h1>
      <div class="grid">
        <div class="card"><dl class="facts">
          <dt>Run ID</dt><dd class="mono" data-testid="run-id">${esc(r.run_id)}</dd>
          <dt>Component</dt><dd class="mono" title="${esc(r.component_hash)}">${esc(r.component_hash.slice(0, 16))}…</dd>
          <dt>Started</dt><dd>${time(r.created_at_ms)} (${ago(r.created_at_ms)})</dd>
          <dt>${ended(r.status) ? "Ended" : "Updated"}</dt><dd>${time(r.updated_at_ms)}</dd>
          <dt>Duration</dt><dd>${duration(end - r.created_at_ms)}</dd>
          ${r.wake_at_ms ? `<dt>Wakes</dt><dd>${time(r.wake_at_ms)} (${ago(r.wake_at_ms)})</dd>` : ""}
          ${d.journal.some((e) => e.kind === "run_moved") ? `<dt>Moved</dt><dd data-testid="moves">${d.journal.filter((e) => e.kind === "run_moved").map((e) => `to build <span class="mono" title="${esc(e.to)}">${esc(e.to.slice(0, 12))}</span> ${time(e.at_ms)} by ${esc(e.by)}`).join("<br>")}</dd>` : ""}
          ${r.paused ? `<dt>Paused</dt><dd data-testid="paused">${r.status === "paused" ? "" : "stopping at its next wait: "}by ${esc(r.paused.by)}, ${time(r.paused.at_ms)} (${ago(r.paused.at_ms)}); no code of it runs, payloads queue</dd>` : ""}
          ${(r.waiting_on || []).length ? `<dt>Waiting on</dt><dd data-testid="waiting-on">${r.waiting_on.map(waitText).join("<br>")}</dd>` : ""}
          ${r.concurrency ? `<dt>Concurrency</dt><dd data-testid="concurrency">${slotText(r.concurrency)}</dd>` : ""}
          ${Object.keys(r.attributes || {}).length ? `<dt>Attributes</dt><dd data-testid="attributes">${Object.entries(r.attributes).map(([k, v]) => `<span class="mono">${esc(k)}=${esc(v)}</span>`).join(" ")}</dd>` : ""}
          ${traceOf(d) ? `<dt>Trace</dt><dd class="mono" data-testid="trace" title="OpenTelemetry trace ID: find the run's spans by it">${esc(traceOf(d))}</dd>` : ""}
          ${r.continued_as ? `<dt>Continued as</dt><dd class="mono"><a data-testid="continued-as" href="#/runs/${encodeURIComponent(r.continued_as)}">${esc(r.continued_as)}</a></dd>` : ""}
          ${r.parent_run_id ? `<dt>Parent</dt><dd class="mono"><a data-testid="parent" href="#/runs/${encodeURIComponent(r.parent_run_id)}">${esc(r.parent_run_id)}</a></dd>` : ""}
        </dl>
        ${ended(r.status) ? `<p><button class="danger" id="delete" data-testid="delete">Delete run</button></p>` : `<p><button class="danger" id="cancel" data-testid="cancel">Cancel run</button></p>`}
        ${r.status === "failed" ? `<p><button id="retry" data-testid="retry">Retry from the failed step</button></p>` : ""}
        ${ended(r.status) ? "" : r.paused || r.status === "paused" ? `<p><button id="resume" data-testid="resume">Resume run</button></p>` : `<p><button id="pause" data-testid="pause" title="No step, timer or payload reaches its code until it is resumed">Pause run</button></p>`}
        <p><button id="share" data-testid="share" title="A link with a token that may only read this run, for 24 hours">Share a read-only link</button>
        ${shareLinks[r.run_id] ? `<input class="mono" data-testid="share-link" readonly value="${esc(shareLinks[r.run_id])}">` : ""}</p>
        </div>
        <div class="card"><strong>Input</strong><pre data-testid="input">${json(r.input)}</pre></div>
        ${r.error ? `<div class="card"><strong class="error">Error · ${esc(r.error.kind)}</strong><pre data-testid="error">${esc(r.error.message)}</pre></div>` : ""}
        ${r.output !== null && r.output !== undefined ? `<div class="card"><strong>Output</strong><pre data-testid="output">${json(r.output)}</pre></div>` : ""}
      </div>
      <h2>Timeline <span class="muted">(${d.timeline.length} command${d.timeline.length === 1 ? "" : "s"})</span></h2>
      ${d.timeline.length === 0 ? `<div class="card empty">Nothing scheduled yet.</div>` : `
      <table data-testid="timeline"><thead><tr><th>#</th><th>Kind</th><th>Name</th><th>Step ID / run</th><th>Status</th><th>Attempts</th><th>Started</th><th>Duration</th><th></th><th>Error / retry</th></tr></thead><tbody>
      ${d.timeline.map((row) => `<tr data-testid="timeline-row" data-kind="${esc(row.kind)}">
        <td>${row.command}</td><td>${esc(row.kind.replace("_", " "))}</td><td><strong>${esc(row.name)}</strong></td>
        <td class="mono" data-testid="step-id">${row.step_id ? esc(row.step_id) : row.run_id ? `<a href="#/runs/${encodeURIComponent(row.run_id)}">${esc(row.run_id)}</a>` : ""}</td>
        <td data-testid="row-status">${badge(rowStatus(row, r))}</td><td>${row.kind === "step" ? row.attempts : ""}</td>
        <td title="${time(row.started_at_ms)}">+${duration(row.started_at_ms - r.created_at_ms)}</td>
        <td>${duration((row.ended_at_ms ?? end) - row.started_at_ms)}</td>
        <td>${bar(row)}</td>
        <td>${row.throttled_ms ? `<div class="muted" data-testid="throttled">waited ${duration(row.throttled_ms)} for its step limits</div>` : ""}${row.error && row.status === "failed" ? `<span class="error wrap">${esc(row.error)}</span>` : row.error && row.kind !== "step" ? `<span class="error wrap">${esc(row.error)}</span>` : ""}${attemptsText(row, end)}${row.due_at_ms && !row.ended_at_ms ? `<div class="muted">${row.kind === "timer" ? "fires" : "retry"} ${time(row.due_at_ms)} (${ago(row.due_at_ms)})</div>` : ""}</td>
      </tr>`).join("")}</tbody></table>`}
      ${hooks.length ? `<h2>Hooks</h2><table data-testid="hooks"><thead><tr><th>Token</th><th>Status</th><th>Created</th><th>Payloads, in order</th></tr></thead><tbody>
        ${hooks.map((h) => `<tr><td class="mono">${esc(h.name)}</td><td>${badge(h.status === "completed" ? "closed" : h.status)}</td><td>+${duration(h.started_at_ms - r.created_at_ms)}</td>
          <td class="mono">${payloads(d.journal, h.command).map((p) => `<div>${esc(time(p.at_ms))} · ${esc(p.payload)}${answered.has(p.command) ? ` <span class="muted">→ replied</span> <span data-testid="hook-reply">${esc(answered.get(p.command).reply)}</span>` : ""}</div>`).join("") || '<span class="muted">none yet</span>'}${h.error ? `<div class="error wrap">${esc(h.error)}</div>` : ""}</td></tr>`).join("")}</tbody></table>` : ""}
      ${!ended(r.status) && (r.waiting_on || []).some((w) => w.kind === "hook") ? `<div class="card" data-testid="resume-form"><strong>Resume a hook</strong>
        <p><select data-testid="resume-token">${r.waiting_on.filter((w) => w.kind === "hook").map((w) => `<option>${esc(w.token)}</option>`).join("")}</select></p>
        <details data-testid="resume-schema"><summary class="muted">payload type</summary><pre class="wrap"></pre></details>
        <textarea data-testid="resume-payload" rows="4" class="mono" spellcheck="false" placeholder="JSON payload"></textarea>
        <p><button data-testid="resume">Resume</button> <span class="error wrap" data-testid="resume-error"></span></p></div>` : ""}
      ${streams.size ? `<h2>Streams</h2><div class="grid">${[...streams.keys()].map((name) => `<div class="card">
        <strong class="mono">${esc(name)}</strong> <span class="muted" data-testid="stream-state" data-stream="${esc(name)}"></span>
        <pre class="wrap" data-testid="stream" data-stream="${esc(name)}"></pre></div>`).join("")}</div>` : ""}
      ${r.children && r.children.length ? `<h2>Child runs</h2><ul class="tree" data-testid="children">
        ${r.children.map((c) => `<li data-testid="child" data-close="${esc(c.close)}"><a class="mono" href="#/runs/${encodeURIComponent(c.run_id)}">${esc(c.run_id)}</a>
          <strong>${esc(c.workflow)}</strong>${c.deployment ? ` <span class="muted">on ${esc(c.deployment)}</span>` : ""}
          ${badge(c.status ?? "gone")} <span class="muted">${esc(closeText(c.close))}</span></li>`).join("")}</ul>` : ""}
      ${children.length ? `<h2>Other runs</h2><table><thead><tr><th>Workflow / run</th><th>Run</th><th>Status</th></tr></thead><tbody>
        ${children.map((c) => `<tr><td>${esc(c.name)}</td><td class="mono">${c.run_id ? `<a href="#/runs/${encodeURIComponent(c.run_id)}">${esc(c.run_id)}</a>` : ""}</td><td>${badge(rowStatus(c, r))}${c.error ? ` <span class="error">${esc(c.error)}</span>` : ""}</td></tr>`).join("")}</tbody></table>` : ""}
      <details data-testid="journal"><summary>Raw journal (${d.journal.length} entries)</summary>
        <table><thead><tr><th>Seq</th><th>Time</th><th>Kind</th><th>Fields</th></tr></thead><tbody>
        ${d.journal.map((e) => { const { seq, at_ms, kind, ...rest } = e; return `<tr><td>${seq}</td><td>${time(at_ms)}</td><td>${esc(kind)}</td><td class="mono">${esc(JSON.stringify(rest))}</td></tr>`; }).join("")}
        </tbody></table></details>`;
    wireResume(r);
    document.getElementById("share").onclick = async () => {
      try {
        const minted = await api("/v1/tokens", {
          method: "POST", headers: { "content-type": "application/json" },
          body: JSON.stringify({ scope: { kind: "read_run", run_id: r.run_id }, ttl_ms: 24 * 3600 * 1000 }),
        });
        // In the fragment: browsers never send it to a server.
        shareLinks[r.run_id] = `${location.origin}/share#run=${encodeURIComponent(r.run_id)}&token=${encodeURIComponent(minted.token)}`;
        toast("Link made: it reads this run, and nothing else, for 24 hours");
        render();
      } catch (e) { toast(e.message, true); }
    };
    const retry = document.getElementById("retry");
    if (retry) retry.onclick = async () => {
      try {
        await api(`/v1/runs/${encodeURIComponent(r.run_id)}/retry`, { method: "POST" });
        toast("Run retried");
        render();
      } catch (e) { toast(e.message, true); }
    };
    const pause = document.getElementById("pause");
    if (pause) pause.onclick = async () => {
      try {
        const after = await api(`/v1/runs/${encodeURIComponent(r.run_id)}/pause?wait_ms=5000`, { method: "POST" });
        toast(after.status === "paused" ? "Run paused" : "Pause recorded: the run stops at its next wait");
        render();
      } catch (e) { toast(e.message, true); }
    };
    const resume = document.getElementById("resume");
    if (resume) resume.onclick = async () => {
      try {
        await api(`/v1/runs/${encodeURIComponent(r.run_id)}/resume?wait_ms=5000&return_on_wait=true`, { method: "POST" });
        toast("Run resumed");
        render();
      } catch (e) { toast(e.message, true); }
    };
    const remove = document.getElementById("delete");
    if (remove) remove.onclick = async () => {
      // Everything the run stored goes, journal included (archived first
      // if the server archives).
      if (!confirm(`Delete run ${r.run_id} and its journal? This cannot be undone.`)) return;
      try {
        await api(`/v1/runs/${encodeURIComponent(r.run_id)}`, { method: "DELETE" });
        toast("Run deleted");
        location.hash = "#/runs";
      } catch (e) { toast(e.message, true); }
    };
    const cancel = document.getElementById("cancel");
    if (cancel) cancel.onclick = async () => {
      // The workflow receives the cancel and runs its cleanup; the reason
      // is recorded with it.
      const reason = prompt(`Cancel run ${r.run_id}? Its cleanup runs first. Reason:`, "");
      if (reason === null) return;
      try {
        const q = new URLSearchParams({ reason, wait_ms: "5000" });
        const after = await api(`/v1/runs/${encodeURIComponent(r.run_id)}/cancel?${q}`, { method: "POST" });
        toast(ended(after.status) ? "Run cancelled" : "Cancel requested: the run is cleaning up");
        render();
      } catch (e) { toast(e.message, true); }
    };
  };
  render();
  // Live: every update of the run redraws it.
  source = new EventSource(`/v1/runs/${encodeURIComponent(runId)}/events`);
  source.addEventListener("entry", () => render());
  source.addEventListener("run", () => render());
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) source = null; };
  const clock = setInterval(() => { if (!pending) render(); }, 5000);
  return () => {
    gone = true;
    if (source) source.close();
    for (const s of streams.values()) s.source.close();
    clearInterval(clock);
  };
}

function tablePage(title, path, pick, columns, row, empty) {
  main.innerHTML = `<h1>${title}</h1><div id="list"><p class="muted">Loading…</p></div>`;
  return every(3000, async () => {
    try {
      const items = pick(await api(path));
      document.getElementById("list").innerHTML = items.length === 0
        ? `<div class="card empty">${empty}</div>`
        : `<table data-testid="${title.toLowerCase()}-table"><thead><tr>${columns.map((c) => `<th>${c}</th>`).join("")}</tr></thead><tbody>${items.map(row).join("")}</tbody></table>`;
    } catch (e) { toast(e.message, true); }
  });
}

const runLink = (id) => id ? `<a class="mono" href="#/runs/${encodeURIComponent(id)}">${esc(id)}</a>` : "";

const pages = {
  hooks: () => tablePage("Hooks", "/v1/hooks", (b) => b.hooks,
    ["Token", "Run", "Kind", "Active", "Payloads", "Created", "Retained until", "Metadata"],
    (h) => `<tr><td class="mono">${esc(h.token)}</td><td>${runLink(h.run_id)}</td><td>${h.command === null || h.command === undefined ? "start token" : "created by the workflow"}</td>
      <td>${h.active ? "yes" : "no"}</td><td>${h.payloads}</td><td title="${time(h.created_at_ms)}">${ago(h.created_at_ms)}</td>
      <td>${h.retain_until_ms ? time(h.retain_until_ms) : ""}</td><td class="mono">${h.metadata === null || h.metadata === undefined ? "" : esc(JSON.stringify(h.metadata))}</td></tr>`,
    "No token is held."),
  events: () => tablePage("Events", "/v1/events", (b) => b.events,
    ["Key", "At", "Payload", "Runs"],
    (e) => `<tr><td class="mono">${esc(e.key)}</td><td title="${time(e.at_ms)}">${ago(e.at_ms)}</td><td class="mono">${esc(JSON.stringify(e.payload))}</td>
      <td>${e.outcomes.map((o) => `${esc(o.workflow)}: ${o.run_id ? runLink(o.run_id) : ""}${o.deduplicated ? " (deduplicated)" : ""}${o.error ? ` <span class="error">${esc(o.error)}</span>` : ""}`).join("<br>")}</td></tr>`,
    "No event was pushed."),
  // Newest first: the first build of each name is the one its starts run.
  deployments: () => tablePage("Deployments", "/v1/deployments", (b) => {
    const seen = new Set();
    return b.deployments.map((d) => ({ ...d, current: !seen.has(d.name) && seen.add(d.name) }))
      .sort((x, y) => x.name.localeCompare(y.name) || y.deployed_at_ms - x.deployed_at_ms);
  },
    ["Name", "Build", "Hash", "Workflows", "Steps", "Grants", "Limits", "Size", "Deployed"],
    (d) => `<tr data-testid="deployment-row" data-name="${esc(d.name)}" class="${d.current ? "" : "muted"}"><td><a href="#/deployments/${encodeURIComponent(d.current ? d.name : d.hash)}"><strong>${esc(d.name)}</strong></a></td>
      <td data-testid="build">${d.current ? '<span class="badge completed">current</span>' : '<span class="badge cancelled" title="a newer build of the name was deployed; runs pinned to this one still run on it">superseded</span>'}</td>
      <td class="mono" title="${esc(d.hash)}">${esc(d.hash.slice(0, 16))}…</td>
      <td>${d.workflows.map(esc).join("<br>")}</td><td>${d.steps.map(esc).join("<br>")}</td>
      <td class="mono">${[...d.grants.http.map((h) => `http ${h}`), ...d.grants.dirs.map((x) => `dir ${x}`), ...d.grants.env.map((x) => `env ${x}`)].map(esc).join("<br>") || '<span class="muted">none</span>'}</td>
      <td>${d.limits.max_memory_mib ? `${d.limits.max_memory_mib} MiB` : ""} ${d.limits.step_timeout_ms ? `${duration(d.limits.step_timeout_ms)} / attempt` : ""}</td>
      <td>${(d.size_bytes / 1024).toFixed(0)} KiB</td><td title="${time(d.deployed_at_ms)}">${ago(d.deployed_at_ms)}</td></tr>`,
    "Nothing is deployed. Deploy with <code>keel deploy COMPONENT.wasm</code>."),
  limits: () => tablePage("Limits", "/v1/limits", (b) => b.limits,
    ["Workflow", "Key", "Limit", "Declared", "In progress", "Queued", ""],
    (l) => `<tr data-testid="limit-row" data-workflow="${esc(l.workflow)}" data-key="${esc(l.key ?? "")}"><td>${esc(l.workflow)}</td>
      <td class="mono">${l.key === null || l.key === undefined ? '<span class="muted">every key</span>' : esc(l.key)}</td>
      <td data-testid="limit">${l.limit}${l.overridden === null || l.overridden === undefined ? "" : ' <span class="muted">(set by an operator)</span>'}</td>
      <td>${l.declared ?? ""}</td><td data-testid="in-progress">${l.in_progress}</td>
      <td><a href="#/runs?status=queued" data-testid="queued">${l.queued}</a></td>
      <td>${l.limit === 0 ? `<button data-limit="resume" data-workflow="${esc(l.workflow)}" data-key="${esc(l.key ?? "")}">Resume</button>`
        : `<button data-limit="pause" data-workflow="${esc(l.workflow)}" data-key="${esc(l.key ?? "")}">Pause</button>`}</td></tr>`,
    "No concurrency group yet. A workflow declares one with <code>#[workflow(concurrency(key = ..., limit = N))]</code>."),
  workers: () => tablePage("Workers", "/v1/workers", (b) => b.workers,
    ["Worker", "Host", "PID", "Started", "Last heartbeat", "Runs held", "State"],
    (w) => `<tr><td class="mono">${esc(w.worker_id)}</td><td>${esc(w.host)}</td><td>${w.pid}</td><td>${ago(w.started_at_ms)}</td><td>${ago(w.heartbeat_at_ms)}</td><td>${w.runs}</td>
      <td>${w.gone ? '<span class="badge failed" title="no heartbeat for 3 lease times: killed, or cut off from the store">gone</span>' : '<span class="badge completed">alive</span>'}</td></tr>`,
    "No worker announced itself."),
};

// ---- schedules -----------------------------------------------------------

const scheduleLink = (name) => `<a href="#/schedules/${encodeURIComponent(name)}">${esc(name)}</a>`;

function scheduleState(s) {
  if (!s.paused) return '<span class="badge running" data-testid="schedule-state">active</span>';
  return `<span class="badge waiting" data-testid="schedule-state">paused</span>${s.note ? ` <span class="muted">${esc(s.note)}</span>` : ""}`;
}

function pauseButton(s) {
  return s.paused
    ? `<button data-action="resume" data-schedule="${esc(s.name)}">Resume</button>`
    : `<button data-action="pause" data-schedule="${esc(s.name)}">Pause</button>`;
}

// Pause, resume and trigger buttons, wherever a schedule is drawn.
async function scheduleAction(event) {
  const button = event.target.closest("button[data-action][data-schedule]");
  if (!button) return;
  const { action, schedule } = button.dataset;
  try {
    const path = `/v1/schedules/${encodeURIComponent(schedule)}/${action}`;
    const body = await api(path, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
    toast(action === "trigger" ? `Fired: ${body.outcome}${body.run_id ? ` (${body.run_id})` : ""}` : `Schedule ${action}d`);
    route();
  } catch (e) { toast(e.message, true); }
}

function schedulesPage() {
  return tablePage("Schedules", "/v1/schedules", (b) => b.schedules,
    ["Name", "Workflow", "Spec", "Next fire", "Overlap", "State", "Missed", "Last run", ""],
    (s) => `<tr data-testid="schedule-row" data-schedule="${esc(s.name)}"><td><strong>${scheduleLink(s.name)}</strong></td><td>${esc(s.workflow)}</td>
      <td data-testid="schedule-spec">${esc(s.description)}</td><td title="${time(s.next_fire_ms)}">${s.paused || !s.next_fire_ms ? "" : ago(s.next_fire_ms)}</td>
      <td>${esc(s.overlap)}</td><td>${scheduleState(s)}</td><td>${s.missed}</td><td>${runLink(s.last_run_id)}</td><td>${pauseButton(s)}</td></tr>`,
    "No schedule. Create one with <code>keel schedules create NAME WORKFLOW --cron EXPR</code>.");
}

// A time as a datetime-local input's value, in the browser's time zone.
function localInput(ms) {
  const d = new Date(ms - new Date(ms).getTimezoneOffset() * 60000);
  return d.toISOString().slice(0, 19);
}

// The backfill form: every fire time in the range, started now.
main.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-testid=backfill]");
  if (!form) return;
  event.preventDefault();
  const body = { from_ms: new Date(form.elements.from.value).getTime(), to_ms: new Date(form.elements.to.value).getTime() };
  try {
    const path = `/v1/schedules/${encodeURIComponent(form.dataset.schedule)}/backfill`;
    const done = await api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    toast(`Backfilled ${done.fires.length} fire${done.fires.length === 1 ? "" : "s"}`);
    route();
  } catch (e) { toast(e.message, true); }
});

function schedulePage(name) {
  main.innerHTML = `<h1>Schedule ${esc(name)}</h1><div id="schedule"><p class="muted">Loading…</p></div>
    <form class="card backfill" data-testid="backfill" data-schedule="${esc(name)}">
      <strong>Backfill</strong> every fire time from
      <input type="datetime-local" name="from" step="1" required aria-label="Backfill from" value="${localInput(Date.now() - 86400000)}">
      to <input type="datetime-local" name="to" step="1" required aria-label="Backfill to" value="${localInput(Date.now())}">
      <button type="submit">Backfill</button>
      <span class="muted">(your local time; each fire time starts a run, as a catch-up would)</span>
    </form>`;
  return every(3000, async () => {
    try {
      const s = await api(`/v1/schedules/${encodeURIComponent(name)}`);
      const fires = s.recent.slice().reverse();
      document.getElementById("schedule").innerHTML = `
        <div class="card"><dl>
          <dt>Spec</dt><dd data-testid="schedule-spec">${esc(s.description)}</dd>
          <dt>Workflow</dt><dd>${esc(s.workflow)}${s.deployment ? ` on ${esc(s.deployment)}` : ""}</dd>
          <dt>Input</dt><dd class="mono">${esc(JSON.stringify(s.input))}</dd>
          <dt>Overlap</dt><dd>${esc(s.overlap)}, catch-up window ${duration(s.catchup_window_ms)}</dd>
          <dt>State</dt><dd>${scheduleState(s)} ${pauseButton(s)} <button data-action="trigger" data-schedule="${esc(s.name)}" data-testid="trigger">Trigger now</button></dd>
          <dt>Missed</dt><dd>${s.missed}</dd>
        </dl></div>
        <h2>Next fire times</h2>
        <ul data-testid="upcoming">${s.upcoming_ms.map((t) => `<li>${time(t)} <span class="muted">(${ago(t)})</span></li>`).join("") || '<li class="muted">none while paused or past its end</li>'}</ul>
        <h2>Latest fires</h2>
        ${fires.length === 0 ? '<div class="card empty">No fire yet.</div>' : `<table data-testid="fires-table"><thead><tr><th>Nominal time</th><th>Decided</th><th>Outcome</th><th>Run</th><th>Status</th></tr></thead><tbody>
        ${fires.map((f) => `<tr data-testid="fire-row"><td>${time(f.nominal_ms)}</td><td>${duration(f.at_ms - f.nominal_ms)} late</td><td>${esc(f.outcome)}${f.error ? ` <span class="error">${esc(f.error)}</span>` : ""}</td>
          <td>${runLink(f.run_id)}</td><td>${f.run_status ? badge(f.run_status) : ""}</td></tr>`).join("")}</tbody></table>`}`;
    } catch (e) { toast(e.message, true); }
  });
}

main.addEventListener("click", scheduleAction);

// Pause (limit 0) and resume (remove the override) buttons of the limits page.
main.addEventListener("click", async (event) => {
  const button = event.target.closest("button[data-limit]");
  if (!button) return;
  const { limit, workflow, key } = button.dataset;
  const body = key ? { key } : {};
  if (limit === "pause") body.limit = 0;
  const path = `/v1/limits/${encodeURIComponent(workflow)}${limit === "pause" ? "" : "/reset"}`;
  try {
    const change = await api(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    toast(limit === "pause" ? "Paused: new runs queue" : `Resumed: ${change.started.length} run(s) started`);
    route();
  } catch (e) { toast(e.message, true); }
});

function route() {
  stop();
  const [path, query] = (location.hash.slice(1) || "/runs").split("?");
  const parts = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query || "");
  document.querySelectorAll("[data-nav]").forEach((a) => a.classList.toggle("active", a.dataset.nav === parts[0]));
  if (parts[0] === "runs" && parts[1]) stop = runPage(decodeURIComponent(parts.slice(1).join("/")));
  else if (parts[0] === "schedules" && parts[1]) stop = schedulePage(decodeURIComponent(parts.slice(1).join("/")));
  else if (parts[0] === "schedules") stop = schedulesPage();
  else if (parts[0] === "jobs" && parts[1]) stop = jobPage(decodeURIComponent(parts.slice(1).join("/")));
  else if (parts[0] === "deployments" && parts[1]) stop = deploymentPage(decodeURIComponent(parts.slice(1).join("/")));
  else if (parts[0] === "jobs") stop = jobsPage();
  else if (pages[parts[0]]) stop = pages[parts[0]]();
  else stop = runsPage(params);
}

window.addEventListener("hashchange", route);
// The store and version are told to a caller with the server's token only.
api("/healthz").then((h) => { if (h.store) document.getElementById("store").textContent = `${h.store} · keel ${h.version}`; }).catch(() => {});
route();
