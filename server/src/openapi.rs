//! `/openapi.json`: the OpenAPI 3.1 document of every endpoint, with
//! the bodies' JSON Schemas generated from the types the handlers
//! serialize (so the two cannot drift apart).

use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Value, json};

use crate::wire::*;

/// A response: status, description and body schema.
type Responses<'a> = &'a [(&'a str, &'a str, Option<&'a Value>)];

/// The document describing this server's API.
pub fn document() -> Value {
    let mut settings = SchemaSettings::draft2020_12();
    settings.definitions_path = "#/components/schemas/".into();
    let mut g = SchemaGenerator::new(settings);
    let run = of::<RunView>(&mut g);
    let runs = of::<RunList>(&mut g);
    let detail = of::<RunDetail>(&mut g);
    let journal = of::<Vec<JournalEntry>>(&mut g);
    let start = of::<StartRequest>(&mut g);
    let restart = of::<RestartRequest>(&mut g);
    let fork = of::<ForkRequest>(&mut g);
    let hook = of::<HookView>(&mut g);
    let hooks = of::<HookList>(&mut g);
    let event = of::<EventView>(&mut g);
    let events = of::<EventList>(&mut g);
    let push = of::<PushEventRequest>(&mut g);
    let deployment = of::<keel_core::Deployment>(&mut g);
    let deployments = of::<DeploymentList>(&mut g);
    let component = of::<ComponentView>(&mut g);
    let grant_request = of::<GrantRequest>(&mut g);
    let workers = of::<WorkerList>(&mut g);
    let health = of::<Health>(&mut g);
    let schedule_request = of::<ScheduleRequest>(&mut g);
    let schedule = of::<ScheduleView>(&mut g);
    let schedules = of::<ScheduleList>(&mut g);
    let pause = of::<PauseRequest>(&mut g);
    let backfill = of::<BackfillRequest>(&mut g);
    let fire = of::<FireView>(&mut g);
    let fires = of::<FireList>(&mut g);
    let limits = of::<LimitList>(&mut g);
    let limit_request = of::<LimitRequest>(&mut g);
    let limit_reset = of::<LimitResetRequest>(&mut g);
    let limit_change = of::<LimitChange>(&mut g);
    let error = of::<ErrorBody>(&mut g);
    let deleted = of::<keel_core::retention::Deleted>(&mut g);
    let stats = of::<keel_core::retention::StoreStats>(&mut g);
    let purged = of::<crate::wire::PurgeView>(&mut g);
    let prune = of::<PruneRequest>(&mut g);
    let pruned = of::<keel_core::retention::Pruned>(&mut g);
    let bulk = of::<BulkRequestBody>(&mut g);
    let preview = of::<BulkPreviewView>(&mut g);
    let job = of::<JobView>(&mut g);
    let upgrade = of::<UpgradeRequest>(&mut g);
    let jobs = of::<JobList>(&mut g);
    let streams = of::<StreamList>(&mut g);
    let chunk = of::<ChunkView>(&mut g);
    let queries = of::<QueriesView>(&mut g);
    let query_view = of::<QueryView>(&mut g);
    let reply = of::<ReplyView>(&mut g);
    let token_request = of::<TokenRequest>(&mut g);
    let webhook_request = of::<WebhookRequest>(&mut g);
    let webhook_view = of::<WebhookView>(&mut g);
    let webhook_list = of::<WebhookList>(&mut g);
    let delivery = of::<DeliveryView>(&mut g);
    let token_view = of::<TokenView>(&mut g);
    let any = json!({});
    let u64 = json!({"type": "integer", "minimum": 0, "maximum": u64::MAX});
    let schemas = Value::Object(g.take_definitions(true));

    let path_param = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "description": what, "schema": {"type": "string", "minLength": 1}});
    let name_param = |name: &str, what: &str| json!({"name": name, "in": "path", "required": true, "description": what, "schema": {"type": "string", "pattern": keel_core::ids::NAME_PATTERN}});
    let query = |name: &str, what: &str, schema: Value| json!({"name": name, "in": "query", "required": false, "description": what, "schema": schema});
    let wait = query(
        "wait_ms",
        "Wait up to this many milliseconds (at most 60000) for the run to end",
        json!({"type": "integer", "minimum": 0, "maximum": 60000}),
    );
    let op = |id: &str,
              summary: &str,
              params: Vec<Value>,
              body: Option<(&str, &Value)>,
              ok: Responses,
              errors: &[&str]| {
        let mut responses = serde_json::Map::new();
        for (status, description, schema) in ok {
            let mut response = json!({"description": description});
            if let Some(schema) = schema {
                response["content"] = json!({"application/json": {"schema": schema}});
            }
            responses.insert(status.to_string(), response);
        }
        for status in errors.iter().chain(&["401", "403"]) {
            responses.insert(
                status.to_string(),
                json!({"description": reason(status), "content": {"application/json": {"schema": error}}}),
            );
        }
        responses.insert(
            "default".into(),
            json!({"description": "An error", "content": {"application/json": {"schema": error}}}),
        );
        let mut operation = json!({"operationId": id, "summary": summary, "parameters": params, "responses": responses});
        if let Some((content_type, schema)) = body {
            operation["requestBody"] =
                json!({"required": false, "content": {content_type: {"schema": schema}}});
        }
        operation
    };
    let run_id = || json!({"name": "run_id", "in": "path", "required": true, "description": "The run's ID", "schema": {"type": "string", "pattern": keel_core::ids::NAME_PATTERN}});
    let token = || path_param("token", "The hook's token");

    let journal_file = json!({
        "type": "object", "required": ["header", "entries"],
        "description": "A journal file as `keel journal export --format json` writes it: `keel replay` reads it",
        "properties": {"header": {"type": "object"}, "entries": journal.clone()},
    });
    let get_journal = op(
        "getJournal",
        "A run's journal: its entries, or with format=file the journal file `keel replay` reads",
        vec![
            run_id(),
            query(
                "format",
                "`entries` (the default): the entries; `file`: the run's record and its entries, as `keel journal export --format json` writes them",
                json!({"type": "string", "enum": ["entries", "file"]}),
            ),
        ],
        None,
        &[(
            "200",
            "The journal entries in order, or the journal file",
            Some(&json!({"anyOf": [journal.clone(), journal_file]})),
        )],
        &["400", "404", "503"],
    );
    let grant_deployment = op(
        "grantDeployment",
        "Add grants to every build of a deployment name, or the one build of a hash (replace: set them); runs pinned to them get them at their next activation",
        vec![path_param("name", "A deployment name or component hash")],
        Some(("application/json", &grant_request)),
        &[("200", "The deployments changed", Some(&deployments))],
        &["400", "404", "413", "415", "503"],
    );
    let follow_stream = json!({
    "operationId": "followStream",
    "summary": "A run's stream as server-sent events, from index `from` or after `Last-Event-ID`: each chunk's event is its kind (`data`, `restart`, `closed`), its `id` its index; ends when the stream is closed or the run has ended",
    "parameters": [run_id(), json!({"name": "name", "in": "path", "required": true, "description": "The stream's name", "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,128}$"}}),
        query("from", "The index of the first chunk to send", u64.clone()),
        {"name": "Last-Event-ID", "in": "header", "required": false, "description": "The index of the last chunk received: sending resumes after it", "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"}}],
    "responses": {
        "200": {"description": "An event stream of chunks", "content": {"text/event-stream": {"schema": {
            "type": "object",
            "description": "One server-sent event: `data`, `restart` or `closed` (data: a chunk), `error` (data: a message)",
            "properties": {"event": {"enum": ["data", "restart", "closed", "error"]}, "id": {"type": "string"}, "data": {"type": "string"}},
            "required": ["data"],
            "x-chunk": chunk
        }}}},
        "400": {"description": reason("400"), "content": {"application/json": {"schema": error}}},
        "401": {"description": reason("401"), "content": {"application/json": {"schema": error}}},
        "404": {"description": reason("404"), "content": {"application/json": {"schema": error}}},
        "default": {"description": "An error", "content": {"application/json": {"schema": error}}}
    }});
    let mut paths = json!({
        "/healthz": {"get": op("health", "Whether the server and its store answer", vec![], None,
            &[("200", "Healthy", Some(&health))], &["503"])},
        "/openapi.json": {"get": {
            "operationId": "openapi",
            "summary": "This document",
            "responses": {
                "200": {"description": "The OpenAPI document", "content": {"application/json": {"schema": {"type": "object"}}}},
                "401": {"description": reason("401"), "content": {"application/json": {"schema": error}}},
                "default": {"description": "An error", "content": {"application/json": {"schema": error}}}
            }}},
        "/metrics": {"get": {
            "operationId": "metrics",
            "summary": "Prometheus metrics: runs started and ended, step attempts, journal flush latency, live runs",
            "responses": {
                "200": {"description": "Metrics in the Prometheus text format, or OpenMetrics when the Accept header asks for it", "content": {"text/plain": {"schema": {"type": "string"}}, "application/openmetrics-text": {"schema": {"type": "string"}}}},
                "401": {"description": reason("401"), "content": {"application/json": {"schema": error}}},
                "default": {"description": "An error", "content": {"application/json": {"schema": error}}}
            }}},
        "/v1/deployments": {
            "get": op("listDeployments", "Every deployment, newest first", vec![], None,
                &[("200", "The deployments", Some(&deployments))], &["503"]),
            "post": op("deploy", "Deploy a component: the body is its bytes", vec![
                    query("name", "The name to deploy under (default: a prefix of its hash)", json!({"type": "string"})),
                    query("allow_http", "A host (`host` or `host:port`) its steps may reach over HTTP (repeatable)", json!({"type": "string", "pattern": keel_core::deployment::HTTP_GRANT_PATTERN})),
                    query("allow_dir", "A host directory preopened for its steps (repeatable)", json!({"type": "string"})),
                    query("allow_env", "An environment variable passed to its steps (repeatable)", json!({"type": "string"})),
                    query("no_grants", "Grant nothing (without any allow_*, a deploy keeps the grants of the name's latest deployment)", json!({"type": "boolean"})),
                    query("force", "Deploy a build the name had before a later one even so, moving the name back to it", json!({"type": "boolean"})),
                    query("max_memory_mib", "Memory bound of a step instance, MiB", u64.clone()),
                    query("step_timeout_ms", "How long one step attempt may take, ms", u64.clone()),
                    query("retention_ms", "How long its runs are kept once ended, ms (every deployment of the name gets it; unset keeps the name's)", u64.clone()),
                ], Some(("application/octet-stream", &json!({"type": "string", "format": "binary"}))),
                &[("201", "Deployed", Some(&deployment))], &["400", "409", "413", "503", "507"]),
        },
        "/v1/deployments/{name}": {"get": op("getDeployment", "A deployment, by name (its latest) or component hash",
            vec![path_param("name", "A deployment name or component hash")], None,
            &[("200", "The deployment", Some(&deployment))], &["404", "503"])},
        "/v1/deployments/{name}/component": {"get": op("inspectDeployment", "What a deployment's build exports, with its workflows' input and output JSON Schemas (keel inspect NAME)",
            vec![path_param("name", "A deployment name (its current build) or component hash")], None,
            &[("200", "The component", Some(&component))], &["404", "503"])},
        "/v1/workflows/{workflow}/runs": {"post": op("startRun", "Start a run of a workflow (and optionally wait for its end)",
            vec![path_param("workflow", "The workflow's name")], Some(("application/json", &start)),
            &[("201", "The run, admitted (ended if it did within wait_ms)", Some(&run))],
            &["400", "404", "409", "413", "503", "507"])},
        "/v1/runs": {"get": op("listRuns", "Runs, newest first, filtered and paged", vec![
                query("status", "Only runs with these statuses (repeated, or comma-separated)", json!({"type": "array", "items": {"enum": keel_host::core::RunStatus::all().iter().map(|s| s.as_str()).collect::<Vec<_>>()}})),
                query("workflow", "Only runs of this workflow", json!({"type": "string"})),
                query("since_ms", "Only runs created at or after this time (ms since the epoch)", u64.clone()),
                query("until_ms", "Only runs created before this time", u64.clone()),
                query("search", "Only runs whose ID or workflow contains this text", json!({"type": "string"})),
                query("schedule", "Only runs this schedule fired", json!({"type": "string"})),
                query("attr", "Only runs with this attribute, KEY=VALUE (repeated: every one; `attr.KEY=VALUE` too)", json!({"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z0-9_.-]{1,64}=.{0,256}$"}})),
                query("limit", "Runs per page: 1 to 1000 (default 50); page on with cursor", json!({"type": "integer", "minimum": 1, "maximum": 1000})),
                query("cursor", "The next_cursor of the previous page", json!({"type": "string", "pattern": "^$|^[0-9]{1,19}-"})),
            ], None, &[("200", "A page of runs", Some(&runs))], &["400", "503"])},
        "/v1/runs/{run_id}": {"get": op("getRun", "A run", vec![run_id()], None,
            &[("200", "The run", Some(&run))], &["404", "503"]),
            "delete": op("deleteRun", "Delete an ended run with everything stored for it (its journal archived first if the server archives); a live run is refused unless cancel ends it first",
                vec![run_id(), query("cancel", "End a live run at once (no cleanup), then delete it", json!({"type": "boolean"}))], None,
                &[("200", "What was deleted", Some(&deleted))], &["400", "404", "409", "503"])},
        "/v1/store/stats": {"get": op("storeStats", "What the store holds: runs by status, journal entries, hooks, payloads, events, components, size on disk", vec![], None,
            &[("200", "The store's figures", Some(&stats))], &["503"])},
        "/v1/runs/bulk": {"post": op("bulkRuns", "Cancel, retry, delete, pause or resume every run a filter selects (admitted before now), as a job any worker carries out and takes over after a crash, acting on each run once; with dry_run, count and show them instead",
            vec![], Some(("application/json", &bulk)),
            &[("202", "The job, submitted (its Location is /v1/jobs/{job_id})", Some(&job)), ("200", "A dry run: what the job would act on", Some(&preview))],
            &["400", "413", "415", "503"])},
        "/v1/jobs": {"get": op("listJobs", "Bulk jobs, newest first", vec![query("limit", "At most this many (1 to 1000, default 50)", json!({"type": "integer", "minimum": 1, "maximum": 1000}))], None,
            &[("200", "The jobs", Some(&jobs))], &["400", "503"])},
        "/v1/jobs/{job_id}": {"get": op("getJob", "A bulk job and its progress", vec![path_param("job_id", "The job's ID")], None,
            &[("200", "The job", Some(&job))], &["404", "503"])},
        "/v1/jobs/{job_id}/cancel": {"post": op("cancelJob", "Stop a running job; the runs it acted on stay so", vec![path_param("job_id", "The job's ID")], None,
            &[("200", "The job, cancelled (or as it ended)", Some(&job))], &["404", "503"])},
        "/v1/components/prune": {"post": op("pruneComponents", "Delete the stored components no deployment and no run names, stored before the grace (default an hour); with dry_run, say which",
            vec![], Some(("application/json", &prune)),
            &[("200", "What the prune deleted (or would)", Some(&pruned))], &["400", "413", "415", "503"])},
        "/v1/store/purge": {"post": op("purgeStore", "Purge the ended runs past their retention now (workers also do so every few seconds)", vec![], None,
            &[("200", "What the purge did", Some(&purged))], &["503"])},
        "/v1/runs/{run_id}/detail": {"get": op("getRunDetail", "A run with its timeline and journal", vec![run_id()], None,
            &[("200", "The run, its timeline and journal", Some(&detail))], &["404", "503"])},
        "/v1/runs/{run_id}/result": {"get": op("getResult", "A run's result, waiting for its end (long poll)", vec![run_id(), wait.clone()], None,
            &[("200", "The run has ended", Some(&run)), ("202", "The run has not ended within the wait", Some(&run))],
            &["400", "404", "503"])},
        "/v1/runs/{run_id}/cancel": {"post": op("cancelRun", "Ask for a run to be cancelled: the workflow receives the cancel and runs its cleanup within the cancel grace; with force, end it at once",
            vec![run_id(), wait.clone(),
                query("reason", "Why, recorded with the cancel (at most 1024 bytes)", json!({"type": "string", "maxLength": 1024})),
                query("force", "End the run at once, without its cleanup", json!({"type": "boolean"}))], None,
            &[("200", "The run has ended (cancelled, or it ended meanwhile)", Some(&run)),
              ("202", "The cancel is recorded; the run's cleanup has not ended within the wait", Some(&run))],
            &["400", "404", "409", "503"])},
        "/v1/runs/{run_id}/retry": {"post": op("retryRun", "Retry a failed run from its failed step (fresh attempts, the same step ID) and drive it",
            vec![run_id(), wait.clone(), query("return_on_wait", "With wait_ms: answer as soon as the run waits", json!({"type": "boolean"})),
                 query("on", "Retry it on this deployment's current build (or a build's hash), pinned there from then on; refused (409 not_retryable) unless its journal replays on that build", json!({"type": "string", "minLength": 1}))], None,
            &[("200", "The run (ended if it did within wait_ms)", Some(&run))], &["400", "404", "409", "503", "507"])},
        "/v1/runs/{run_id}/events": {"get": {
            "operationId": "runEvents",
            "summary": "Live updates of a run as server-sent events: `entry` per journal entry, `run` per change of its record; ends after the run ends",
            "parameters": [run_id()],
            "responses": {
                "200": {"description": "An event stream", "content": {"text/event-stream": {"schema": {
                    "type": "object",
                    "description": "One server-sent event: `entry` (data: a journal entry), `run` (data: the run), `error` (data: a message)",
                    "properties": {"event": {"enum": ["entry", "run", "error"]}, "data": {"type": "string"}},
                    "required": ["data"]
                }}}},
                "401": {"description": reason("401"), "content": {"application/json": {"schema": error}}},
                "404": {"description": reason("404"), "content": {"application/json": {"schema": error}}},
                "default": {"description": "An error", "content": {"application/json": {"schema": error}}}
            }}},
        "/v1/hooks": {"get": op("listHooks", "Every token held now", vec![], None,
            &[("200", "The hooks", Some(&hooks))], &["503"])},
        "/v1/hooks/{token}": {"get": op("getHook", "The hook holding a token", vec![token()], None,
            &[("200", "The hook", Some(&hook))], &["404", "503"])},
        "/v1/hooks/{token}/resume": {"post": op("resumeHook", "Deliver a payload (the body, JSON that fits the hook's payload type, shown by GET /v1/hooks/{token}; else 400 invalid_input naming each place, and nothing is delivered) to the active hook holding a token; with wait_reply_ms, answer with the workflow's reply",
            vec![token(), wait.clone(), query("return_on_wait", "With wait_ms: answer as soon as the run waits again", json!({"type": "boolean"})),
                query("payload_id", "The payload's ID (keel chooses one if none): a resume retried with it delivers the payload once and gets the same reply", json!({"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"})),
                query("wait_reply_ms", "Wait up to this many milliseconds (at most 60000) for the workflow's reply (`Hook::next_request`)", json!({"type": "integer", "minimum": 0, "maximum": 60000}))],
            Some(("application/json", &any)),
            &[("200", "The hook's run (ended if it did within wait_ms), its payload ID, and the reply if asked for", Some(&run)),
              ("202", "Delivered; the reply did not come within wait_reply_ms: fetch it at the Location", Some(&run))],
            &["400", "404", "413", "503", "507"])},
        "/v1/hooks/{token}/replies/{payload_id}": {"get": op("getReply", "The workflow's reply to a payload delivered with an ID, waiting for it up to wait_ms",
            vec![token(), json!({"name": "payload_id", "in": "path", "required": true, "description": "The payload's ID", "schema": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": "^[!-~]+$"}}), wait.clone()], None,
            &[("200", "The reply", Some(&reply)), ("202", "No reply yet", Some(&reply))], &["400", "404", "503"])},
        "/v1/runs/{run_id}/streams": {"get": op("listStreams", "The streams a run wrote", vec![run_id()], None,
            &[("200", "The streams, by name", Some(&streams))], &["400", "404", "503"])},
        "/v1/events": {"get": op("listEvents", "Every ingested event, newest first", vec![], None,
            &[("200", "The events", Some(&events))], &["503"])},
        "/v1/events/{key}": {"post": op("pushEvent", "Push an event: start every workflow subscribed to its key",
            vec![path_param("key", "The event's key")], Some(("application/json", &push)),
            &[("201", "The event and the runs it started", Some(&event))], &["400", "413", "503", "507"])},
        "/v1/workers": {"get": op("listWorkers", "The workers sharing the store", vec![], None,
            &[("200", "The workers", Some(&workers))], &["503"])},
        "/v1/limits": {"get": op("listLimits", "Every concurrency group (workflow and key: its limit, runs in progress and queued) and every operator's override", vec![], None,
            &[("200", "The groups and overrides", Some(&limits))], &["503"])},
        "/v1/limits/{workflow}": {"post": op("setLimit", "Override a workflow's declared concurrency limit, for every key or one (`key`); 0 pauses it. A higher limit starts queued runs at once",
            vec![name_param("workflow", "The workflow's name")], Some(("application/json", &limit_request)),
            &[("200", "The runs it started and the limits now", Some(&limit_change))], &["400", "413", "503"])},
        "/v1/limits/{workflow}/reset": {"post": op("resetLimit", "Remove an override: the workflow's override or its declared limit holds again",
            vec![name_param("workflow", "The workflow's name")], Some(("application/json", &limit_reset)),
            &[("200", "The runs it started and the limits now", Some(&limit_change))], &["400", "413", "503"])},
        "/v1/schedules": {
            "get": op("listSchedules", "Every schedule, by name", vec![], None,
                &[("200", "The schedules", Some(&schedules))], &["503"]),
            "post": op("createSchedule", "Create a schedule: a workflow started on a cron spec or an interval, each fire exactly once across workers",
                vec![], Some(("application/json", &schedule_request)),
                &[("201", "The schedule, with its next fire times", Some(&schedule))], &["400", "404", "409", "413", "503", "507"]),
        },
        "/v1/schedules/{name}": {
            "get": op("getSchedule", "A schedule, its next fire times and its latest fires",
                vec![path_param("name", "The schedule's name")], None,
                &[("200", "The schedule", Some(&schedule))], &["404", "503"]),
            "put": op("updateSchedule", "Change a schedule's workflow, spec, input or policies (its fires and pause are kept; a changed spec fires next after now)",
                vec![path_param("name", "The schedule's name")], Some(("application/json", &schedule_request)),
                &[("200", "The schedule", Some(&schedule))], &["400", "404", "409", "413", "503"]),
            "delete": op("deleteSchedule", "Delete a schedule (its fires' runs stay)",
                vec![path_param("name", "The schedule's name")], None,
                &[("200", "The schedule as it was", Some(&schedule))], &["404", "503"]),
        },
        "/v1/schedules/{name}/pause": {"post": op("pauseSchedule", "Pause a schedule: no fire until resumed",
            vec![path_param("name", "The schedule's name")], Some(("application/json", &pause)),
            &[("200", "The schedule", Some(&schedule))], &["400", "404", "409", "503"])},
        "/v1/schedules/{name}/resume": {"post": op("resumeSchedule", "Resume a schedule: it fires next at its first time after now",
            vec![path_param("name", "The schedule's name")], Some(("application/json", &pause)),
            &[("200", "The schedule", Some(&schedule))], &["400", "404", "409", "503"])},
        "/v1/schedules/{name}/trigger": {"post": op("triggerSchedule", "Fire a schedule once now, under its overlap policy",
            vec![path_param("name", "The schedule's name")], None,
            &[("200", "The fire", Some(&fire))], &["404", "409", "503"])},
        "/v1/schedules/{name}/backfill": {"post": op("backfillSchedule", "Start a run for every nominal time in a range (each once: a time fired before is found)",
            vec![path_param("name", "The schedule's name")], Some(("application/json", &backfill)),
            &[("200", "The fires, oldest first", Some(&fires))], &["400", "404", "409", "503"])},
    });
    // Added apart: the one `json!` above is at the macro's recursion limit.
    paths["/v1/deployments/{name}/grants"] = json!({"post": grant_deployment});
    paths["/v1/runs/{run_id}/journal"] = json!({"get": get_journal});
    paths["/v1/deployments/{name}/upgrade"] = json!({"post": op("upgradeDeployment", "Move the live runs of a deployment's older builds to a build, each only if its journal replays there (the others stay pinned, listed with their first divergence), as a job any worker carries out; with dry_run judge them and move none, with ramp move that share first",
            vec![name_param("name", "The deployment's name")], Some(("application/json", &upgrade)),
            &[("202", "The job, submitted (its Location is its URL)", Some(&job))], &["400", "404", "503"])});
    paths["/v1/runs/{run_id}/restart"] = json!({"post": op("restartRun", "Restart an ended run from a step (its first scheduling) or a journal position: the steps before keep their results, those from there run again under the same step IDs; on another build only if the journal kept replays there (409 not_retryable names the first difference otherwise)",
            vec![run_id(), wait.clone(), query("return_on_wait", "With wait_ms: answer as soon as the run waits", json!({"type": "boolean"}))], Some(("application/json", &restart)),
            &[("200", "The run (ended if it did within wait_ms)", Some(&run))], &["400", "404", "409", "503"])});
    paths["/v1/runs/{run_id}/fork"] = json!({"post": op("forkRun", "Fork a run from a step or a journal position into a new run of the same workflow, whose journal carries the source's up to there (the steps before keep their results, under the fork's own step IDs), on another build or with another input if asked; refused (409 not_retryable) when that part does not replay there or holds a hook, a child run or a stream",
            vec![run_id(), wait.clone(), query("return_on_wait", "With wait_ms: answer as soon as the run waits", json!({"type": "boolean"}))], Some(("application/json", &fork)),
            &[("201", "The new run (ended if it did within wait_ms)", Some(&run))], &["400", "404", "409", "503", "507"])});
    // A restart or a fork names its point: the body is required.
    for path in ["/v1/runs/{run_id}/restart", "/v1/runs/{run_id}/fork"] {
        paths[path]["post"]["requestBody"]["required"] = json!(true);
    }
    paths["/v1/runs/{run_id}/pause"] = json!({"post": op("pauseRun", "Pause a live run: no step, timer or payload reaches its code until it is resumed (payloads queue), and it holds no instance; a step attempt it has running ends first. A paused run stays paused across workers and restarts",
            vec![run_id(), wait.clone()], None,
            &[("200", "The run is paused", Some(&run)),
              ("202", "The pause is recorded; the run's driver has not stopped it within the wait", Some(&run))],
            &["400", "404", "409", "503"])});
    paths["/v1/runs/{run_id}/resume"] = json!({"post": op("resumeRun", "Resume a paused run where it stood and drive it (a run no pause holds is answered as it is)",
            vec![run_id(), wait.clone(), query("return_on_wait", "With wait_ms: answer as soon as the run waits", json!({"type": "boolean"}))], None,
            &[("200", "The run (ended if it did within wait_ms)", Some(&run))], &["400", "404", "409", "503"])});
    paths["/v1/runs/{run_id}/streams/{name}"] = json!({"get": follow_stream});
    paths["/v1/runs/{run_id}/queries"] = json!({"get": op("listQueries", "Every query the run's workflow set (set_query), as a replay of its journal on its build left them: the run as it stands, live or ended; nothing is written",
            vec![run_id()], None,
            &[("200", "The queries, with the journal position the replay reached", Some(&queries))], &["400", "404", "409", "503"])});
    paths["/v1/runs/{run_id}/queries/{name}"] = json!({"get": op("queryRun", "One query of the run's state, as a replay of its journal left it; 404 query_not_found names the queries the workflow set",
            vec![run_id(), path_param("name", "The query's name")], None,
            &[("200", "The query's value", Some(&query_view))], &["400", "404", "409", "503"])});
    let webhook_id = || path_param("id", "The webhook's ID");
    paths["/v1/webhooks"] = json!({
        "get": op("listWebhooks", "The webhooks, by ID (without their secrets)", vec![], None,
            &[("200", "The webhooks", Some(&webhook_list))], &["503"]),
        "post": op("createWebhook", "Expose a hook or an event key to a sender that signs its deliveries (Stripe, GitHub, or an HMAC-SHA256 header)",
            vec![], Some(("application/json", &webhook_request)),
            &[("201", "The webhook", Some(&webhook_view))], &["400", "409", "503"]),
    });
    let mut delivered = op(
        "deliverWebhook",
        "A sender's signed delivery: verified before anything is journaled (no keel token needed), its raw body the payload; a missing, wrong, stale or replayed signature is 401 and reaches no run",
        vec![webhook_id()],
        Some(("application/json", &any)),
        &[("200", "Where it went", Some(&delivery))],
        &["400", "404", "409", "413", "503"],
    );
    delivered["security"] = json!([{}]);
    paths["/v1/webhooks/{id}"] = json!({
        "get": op("getWebhook", "A webhook (without its secret)", vec![webhook_id()], None,
            &[("200", "The webhook", Some(&webhook_view))], &["404", "503"]),
        "delete": op("deleteWebhook", "Delete a webhook: later deliveries are 404", vec![webhook_id()], None,
            &[("200", "The webhook as it was", Some(&webhook_view))], &["404", "503"]),
        "post": delivered,
    });
    paths["/v1/tokens"] = json!({"post": op("createToken", "Mint a scoped token: a short-lived credential that may only resume one hook, read one run, or start one workflow (needs the server's token)",
        vec![], Some(("application/json", &token_request)),
        &[("201", "The token and what it grants", Some(&token_view))], &["400"])});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "keel",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Start durable workflow runs, follow them, resume their hooks and push events. With a token configured, send it as `Authorization: Bearer TOKEN`. Errors are `{\"error\": {\"kind\", \"message\", \"ids\"}}`."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}
        },
        "security": [{}, {"bearer": []}]
    })
}

