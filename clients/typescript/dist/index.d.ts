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
export type RestartPoint = {
    fromStep: string;
    on?: string;
} | {
    at: number;
    on?: string;
};
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
export declare class KeelError extends Error {
    /** Stable, snake case: `run_not_found`, `hook_conflict`, ... */
    readonly kind: string;
    /** The HTTP status (0 when no answer came). */
    readonly status: number;
    /** The IDs the error names (`run_id`, `token`, ...). */
    readonly ids: Record<string, string>;
    constructor(
    /** Stable, snake case: `run_not_found`, `hook_conflict`, ... */
    kind: string, message: string, 
    /** The HTTP status (0 when no answer came). */
    status: number, 
    /** The IDs the error names (`run_id`, `token`, ...). */
    ids?: Record<string, string>);
}
/** The start hook token is held by another run, `conflictingRunId`. */
export declare class HookConflict extends KeelError {
    get token(): string | undefined;
    get conflictingRunId(): string | undefined;
}
/** The workflow's idempotency key admitted `existingRunId` already. */
export declare class IdempotencyCollision extends KeelError {
    get existingRunId(): string | undefined;
    get key(): string | undefined;
}
/** The input or payload does not fit its schema, at `problems`' paths. */
export declare class InvalidInput extends KeelError {
    readonly problems: Problem[];
    constructor(kind: string, message: string, status: number, ids: Record<string, string>, problems: Problem[]);
    /** The JSON pointers of the places that do not fit. */
    get paths(): string[];
}
/** A run of that ID exists already (a run ID the caller chose twice). */
export declare class RunExists extends KeelError {
}
/** No such run, hook, workflow, deployment or webhook. */
export declare class NotFound extends KeelError {
}
/** The token is missing, wrong or expired (401), or out of its scope (403). */
export declare class Unauthorized extends KeelError {
}
/** The run ended without completing: `run` says how. */
export declare class RunFailed extends KeelError {
    readonly run: Run;
    constructor(run: Run);
}
/**
 * No answer came for a start after every retry: the run may or may not
 * exist. Look it up by `runId` (`keel.run(runId).get()`), or start again
 * with the same run ID, which is safe.
 */
