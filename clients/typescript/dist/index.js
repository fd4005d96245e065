// The keel client: start runs safely (the client picks the run ID, so a
// lost answer is retried into the same run), read their results, follow
// their events and streams, resume their hooks and wait for replies. Types come from the server's OpenAPI
// document (`schema.ts`, generated); errors are classes by kind.
/** An error the server answered with: its kind, message and IDs. */
export class KeelError extends Error {
    kind;
    status;
    ids;
    constructor(
    /** Stable, snake case: `run_not_found`, `hook_conflict`, ... */
    kind, message, 
    /** The HTTP status (0 when no answer came). */
    status, 
    /** The IDs the error names (`run_id`, `token`, ...). */
    ids = {}) {
        super(message);
        this.kind = kind;
        this.status = status;
        this.ids = ids;
        this.name = new.target.name;
    }
}
/** The start hook token is held by another run, `conflictingRunId`. */
export class HookConflict extends KeelError {
    get token() {
        return this.ids.token;
    }
    get conflictingRunId() {
        return this.ids.conflicting_run_id;
    }
}
/** The workflow's idempotency key admitted `existingRunId` already. */
export class IdempotencyCollision extends KeelError {
    get existingRunId() {
        return this.ids.existing_run_id;
    }
    get key() {
        return this.ids.key;
    }
}
/** The input or payload does not fit its schema, at `problems`' paths. */
export class InvalidInput extends KeelError {
    problems;
    constructor(kind, message, status, ids, problems) {
        super(kind, message, status, ids);
        this.problems = problems;
    }
    /** The JSON pointers of the places that do not fit. */
    get paths() {
        return this.problems.map((p) => p.path);
    }
}
/** A run of that ID exists already (a run ID the caller chose twice). */
export class RunExists extends KeelError {
}
/** No such run, hook, workflow, deployment or webhook. */
export class NotFound extends KeelError {
}
/** The token is missing, wrong or expired (401), or out of its scope (403). */
export class Unauthorized extends KeelError {
}
/** The run ended without completing: `run` says how. */
export class RunFailed extends KeelError {
    run;
    constructor(run) {
        super(run.error?.kind ?? run.status, run.error?.message ?? `run ${run.run_id} ended ${run.status}`, 0, { run_id: run.run_id });
        this.run = run;
    }
}
/**
 * No answer came for a start after every retry: the run may or may not
 * exist. Look it up by `runId` (`keel.run(runId).get()`), or start again
 * with the same run ID, which is safe.
 */