/// A reference to `T`'s schema, adding it to the generator's definitions.
fn of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
    g.subschema_for::<T>().to_value()
}

fn reason(status: &str) -> &'static str {
    match status {
        "400" => "The request is malformed (kind `invalid_request`, `invalid_input`, ...)",
        "401" => "A token is required and was missing, wrong or expired (kind `unauthorized`)",
        "403" => "A scoped token used outside its scope (kind `forbidden`)",
        "404" => "No such run, hook, workflow or deployment",
        "409" => {
            "Refused: `hook_conflict` or `idempotency_collision` (naming the run that holds the token or key), or `not_retryable`"
        }
        "413" => "The body is too large (kind `payload_too_large`)",
        "503" => "The store is unavailable",
        "507" => "The store's disk is full (kind `storage_full`); nothing committed is lost",
        _ => "An error",
    }
}

#[cfg(test)]
mod checked_in {
    /// The document the clients' types are generated from
    /// (`clients/openapi.json`) is this server's; `KEEL_BLESS=1` writes it.
    #[test]
    fn the_clients_document_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/openapi.json");
        let current = format!("{:#}\n", super::document());
        if std::env::var_os("KEEL_BLESS").is_some() {
            std::fs::write(&path, &current).unwrap();
        }
        let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            checked_in == current,
            "clients/openapi.json is not the server's document: run `KEEL_BLESS=1 cargo test -p keel-server the_clients_document_is_current`, then `npm run generate` in clients/typescript and `scripts/clients.sh generate`"
        );
    }
}
