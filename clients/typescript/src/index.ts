// The keel client: start runs safely (the client picks the run ID, so a
// lost answer is retried into the same run), read their results, follow
// their events and streams, resume their hooks and wait for replies. Types come from the server's OpenAPI
// document (`schema.ts`, generated); errors are classes by kind.

import type { components } from "./schema.js";

type Schemas = components["schemas"];
/** A run, as the server shows it. */
export type Run = Schemas["RunView"];
/** Every query a run's workflow set, as a replay of its journal left them. */
export type Queries = Schemas["QueriesView"];
/** A journal entry. */
export type JournalEntry = Schemas["JournalEntry"];
/** A hook. */
export type Hook = Schemas["HookView"];
/** A place where an input or a payload departs from its schema. */
export type Problem = Schemas["Problem"];
/** What a scoped token may do. */
export type Scope = Schemas["Scope"];
/** A scoped token and what it grants. */
export type ScopedToken = Schemas["TokenView"];
/** A stream a run wrote: its name, chunks, whether closed. */
export type StreamInfo = Schemas["StreamView"];
/** A chunk of a run's stream (`data`, `restart` or `closed`). */
export type Chunk = Schemas["ChunkView"];
/** The workflow's reply to a payload delivered with an ID. */
export type HookReply = Schemas["ReplyView"];

/** Where a restart or a fork starts over: a step, or a journal position. */
export type RestartPoint = { fromStep: string; on?: string } | { at: number; on?: string };

/** A payload delivered by `hooks.ask` and the workflow's reply to it. */
export interface Answer {
  /** The run the payload went to, as it was when the answer came. */
  run: Run;
  /** The payload's ID: `hooks.reply(token, payloadId)` reads the reply later. */
  payloadId: string;
  /** The workflow's reply, if it came within the wait. */
  reply?: unknown;
}

/** An error the server answered with: its kind, message and IDs. */
export class KeelError extends Error {
  constructor(
    /** Stable, snake case: `run_not_found`, `hook_conflict`, ... */
    readonly kind: string,
    message: string,
    /** The HTTP status (0 when no answer came). */
    readonly status: number,
    /** The IDs the error names (`run_id`, `token`, ...). */
    readonly ids: Record<string, string> = {},
  ) {
    super(message);
    this.name = new.target.name;
  }
}

/** The start hook token is held by another run, `conflictingRunId`. */
export class HookConflict extends KeelError {
  get token(): string | undefined {
    return this.ids.token;
  }
  get conflictingRunId(): string | undefined {
    return this.ids.conflicting_run_id;
  }
}

/** The workflow's idempotency key admitted `existingRunId` already. */
export class IdempotencyCollision extends KeelError {
  get existingRunId(): string | undefined {
    return this.ids.existing_run_id;
  }
  get key(): string | undefined {
    return this.ids.key;
  }
}

/** The input or payload does not fit its schema, at `problems`' paths. */
export class InvalidInput extends KeelError {
  constructor(
    kind: string,
    message: string,
    status: number,
    ids: Record<string, string>,
    readonly problems: Problem[],
  ) {
    super(kind, message, status, ids);
  }
  /** The JSON pointers of the places that do not fit. */
  get paths(): string[] {
    return this.problems.map((p) => p.path);
  }
}

/** A run of that ID exists already (a run ID the caller chose twice). */
export class RunExists extends KeelError {}

/** No such run, hook, workflow, deployment or webhook. */
export class NotFound extends KeelError {}

/** The token is missing, wrong or expired (401), or out of its scope (403). */
export class Unauthorized extends KeelError {}

/** The run ended without completing: `run` says how. */
export class RunFailed extends KeelError {
  constructor(readonly run: Run) {
    super(
      run.error?.kind ?? run.status,
      run.error?.message ?? `run ${run.run_id} ended ${run.status}`,
      0,
      { run_id: run.run_id },
    );
  }
}

/**
 * No answer came for a start after every retry: the run may or may not
 * exist. Look it up by `runId` (`keel.run(runId).get()`), or start again
 * with the same run ID, which is safe.
 */
export class StartOutcomeUnknown extends KeelError {
  constructor(
    readonly runId: string,
    readonly cause: unknown,
  ) {
    super(
      "start_outcome_unknown",
      `no answer to the start of run ${runId} (${String(cause)}); look it up, or start again with the same run ID`,
      0,
      { run_id: runId },
    );
  }
}