export declare class StartOutcomeUnknown extends KeelError {
    readonly runId: string;
    readonly cause: unknown;
    constructor(runId: string, cause: unknown);
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
export declare class Keel {
    #private;
    constructor(options: KeelOptions);
    /**
     * Starts a run of `workflow` with `input`. The run ID is chosen before
     * the request is sent, so a start whose answer is lost is sent again
     * with the same ID: the run is admitted once, and the retry's
     * `run_exists` (or `hook_conflict` naming this run) means it was.
     */
    start<I = unknown>(workflow: string, input: I, options?: StartOptions): Promise<RunHandle>;
    /** The run `runId`. */
    run(runId: string): RunHandle;
    /** Hooks: read one, resume one, ask one and read its replies. */
    readonly hooks: {
        /** The hook holding `token`. */
        get: (token: string) => Promise<Hook>;
        /**
         * Delivers `payload` to the hook holding `token`. With `payloadId`, a
         * retry is delivered once (safe to send again after a lost answer,
         * even once the run has ended). With `waitReplyMs`, the answer carries
         * the workflow's `reply` to it if one came within that long.
         */
        resume: (token: string, payload: unknown, options?: {
            payloadId?: string;
            waitMs?: number;
            waitReplyMs?: number;
        }) => Promise<Run>;
        /**
         * Request and reply: delivers `payload` to the hook holding `token`
         * under a payload ID (chosen if not given, so a retry with the same ID
         * is delivered once) and waits up to `waitMs` (30 s) for the
         * workflow's reply. `reply` is undefined if none came yet: read it
         * later with `hooks.reply(token, payloadId)`, or ask again with the
         * same `payloadId` (delivered once).
         */
        ask: (token: string, payload: unknown, options?: {
            payloadId?: string;
            waitMs?: number;
        }) => Promise<Answer>;
        /**
         * The workflow's reply to the payload of ID `payloadId` delivered to
         * `token`, waiting up to `waitMs` for it (`reply` undefined until it
         * comes).
         */
        reply: (token: string, payloadId: string, options?: {
            waitMs?: number;
        }) => Promise<HookReply>;
    };
    /** The pause before the first retry, doubled after each. */
    get retryDelayMs(): number;
    /** How many times a broken request is sent again. */
    get retries(): number;
    /** Mints a scoped token (needs the server's own token). */
    createToken(scope: Scope, options?: {
        ttlMs?: number;
    }): Promise<ScopedToken>;
    /** A JSON request; the parsed answer, or the error it was. */
    request(method: string, path: string, body?: unknown): Promise<unknown>;
    /** The raw response to a request (for streams). */
    send(method: string, path: string, body?: unknown, accept?: string, extra?: Record<string, string>): Promise<Response>;
}
/** An event of a run: a journal entry, or the run's record as it changed. */
export type RunEvent = {
    kind: "entry";
    entry: JournalEntry;
} | {
    kind: "run";
    run: Run;
};
/** One run: its record, its result, its events. */
export declare class RunHandle {
    private readonly keel;
    /** The run's ID. */
    readonly id: string;
    /** The run as the start answered (if this handle came from a start). */
    readonly started?: Run | undefined;
    constructor(keel: Keel, 
    /** The run's ID. */
    id: string, 
    /** The run as the start answered (if this handle came from a start). */
    started?: Run | undefined);
    /** The run now. */
    get(): Promise<Run>;
    /**
     * The run once it has ended (long polls of up to `waitMs`, 30 s by
     * default; with `once`, one poll, answering the run as it then is).
     */
    wait(options?: {
        waitMs?: number;
        once?: boolean;
    }): Promise<Run>;
    /** The run's output once it completes; `RunFailed` if it ends otherwise. */
    result<O = unknown>(options?: {
        waitMs?: number;
    }): Promise<O>;
    /** Cancels the run (its cleanup runs unless `force`). */
    cancel(options?: {
        reason?: string;
        force?: boolean;
    }): Promise<Run>;
    /**
     * Pauses the run: no step, timer or payload reaches its code until
     * `resume` (payloads queue). Answers once its driver has stopped it
     * (`paused`), or with the run as it is after `waitMs`.
     */
    pause(options?: {
        waitMs?: number;
    }): Promise<Run>;
    /**
     * The run's state as its workflow's queries show it (`set_query`): read
     * by replaying its journal as it stands, live or ended; nothing is
     * written. `position` is the journal position the values hold at.
     */
    queries(): Promise<Queries>;
    /** The value of the run's query `name`; `query_not_found` names those it set. */
    query(name: string): Promise<unknown>;
    /** Resumes the paused run where it stood; answers once it waits or ends. */
    resume(options?: {
        waitMs?: number;
    }): Promise<Run>;
    /**
     * Restarts the ended run from a step (its first scheduling) or a journal
     * position (`at`): the steps before keep their results, those from there
     * run again under the same step IDs (on build `on` if given, refused
     * unless the journal kept replays there). Answers once it waits or ends.
     */
    restart(point: RestartPoint, options?: {
        waitMs?: number;
    }): Promise<Run>;
    /**
     * Forks the run from a step or a journal position into a new run whose
     * journal carries this one's up to there (its step IDs the fork's own),
     * with `input` if given; answers with the handle of the new run.
     */
    fork(point: RestartPoint & {
        input?: unknown;
    }, options?: {
        waitMs?: number;
    }): Promise<RunHandle>;
    /** The streams the run wrote. */
    streams(): Promise<StreamInfo[]>;
    /**
     * The chunks of the run's stream `name` from index `from` (0), as they
     * are written, until the stream is closed (its last chunk is the
     * `closed` one) or the run ends. A connection that breaks is opened
     * again after the last chunk received (up to `reconnects` times in a
     * row, the client's retries by default): no chunk is missed or given
     * twice. A `restart` chunk drops the chunks of its step's earlier
     * attempts.
     */
    stream(name: string, options?: {
        from?: number;
        reconnects?: number;
    }): AsyncGenerator<Chunk>;
    /**
     * The run's journal entries (those written already first) and its
     * record whenever it changes, as server-sent events, until it ends.
     */
    events(): AsyncGenerator<RunEvent>;
}
export {};