export class StartOutcomeUnknown extends KeelError {
    runId;
    cause;
    constructor(runId, cause) {
        super("start_outcome_unknown", `no answer to the start of run ${runId} (${String(cause)}); look it up, or start again with the same run ID`, 0, { run_id: runId });
        this.runId = runId;
        this.cause = cause;
    }
}
/** The error class for an error body of `kind`. */
function errorOf(status, body) {
    const detail = body?.error;
    if (!detail) {
        return new KeelError("internal", `the server answered ${status} without an error body`, status);
    }
    const { kind, message, ids = {}, problems = [] } = detail;
    switch (kind) {
        case "hook_conflict":
            return new HookConflict(kind, message, status, ids);
        case "idempotency_collision":
            return new IdempotencyCollision(kind, message, status, ids);
        case "invalid_input":
            return new InvalidInput(kind, message, status, ids, problems);
        case "run_exists":
            return new RunExists(kind, message, status, ids);
        case "unauthorized":
        case "forbidden":
            return new Unauthorized(kind, message, status, ids);
        default:
            return status === 404
                ? new NotFound(kind, message, status, ids)
                : new KeelError(kind, message, status, ids);
    }
}
/** A keel server. */
export class Keel {
    #url;
    #token;
    #retries;
    #retryDelayMs;
    #fetch;
    constructor(options) {
        this.#url = options.url.replace(/\/+$/, "");
        this.#token = options.token;
        this.#retries = options.retries ?? 3;
        this.#retryDelayMs = options.retryDelayMs ?? 200;
        this.#fetch = options.fetch ?? globalThis.fetch;
    }
    /**
     * Starts a run of `workflow` with `input`. The run ID is chosen before
     * the request is sent, so a start whose answer is lost is sent again
     * with the same ID: the run is admitted once, and the retry's
     * `run_exists` (or `hook_conflict` naming this run) means it was.
     */
    async start(workflow, input, options = {}) {
        const runId = options.runId ?? crypto.randomUUID();
        const body = {
            input,
            run_id: runId,
            deployment: options.deployment,
            attributes: options.attributes,
            additional_metadata: options.metadata,
            delay_ms: options.delayMs,
            timeout_ms: options.timeoutMs,
            wait_ms: options.waitMs,
            return_on_wait: options.returnOnWait,
            hook: options.token === undefined
                ? undefined
                : { token: options.token, retention_ms: options.tokenRetentionMs },
        };
        const path = `/v1/workflows/${encodeURIComponent(workflow)}/runs`;
        let lastFailure;
        for (let attempt = 0; attempt <= this.#retries; attempt++) {
            if (attempt > 0) {
                await sleep(this.#retryDelayMs * 2 ** (attempt - 1));
            }
            try {
                const run = (await this.request("POST", path, body));
                return new RunHandle(this, runId, run);
            }
            catch (e) {
                if (attempt > 0 && admittedBefore(e, runId)) {
                    const handle = this.run(runId);
                    const run = options.waitMs && !options.returnOnWait
                        ? await handle.wait({ waitMs: options.waitMs, once: true })
                        : await handle.get();
                    return new RunHandle(this, runId, run);
                }
                if (!unanswered(e)) {
                    throw e;
                }
                lastFailure = e;
            }
        }
        throw new StartOutcomeUnknown(runId, lastFailure);
    }
    /** The run `runId`. */
    run(runId) {
        return new RunHandle(this, runId);
    }
    /** Hooks: read one, resume one, ask one and read its replies. */
    hooks = {
        /** The hook holding `token`. */
        get: (token) => this.request("GET", `/v1/hooks/${encodeURIComponent(token)}`),
        /**
         * Delivers `payload` to the hook holding `token`. With `payloadId`, a
         * retry is delivered once (safe to send again after a lost answer,
         * even once the run has ended). With `waitReplyMs`, the answer carries
         * the workflow's `reply` to it if one came within that long.
         */
        resume: (token, payload, options = {}) => this.request("POST", `/v1/hooks/${encodeURIComponent(token)}/resume${query({
            payload_id: options.payloadId,
            wait_ms: options.waitMs,
            wait_reply_ms: options.waitReplyMs,
        })}`, payload),
        /**
         * Request and reply: delivers `payload` to the hook holding `token`
         * under a payload ID (chosen if not given, so a retry with the same ID
         * is delivered once) and waits up to `waitMs` (30 s) for the
         * workflow's reply. `reply` is undefined if none came yet: read it
         * later with `hooks.reply(token, payloadId)`, or ask again with the
         * same `payloadId` (delivered once).
         */
        ask: async (token, payload, options = {}) => {
            const payloadId = options.payloadId ?? crypto.randomUUID();
            const run = await this.hooks.resume(token, payload, {
                payloadId,
                waitReplyMs: Math.min(options.waitMs ?? 30_000, 60_000),
            });
            return { run, payloadId, reply: run.reply ?? undefined };
        },
        /**
         * The workflow's reply to the payload of ID `payloadId` delivered to
         * `token`, waiting up to `waitMs` for it (`reply` undefined until it
         * comes).
         */
        reply: (token, payloadId, options = {}) => this.request("GET", `/v1/hooks/${encodeURIComponent(token)}/replies/${encodeURIComponent(payloadId)}${query({
            wait_ms: options.waitMs === undefined ? undefined : Math.min(options.waitMs, 60_000),
        })}`),
    };
    /** The pause before the first retry, doubled after each. */
    get retryDelayMs() {
        return this.#retryDelayMs;
    }
    /** How many times a broken request is sent again. */
    get retries() {
        return this.#retries;
    }
    /** Mints a scoped token (needs the server's own token). */
    createToken(scope, options = {}) {
        return this.request("POST", "/v1/tokens", { scope, ttl_ms: options.ttlMs });
    }
    /** A JSON request; the parsed answer, or the error it was. */
    async request(method, path, body) {
        const response = await this.send(method, path, body);
        const text = await response.text();
        const value = text ? JSON.parse(text) : undefined;
        if (!response.ok) {
            throw errorOf(response.status, value);
        }
        return value;
    }
    /** The raw response to a request (for streams). */
    async send(method, path, body, accept = "application/json", extra = {}) {
        const headers = { accept, ...extra };
        if (this.#token) {
            headers.authorization = `Bearer ${this.#token}`;
        }
        if (body !== undefined) {
            headers["content-type"] = "application/json";
        }
        return this.#fetch(`${this.#url}${path}`, {
            method,
            headers,
            body: body === undefined ? undefined : JSON.stringify(body),
        });
    }
}
/** One run: its record, its result, its events. */
export class RunHandle {
    keel;
    id;
    started;
    constructor(keel, 
    /** The run's ID. */
    id, 
    /** The run as the start answered (if this handle came from a start). */
    started) {
        this.keel = keel;
        this.id = id;
        this.started = started;
    }
    /** The run now. */
    get() {
        return this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}`);
    }
    /**
     * The run once it has ended (long polls of up to `waitMs`, 30 s by
     * default; with `once`, one poll, answering the run as it then is).
     */
    async wait(options = {}) {
        const waitMs = Math.min(options.waitMs ?? 30_000, 60_000);
        for (;;) {
            const response = await this.keel.send("GET", `/v1/runs/${encodeURIComponent(this.id)}/result${query({ wait_ms: waitMs })}`);
            const value = await response.json();
            if (!response.ok) {
                throw errorOf(response.status, value);
            }
            if (response.status === 200 || options.once) {
                return value;
            }
        }
    }
    /** The run's output once it completes; `RunFailed` if it ends otherwise. */
    async result(options = {}) {
        const run = await this.wait(options);
        if (run.status !== "completed") {
            throw new RunFailed(run);
        }
        return run.output;
    }
    /** Cancels the run (its cleanup runs unless `force`). */
    cancel(options = {}) {
        return this.keel.request("POST", `/v1/runs/${encodeURIComponent(this.id)}/cancel${query({ reason: options.reason, force: options.force })}`);
    }
    /**
     * Pauses the run: no step, timer or payload reaches its code until
     * `resume` (payloads queue). Answers once its driver has stopped it
     * (`paused`), or with the run as it is after `waitMs`.
     */
    pause(options = {}) {
        return this.keel.request("POST", `/v1/runs/${encodeURIComponent(this.id)}/pause${query({ wait_ms: options.waitMs ?? 10_000 })}`);
    }
    /**
     * The run's state as its workflow's queries show it (`set_query`): read
     * by replaying its journal as it stands, live or ended; nothing is
     * written. `position` is the journal position the values hold at.
     */
    queries() {
        return this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}/queries`);
    }
    /** The value of the run's query `name`; `query_not_found` names those it set. */
    async query(name) {
        const answer = (await this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}/queries/${encodeURIComponent(name)}`));
        return answer.value;
    }
    /** Resumes the paused run where it stood; answers once it waits or ends. */
    resume(options = {}) {
        return this.keel.request("POST", `/v1/runs/${encodeURIComponent(this.id)}/resume${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`);
    }
    /**
     * Restarts the ended run from a step (its first scheduling) or a journal
     * position (`at`): the steps before keep their results, those from there
     * run again under the same step IDs (on build `on` if given, refused
     * unless the journal kept replays there). Answers once it waits or ends.
     */
    restart(point, options = {}) {
        return this.keel.request("POST", `/v1/runs/${encodeURIComponent(this.id)}/restart${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`, restartBody(point));
    }
    /**
     * Forks the run from a step or a journal position into a new run whose
     * journal carries this one's up to there (its step IDs the fork's own),
     * with `input` if given; answers with the handle of the new run.
     */
    async fork(point, options = {}) {
        const body = { ...restartBody(point), ...(point.input === undefined ? {} : { input: point.input }) };
        const run = (await this.keel.request("POST", `/v1/runs/${encodeURIComponent(this.id)}/fork${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`, body));
        return this.keel.run(run.run_id);
    }
    /** The streams the run wrote. */
    async streams() {
        const list = (await this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}/streams`));
        return list.streams;
    }
    /**
     * The chunks of the run's stream `name` from index `from` (0), as they
     * are written, until the stream is closed (its last chunk is the
     * `closed` one) or the run ends. A connection that breaks is opened
     * again after the last chunk received (up to `reconnects` times in a
     * row, the client's retries by default): no chunk is missed or given
     * twice. A `restart` chunk drops the chunks of its step's earlier
     * attempts.
     */
    async *stream(name, options = {}) {
        let next = options.from ?? 0;
        const reconnects = options.reconnects ?? this.keel.retries;
        let broken = 0;
        const path = `/v1/runs/${encodeURIComponent(this.id)}/streams/${encodeURIComponent(name)}`;
        for (;;) {
            let response;
            try {
                response = await this.keel.send("GET", `${path}${query({ from: next })}`, undefined, "text/event-stream");
            }
            catch (e) {
                if (++broken > reconnects)
                    throw e;
                await sleep(this.keel.retryDelayMs * 2 ** (broken - 1));
                continue;
            }
            if (!response.ok || !response.body) {
                throw errorOf(response.status, await response.json().catch(() => undefined));
            }
            try {
                for await (const { event, data } of serverSentEvents(response.body)) {
                    if (event === "error") {
                        throw new KeelError("internal", data, 0, { run_id: this.id });
                    }
                    const chunk = JSON.parse(data);
                    next = chunk.index + 1;
                    broken = 0;
                    yield chunk;
                    if (chunk.kind === "closed")
                        return;
                }
                return; // the server ended the stream: the run has ended
            }
            catch (e) {
                if (e instanceof KeelError || ++broken > reconnects)
                    throw e;
                await sleep(this.keel.retryDelayMs * 2 ** (broken - 1));
            }
        }
    }
    /**
     * The run's journal entries (those written already first) and its
     * record whenever it changes, as server-sent events, until it ends.
     */
    async *events() {
        const response = await this.keel.send("GET", `/v1/runs/${encodeURIComponent(this.id)}/events`, undefined, "text/event-stream");
        if (!response.ok || !response.body) {
            throw errorOf(response.status, await response.json().catch(() => undefined));
        }
        for await (const { event, data } of serverSentEvents(response.body)) {
            if (event === "entry") {
                yield { kind: "entry", entry: JSON.parse(data) };
            }
            else if (event === "run") {
                yield { kind: "run", run: JSON.parse(data) };
            }
            else if (event === "error") {
                throw new KeelError("internal", data, 0, { run_id: this.id });
            }
        }
    }
}
/** The events of a `text/event-stream` body. */
async function* serverSentEvents(body) {
    const decoder = new TextDecoder();
    let buffer = "";
    for await (const chunk of body) {
        buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
            const block = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            let event = "message";
            const data = [];
            for (const line of block.split("\n")) {
                if (line.startsWith(":"))
                    continue;
                const colon = line.indexOf(":");
                const field = colon < 0 ? line : line.slice(0, colon);
                const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
                if (field === "event")
                    event = value;
                if (field === "data")
                    data.push(value);
            }
            if (data.length > 0) {
                yield { event, data: data.join("\n") };
            }
        }
    }
}
/** Whether `e` says the run `runId` was admitted by an earlier try. */
function admittedBefore(e, runId) {
    return ((e instanceof RunExists && e.ids.run_id === runId) ||
        (e instanceof HookConflict && e.conflictingRunId === runId) ||
        (e instanceof IdempotencyCollision && e.existingRunId === runId));
}
/** Whether `e` leaves the start's outcome unknown: no answer, or one
 * saying the server could not tell. */
function unanswered(e) {
    if (!(e instanceof KeelError)) {
        return true; // fetch failed: the connection broke or never came up
    }
    return e.kind === "start_outcome_unknown" || e.status === 502 || e.status === 503 || e.status === 504;
}
/** The API's body of a restart or a fork from `point`. */
function restartBody(point) {
    const at = "at" in point ? { at: point.at } : { from_step: point.fromStep };
    return point.on === undefined ? at : { ...at, on: point.on };
}
function query(params) {
    const pairs = Object.entries(params).filter(([, v]) => v !== undefined);
    return pairs.length === 0 ? "" : `?${new URLSearchParams(pairs.map(([k, v]) => [k, String(v)]))}`;
}
function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