/** The error class for an error body of `kind`. */
function errorOf(status: number, body: unknown): KeelError {
  const detail = (body as { error?: Schemas["ErrorDetail"] })?.error;
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

/** How to reach a keel server. */
export interface KeelOptions {
  /** The server's URL (`http://127.0.0.1:8080`). */
  url: string;
  /** The server's token, or a scoped token. */
  token?: string;
  /** How many times a start with no answer is sent again (3). */
  retries?: number;
  /** The pause before the first retry, doubled after each (200 ms). */
  retryDelayMs?: number;
  /** The fetch to use (the global one). */
  fetch?: typeof fetch;
}

/** How to start a run. */
export interface StartOptions {
  /** The run's ID; one is chosen (a UUID) if left out. */
  runId?: string;
  /** A start hook token: at most one live run holds it. */
  token?: string;
  /** How long the token stays taken after the run ends, in ms. */
  tokenRetentionMs?: number;
  /** Searchable `key: value` attributes. */
  attributes?: Record<string, string>;
  /** Metadata the workflow reads. */
  metadata?: unknown;
  /** A deployment's name or a component hash (the latest by default). */
  deployment?: string;
  /** Start later, after this many ms. */
  delayMs?: number;
  /** The run's deadline, in ms. */
  timeoutMs?: number;
  /** Answer once the run ends or after this many ms (at most 60000). */
  waitMs?: number;
  /** With `waitMs`: answer as soon as the run waits (for a hook, say). */
  returnOnWait?: boolean;
}

/** A keel server. */
export class Keel {
  readonly #url: string;
  readonly #token?: string;
  readonly #retries: number;
  readonly #retryDelayMs: number;
  readonly #fetch: typeof fetch;

  constructor(options: KeelOptions) {
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
  async start<I = unknown>(workflow: string, input: I, options: StartOptions = {}): Promise<RunHandle> {
    const runId = options.runId ?? crypto.randomUUID();
    const body: Schemas["StartRequest"] = {
      input,
      run_id: runId,
      deployment: options.deployment,
      attributes: options.attributes,
      additional_metadata: options.metadata,
      delay_ms: options.delayMs,
      timeout_ms: options.timeoutMs,
      wait_ms: options.waitMs,
      return_on_wait: options.returnOnWait,
      hook:
        options.token === undefined
          ? undefined
          : { token: options.token, retention_ms: options.tokenRetentionMs },
    };
    const path = `/v1/workflows/${encodeURIComponent(workflow)}/runs`;
    let lastFailure: unknown;
    for (let attempt = 0; attempt <= this.#retries; attempt++) {
      if (attempt > 0) {
        await sleep(this.#retryDelayMs * 2 ** (attempt - 1));
      }
      try {
        const run = (await this.request("POST", path, body)) as Run;
        return new RunHandle(this, runId, run);
      } catch (e) {
        if (attempt > 0 && admittedBefore(e, runId)) {
          const handle = this.run(runId);
          const run =
            options.waitMs && !options.returnOnWait
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
  run(runId: string): RunHandle {
    return new RunHandle(this, runId);
  }

  /** Hooks: read one, resume one, ask one and read its replies. */
  readonly hooks = {
    /** The hook holding `token`. */
    get: (token: string): Promise<Hook> =>
      this.request("GET", `/v1/hooks/${encodeURIComponent(token)}`) as Promise<Hook>,
    /**
     * Delivers `payload` to the hook holding `token`. With `payloadId`, a
     * retry is delivered once (safe to send again after a lost answer,
     * even once the run has ended). With `waitReplyMs`, the answer carries
     * the workflow's `reply` to it if one came within that long.
     */
    resume: (
      token: string,
      payload: unknown,
      options: { payloadId?: string; waitMs?: number; waitReplyMs?: number } = {},
    ) =>
      this.request(
        "POST",
        `/v1/hooks/${encodeURIComponent(token)}/resume${query({
          payload_id: options.payloadId,
          wait_ms: options.waitMs,
          wait_reply_ms: options.waitReplyMs,
        })}`,
        payload,
      ) as Promise<Run>,
    /**
     * Request and reply: delivers `payload` to the hook holding `token`
     * under a payload ID (chosen if not given, so a retry with the same ID
     * is delivered once) and waits up to `waitMs` (30 s) for the
     * workflow's reply. `reply` is undefined if none came yet: read it
     * later with `hooks.reply(token, payloadId)`, or ask again with the
     * same `payloadId` (delivered once).
     */
    ask: async (
      token: string,
      payload: unknown,
      options: { payloadId?: string; waitMs?: number } = {},
    ): Promise<Answer> => {
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
    reply: (token: string, payloadId: string, options: { waitMs?: number } = {}): Promise<HookReply> =>
      this.request(
        "GET",
        `/v1/hooks/${encodeURIComponent(token)}/replies/${encodeURIComponent(payloadId)}${query({
          wait_ms: options.waitMs === undefined ? undefined : Math.min(options.waitMs, 60_000),
        })}`,
      ) as Promise<HookReply>,
  };

  /** The pause before the first retry, doubled after each. */
  get retryDelayMs(): number {
    return this.#retryDelayMs;
  }

  /** How many times a broken request is sent again. */
  get retries(): number {
    return this.#retries;
  }

  /** Mints a scoped token (needs the server's own token). */
  createToken(scope: Scope, options: { ttlMs?: number } = {}): Promise<ScopedToken> {
    return this.request("POST", "/v1/tokens", { scope, ttl_ms: options.ttlMs }) as Promise<ScopedToken>;
  }

  /** A JSON request; the parsed answer, or the error it was. */
  async request(method: string, path: string, body?: unknown): Promise<unknown> {
    const response = await this.send(method, path, body);
    const text = await response.text();
    const value = text ? JSON.parse(text) : undefined;
    if (!response.ok) {
      throw errorOf(response.status, value);
    }
    return value;
  }

  /** The raw response to a request (for streams). */
  async send(
    method: string,
    path: string,
    body?: unknown,
    accept = "application/json",
    extra: Record<string, string> = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { accept, ...extra };
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

/** An event of a run: a journal entry, or the run's record as it changed. */
export type RunEvent = { kind: "entry"; entry: JournalEntry } | { kind: "run"; run: Run };

/** One run: its record, its result, its events. */
export class RunHandle {
  constructor(
    private readonly keel: Keel,
    /** The run's ID. */
    readonly id: string,
    /** The run as the start answered (if this handle came from a start). */
    readonly started?: Run,
  ) {}

  /** The run now. */
  get(): Promise<Run> {
    return this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}`) as Promise<Run>;
  }

  /**
   * The run once it has ended (long polls of up to `waitMs`, 30 s by
   * default; with `once`, one poll, answering the run as it then is).
   */
  async wait(options: { waitMs?: number; once?: boolean } = {}): Promise<Run> {
    const waitMs = Math.min(options.waitMs ?? 30_000, 60_000);
    for (;;) {
      const response = await this.keel.send(
        "GET",
        `/v1/runs/${encodeURIComponent(this.id)}/result${query({ wait_ms: waitMs })}`,
      );
      const value = await response.json();
      if (!response.ok) {
        throw errorOf(response.status, value);
      }
      if (response.status === 200 || options.once) {
        return value as Run;
      }
    }
  }

  /** The run's output once it completes; `RunFailed` if it ends otherwise. */
  async result<O = unknown>(options: { waitMs?: number } = {}): Promise<O> {
    const run = await this.wait(options);
    if (run.status !== "completed") {
      throw new RunFailed(run);
    }
    return run.output as O;
  }

  /** Cancels the run (its cleanup runs unless `force`). */
  cancel(options: { reason?: string; force?: boolean } = {}): Promise<Run> {
    return this.keel.request(
      "POST",
      `/v1/runs/${encodeURIComponent(this.id)}/cancel${query({ reason: options.reason, force: options.force })}`,
    ) as Promise<Run>;
  }

  /**
   * Pauses the run: no step, timer or payload reaches its code until
   * `resume` (payloads queue). Answers once its driver has stopped it
   * (`paused`), or with the run as it is after `waitMs`.
   */
  pause(options: { waitMs?: number } = {}): Promise<Run> {
    return this.keel.request(
      "POST",
      `/v1/runs/${encodeURIComponent(this.id)}/pause${query({ wait_ms: options.waitMs ?? 10_000 })}`,
    ) as Promise<Run>;
  }

  /**
   * The run's state as its workflow's queries show it (`set_query`): read
   * by replaying its journal as it stands, live or ended; nothing is
   * written. `position` is the journal position the values hold at.
   */
  queries(): Promise<Queries> {
    return this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}/queries`) as Promise<Queries>;
  }

  /** The value of the run's query `name`; `query_not_found` names those it set. */
  async query(name: string): Promise<unknown> {
    const answer = (await this.keel.request(
      "GET",
      `/v1/runs/${encodeURIComponent(this.id)}/queries/${encodeURIComponent(name)}`,
    )) as Schemas["QueryView"];
    return answer.value;
  }

  /** Resumes the paused run where it stood; answers once it waits or ends. */
  resume(options: { waitMs?: number } = {}): Promise<Run> {
    return this.keel.request(
      "POST",
      `/v1/runs/${encodeURIComponent(this.id)}/resume${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`,
    ) as Promise<Run>;
  }

  /**
   * Restarts the ended run from a step (its first scheduling) or a journal
   * position (`at`): the steps before keep their results, those from there
   * run again under the same step IDs (on build `on` if given, refused
   * unless the journal kept replays there). Answers once it waits or ends.
   */
  restart(point: RestartPoint, options: { waitMs?: number } = {}): Promise<Run> {
    return this.keel.request(
      "POST",
      `/v1/runs/${encodeURIComponent(this.id)}/restart${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`,
      restartBody(point),
    ) as Promise<Run>;
  }

  /**
   * Forks the run from a step or a journal position into a new run whose
   * journal carries this one's up to there (its step IDs the fork's own),
   * with `input` if given; answers with the handle of the new run.
   */
  async fork(point: RestartPoint & { input?: unknown }, options: { waitMs?: number } = {}): Promise<RunHandle> {
    const body = { ...restartBody(point), ...(point.input === undefined ? {} : { input: point.input }) };
    const run = (await this.keel.request(
      "POST",
      `/v1/runs/${encodeURIComponent(this.id)}/fork${query({ wait_ms: options.waitMs ?? 10_000, return_on_wait: true })}`,
      body,
    )) as Run;
    return this.keel.run(run.run_id);
  }

  /** The streams the run wrote. */
  async streams(): Promise<StreamInfo[]> {
    const list = (await this.keel.request("GET", `/v1/runs/${encodeURIComponent(this.id)}/streams`)) as {
      streams: StreamInfo[];
    };
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
  async *stream(name: string, options: { from?: number; reconnects?: number } = {}): AsyncGenerator<Chunk> {
    let next = options.from ?? 0;
    const reconnects = options.reconnects ?? this.keel.retries;
    let broken = 0;
    const path = `/v1/runs/${encodeURIComponent(this.id)}/streams/${encodeURIComponent(name)}`;
    for (;;) {
      let response: Response;
      try {
        response = await this.keel.send("GET", `${path}${query({ from: next })}`, undefined, "text/event-stream");
      } catch (e) {
        if (++broken > reconnects) throw e;
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
          const chunk = JSON.parse(data) as Chunk;
          next = chunk.index + 1;
          broken = 0;
          yield chunk;
          if (chunk.kind === "closed") return;
        }
        return; // the server ended the stream: the run has ended
      } catch (e) {
        if (e instanceof KeelError || ++broken > reconnects) throw e;
        await sleep(this.keel.retryDelayMs * 2 ** (broken - 1));
      }
    }
  }

  /**
   * The run's journal entries (those written already first) and its
   * record whenever it changes, as server-sent events, until it ends.
   */
  async *events(): AsyncGenerator<RunEvent> {
    const response = await this.keel.send(
      "GET",
      `/v1/runs/${encodeURIComponent(this.id)}/events`,
      undefined,
      "text/event-stream",
    );
    if (!response.ok || !response.body) {
      throw errorOf(response.status, await response.json().catch(() => undefined));
    }
    for await (const { event, data } of serverSentEvents(response.body)) {
      if (event === "entry") {
        yield { kind: "entry", entry: JSON.parse(data) };
      } else if (event === "run") {
        yield { kind: "run", run: JSON.parse(data) };
      } else if (event === "error") {
        throw new KeelError("internal", data, 0, { run_id: this.id });
      }
    }
  }
}

/** The events of a `text/event-stream` body. */
async function* serverSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<{ event: string; data: string }> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true }).replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      let event = "message";
      const data: string[] = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = value;
        if (field === "data") data.push(value);
      }
      if (data.length > 0) {
        yield { event, data: data.join("\n") };
      }
    }
  }
}

/** Whether `e` says the run `runId` was admitted by an earlier try. */
function admittedBefore(e: unknown, runId: string): boolean {
  return (
    (e instanceof RunExists && e.ids.run_id === runId) ||
    (e instanceof HookConflict && e.conflictingRunId === runId) ||
    (e instanceof IdempotencyCollision && e.existingRunId === runId)
  );
}

/** Whether `e` leaves the start's outcome unknown: no answer, or one
 * saying the server could not tell. */
function unanswered(e: unknown): boolean {
  if (!(e instanceof KeelError)) {
    return true; // fetch failed: the connection broke or never came up
  }
  return e.kind === "start_outcome_unknown" || e.status === 502 || e.status === 503 || e.status === 504;
}

/** The API's body of a restart or a fork from `point`. */
function restartBody(point: RestartPoint): Schemas["RestartRequest"] {
  const at = "at" in point ? { at: point.at } : { from_step: point.fromStep };
  return point.on === undefined ? at : { ...at, on: point.on };
}

function query(params: Record<string, string | number | boolean | undefined>): string {
  const pairs = Object.entries(params).filter(([, v]) => v !== undefined);
  return pairs.length === 0 ? "" : `?${new URLSearchParams(pairs.map(([k, v]) => [k, String(v)]))}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
