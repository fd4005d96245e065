// A run shared by a link: `/share#run=RUN_ID&token=SCOPED_TOKEN`. The
// token (in the fragment, which browsers never send to the server) may
// only read that run; this page shows it, read only, until the run ends
// or the token expires.
"use strict";
const main = document.getElementById("main");
const params = new URLSearchParams(location.hash.slice(1));
const runId = params.get("run") || "";
const token = params.get("token") || "";
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
const json = (v) => esc(JSON.stringify(v, null, 2));
const time = (ms) => (ms ? new Date(ms).toLocaleString() : "");

async function load() {
  const response = await fetch(`/v1/runs/${encodeURIComponent(runId)}/detail`, {
    headers: { authorization: `Bearer ${token}`, accept: "application/json" },
  });
  const body = await response.json();
  if (!response.ok) {
    main.innerHTML = `<p class="error" data-testid="share-error">${esc(body.error?.message || response.status)}</p>`;
    return true;
  }
  const r = body.run;
  const rows = body.timeline
    .map((row) => `<tr><td>${esc(row.kind)}</td><td>${esc(row.name || "")}</td><td>${esc(row.status)}</td><td>${time(row.started_at_ms)}</td></tr>`)
    .join("");
  main.innerHTML = `
    <h1>${esc(r.workflow)} <span class="badge ${esc(r.status)}" data-testid="share-status">${esc(r.status)}</span></h1>
    <div class="card"><dl class="facts">
      <dt>Run ID</dt><dd class="mono" data-testid="share-run-id">${esc(r.run_id)}</dd>
      <dt>Started</dt><dd>${time(r.created_at_ms)}</dd>
      <dt>Updated</dt><dd>${time(r.updated_at_ms)}</dd>
    </dl></div>
    <div class="card"><strong>Input</strong><pre>${json(r.input)}</pre></div>
    ${r.output !== undefined && r.output !== null ? `<div class="card"><strong>Output</strong><pre data-testid="share-output">${json(r.output)}</pre></div>` : ""}
    ${r.error ? `<div class="card"><strong>Error</strong><pre>${esc(r.error.message)}</pre></div>` : ""}
    <div class="card"><table><thead><tr><th>kind</th><th>name</th><th>status</th><th>started</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  return ["completed", "failed", "cancelled"].includes(r.status);
}

async function follow() {
  for (;;) {
    if (await load()) return;
    await new Promise((resolve) => setTimeout(resolve, 2000));
  }
}
follow();
