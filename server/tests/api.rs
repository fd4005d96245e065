//! The HTTP API end to end: a real server on a loopback port over a real
//! engine and store, driving the test guests, called with an HTTP client.

use std::sync::Arc;
use std::time::Duration;

use keel_host::{Config, DeploySpec, Keel};
use keel_server::{Metrics, ServerConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// A server on a free loopback port, with the testbed and order-hooks
/// guests deployed.
struct Server {
    base: String,
    keel: Keel,
    http: reqwest::Client,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn server(token: Option<&str>) -> Server {
    server_with(token, |_, _| {}).await
}

/// A server as [`server`] makes it, after `tweak` changes the engine's and
/// the server's configuration.
async fn server_with(
    token: Option<&str>,
    tweak: impl FnOnce(&mut Config, &mut ServerConfig),
) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let metrics = Arc::new(Metrics::default());
    let db = dir.path().join("db");
    let mut config = Config::caching_in(keel_tests::compiled_cache());
    config.observer = metrics.clone();
    config.default_durability = keel_tests::default_durability();
    let mut server_config =
        ServerConfig::new("127.0.0.1:0".parse().unwrap(), token.map(str::to_owned));
    tweak(&mut config, &mut server_config);
    let keel = match std::env::var("KEEL_TEST_STORE").as_deref() {
        // The same API tests on the shared store, a schema per server.
        Ok("postgres") => {
            let url = std::env::var("KEEL_TEST_POSTGRES")
                .expect("KEEL_TEST_STORE=postgres needs KEEL_TEST_POSTGRES: run scripts/test.sh");
            let mut options = keel_host::store::postgres::PgOptions::new(&url);
            options.schema = format!("keel_api_{}", uuid::Uuid::now_v7().simple());
            let store = keel_host::store::postgres::PgStore::open(options)
                .await
                .unwrap();
            Keel::open(config, Arc::new(store)).unwrap()
        }
        Ok("sled") | Err(_) => {
            let sled = keel_host::store::sled::SledOptions::new(&db);
            Keel::open_sled(config, &sled).unwrap()
        }
        Ok(other) => panic!("KEEL_TEST_STORE is sled or postgres, not `{other}`"),
    };
    for guest in [keel_tests::TESTBED, keel_tests::ORDER_HOOKS] {
        keel.deploy_file(std::path::Path::new(guest), Some(DeploySpec::default()))
            .await
            .unwrap();
    }
    let config = server_config;
    let (listener, addr) = keel_server::bind(&config).await.unwrap();
    let task = tokio::spawn({
        let keel = keel.clone();
        async move {
            keel_server::serve(listener, keel, metrics, &config, std::future::pending())
                .await
                .unwrap()
        }
    });
    Server {
        base: format!("http://{addr}"),
        keel,
        http: reqwest::Client::new(),
        _dir: dir,
        task,
    }
}

impl Server {
    async fn call(&self, method: &str, path: &str, json: Option<Value>) -> (StatusCode, Value) {
        self.call_as(None, method, path, &[], json.and_then(body))
            .await
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call("GET", path, None).await
    }

    /// A GET with the bearer `token`, if any.
    async fn get_as(&self, token: Option<&str>, path: &str) -> (StatusCode, Value) {
        let mut request = self.http.get(format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        (response.status(), response.json().await.unwrap())
    }

    /// Uploads a component to `path` (a deploy with its query).
    async fn upload(&self, path: &str, bytes: &[u8]) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/wasm")
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        (response.status(), response.json().await.unwrap())
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", path, Some(body)).await
    }

    /// The text of `/metrics`.
    async fn metrics(&self) -> String {
        let response = self
            .http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap();
        response.text().await.unwrap()
    }

    /// Runs `ten_steps` with input `n` to its end; the run.
    async fn ten_steps(&self, n: u32) -> Value {
        let (status, run) = self
            .post(
                "/v1/workflows/ten_steps/runs",
                json!({"input": n, "wait_ms": 10000}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        run
    }

    /// Starts `order_updates` for `order` with its start token, answering
    /// once the run waits for a note.
    async fn start_order(&self, order: &str) -> (StatusCode, Value) {
        self.post(
            "/v1/workflows/order_updates/runs",
            json!({
                "input": {"order_id": order, "note": "placed"},
                "hook": {"token": format!("order:{order}")},
                "wait_ms": 10000,
                "return_on_wait": true,
            }),
        )
        .await
    }
}

/// How many entries of `kind` the journal of `run_id` holds.
async fn entries_of_kind(s: &Server, run_id: &str, kind: &str) -> usize {
    let (_, journal) = s.get(&format!("/v1/runs/{run_id}/journal")).await;
    journal
        .as_array()
        .unwrap_or_else(|| panic!("not a journal: {journal}"))
        .iter()
        .filter(|e| e["kind"] == kind)
        .count()
}

fn error_kind(body: &Value) -> &str {
    body["error"]["kind"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {body}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_sleeping_in_memory_answers_waiting_at_once() {
    let s = server(None).await;
    let (status, run) = s
        .post(
            "/v1/workflows/sleeper/runs",
            json!({"input": 30000, "wait_ms": 60000, "return_on_wait": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "waiting", "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let (_, read) = s.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(read["status"], "waiting", "{read}");
    assert_eq!(read["waiting_on"][0]["kind"], "timer", "{read}");
    let metrics = s.metrics().await;
    assert!(
        metrics.contains("keel_runs_live{status=\"waiting\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_over_http_completes_and_reads_back_with_its_timeline() {
    let s = server(None).await;
    let (status, run) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 10, "wait_ms": 10000}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "completed");
    assert_eq!(run["output"], 45);
    assert_eq!(run["input"], 10);
    let run_id = run["run_id"].as_str().unwrap();

    let (status, got) = s.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, run);
    let (status, result) = s.get(&format!("/v1/runs/{run_id}/result")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(result["output"], 45);

    let (_, detail) = s.get(&format!("/v1/runs/{run_id}/detail")).await;
    let steps = detail["timeline"].as_array().unwrap();
    assert_eq!(steps.len(), 10);
    for (i, row) in steps.iter().enumerate() {
        assert_eq!(row["kind"], "step");
        assert_eq!(row["name"], "noop");
        assert_eq!(row["status"], "completed");
        assert_eq!(row["attempts"], 1);
        assert_eq!(row["step_id"], format!("{run_id}-noop-{i}"));
    }
    let (_, journal) = s.get(&format!("/v1/runs/{run_id}/journal")).await;
    let journal = journal.as_array().unwrap();
    assert_eq!(journal[0]["kind"], "run_started");
    assert_eq!(journal.last().unwrap()["kind"], "run_completed");
    assert_eq!(detail["journal"].as_array().unwrap().len(), journal.len());

    // `keel replay` (the Replayer) reads it as a journal file and as the
    // bare entries alike: the entries hold the run's start and its end.
    let (status, file) = s
        .get(&format!("/v1/runs/{run_id}/journal?format=file"))
        .await;
    assert_eq!(status, StatusCode::OK, "{file}");
    assert_eq!(file["header"]["run"]["run_id"], run_id);
    let dir = tempfile::tempdir().unwrap();
    let (as_file, as_entries) = (dir.path().join("run.json"), dir.path().join("entries.json"));
    std::fs::write(&as_file, file.to_string()).unwrap();
    std::fs::write(&as_entries, serde_json::to_string(&journal).unwrap()).unwrap();
    let replayer = keel_host::Replayer::new(keel_tests::TESTBED, dir.path().join("cache"))
        .await
        .unwrap();
    let report = replayer.replay_file(&as_file).await.unwrap();
    assert!(report.verdict.is_ok(), "{:?}", report.verdict);
    let bare = replayer.replay_file(&as_entries).await.unwrap();
    assert!(bare.verdict.is_ok(), "{:?}", bare.verdict);
    assert_eq!(bare.run_id.as_str(), run_id, "read from its steps' IDs");
    let (status, bad) = s
        .get(&format!("/v1/runs/{run_id}/journal?format=csv"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(error_kind(&bad), "invalid_request");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_listed_newest_first_filtered_and_paged() {
    let s = server(None).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let (_, run) = s
            .post(
                "/v1/workflows/ten_steps/runs",
                json!({"input": i, "wait_ms": 10000}),
            )
            .await;
        ids.push(run["run_id"].as_str().unwrap().to_string());
    }
    let (_, failed) = s
        .post("/v1/workflows/trap/runs", json!({"wait_ms": 10000}))
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");

    let (_, page) = s.get("/v1/runs?limit=2&status=completed").await;
    let listed: Vec<&str> = page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[4].as_str(), ids[3].as_str()]);
    let cursor = page["next_cursor"]
        .as_str()
        .expect("a cursor to the next page");
    let (_, next) = s
        .get(&format!(
            "/v1/runs?limit=2&status=completed&cursor={cursor}"
        ))
        .await;
    let listed: Vec<&str> = next["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[2].as_str(), ids[1].as_str()]);

    let (_, only_failed) = s.get("/v1/runs?status=failed,cancelled").await;
    let runs = only_failed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["workflow"], "trap");
    assert_eq!(runs[0]["error"]["kind"], "guest_trap");
    assert!(only_failed["next_cursor"].is_null());

    let (_, by_workflow) = s.get("/v1/runs?workflow=trap").await;
    assert_eq!(by_workflow["runs"].as_array().unwrap().len(), 1);
    let (_, searched) = s.get(&format!("/v1/runs?search={}", &ids[0][24..])).await;
    assert_eq!(searched["runs"][0]["run_id"], ids[0].as_str());
    let future = u64::MAX / 2;
    let (_, none) = s.get(&format!("/v1/runs?since_ms={future}")).await;
    assert!(none["runs"].as_array().unwrap().is_empty());

    // Attributes set at start and by the workflow, in both query forms.
    for (tenant, plan) in [("acme", "pro"), ("globex", "pro")] {
        let (status, run) = s
            .post(
                "/v1/workflows/tagged/runs",
                json!({"input": tenant, "attributes": {"plan": plan}, "wait_ms": 10000}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        assert_eq!(run["attributes"]["plan"], plan, "{run}");
    }
    for query in [
        "attr=tenant=acme&attr=plan=pro",
        "attr.tenant=acme&attr.plan=pro",
    ] {
        let (_, found) = s.get(&format!("/v1/runs?{query}")).await;
        let runs = found["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "{query}: {found}");
        assert_eq!(runs[0]["attributes"]["stage"], "done");
    }
    let (_, pro) = s.get("/v1/runs?attr=plan%3Dpro&workflow=tagged").await;
    assert_eq!(pro["runs"].as_array().unwrap().len(), 2, "{pro}");
    let (status, refused) = s.get("/v1/runs?attr=tenant").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not KEY=VALUE"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn start_tokens_hooks_and_cancel_over_http() {
    let s = server(None).await;
    let (status, first) = s.start_order("o-1").await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["status"], "waiting");
    let run_id = first["run_id"].as_str().unwrap();

    // The token is held: a second start is refused, naming the holder.
    let (status, refused) = s.start_order("o-1").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_kind(&refused), "hook_conflict");
    assert_eq!(refused["error"]["ids"]["conflicting_run_id"], run_id);

    let (status, hook) = s.get("/v1/hooks/order:o-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(hook["run_id"], run_id);
    assert_eq!(hook["active"], true);
    let (_, hooks) = s.get("/v1/hooks").await;
    assert_eq!(hooks["hooks"].as_array().unwrap().len(), 1);
    let (_, waiting) = s.get("/v1/runs?status=waiting").await;
    assert_eq!(waiting["runs"][0]["run_id"], run_id);

    // A note, then the last one: the run completes with every note.
    let (status, resumed) = s
        .post(
            "/v1/hooks/order:o-1/resume?wait_ms=10000&return_on_wait=true",
            json!({"note": "gift wrap"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["status"], "waiting");
    let (_, done) = s
        .post(
            "/v1/hooks/order:o-1/resume?wait_ms=10000",
            json!({"note": "paid", "done": true}),
        )
        .await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"], json!(["placed", "gift wrap", "paid"]));

    // Another order waits; cancelling it ends it and releases its token.
    let (_, second) = s.start_order("o-2").await;
    let second_id = second["run_id"].as_str().unwrap();
    let (status, cancelled) = s
        .post(
            &format!("/v1/runs/{second_id}/cancel?reason=changed%20mind&wait_ms=10000"),
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        cancelled["error"]["message"],
        "cancelled by api: changed mind"
    );
    assert_eq!(cancelled["error"]["kind"], "cancelled");
    let (status, gone) = s.get("/v1/hooks/order:o-2").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_kind(&gone), "hook_not_found");
    let (status, again) = s.start_order("o-2").await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the token is free again: {again}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_key_admits_one_run_and_events_start_subscribers() {
    let s = server(None).await;
    let (status, first) = s
        .post(
            "/v1/workflows/idempotent_task/runs",
            json!({"input": {"id": "a"}, "wait_ms": 10000}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, second) = s
        .post(
            "/v1/workflows/idempotent_task/runs",
            json!({"input": {"id": "a"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_kind(&second), "idempotency_collision");
    assert_eq!(second["error"]["ids"]["existing_run_id"], first["run_id"]);

    let (status, event) = s
        .post(
            "/v1/events/idempotency:example",
            json!({"payload": {"id": "b"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{event}");
    let outcome = &event["outcomes"][0];
    assert_eq!(outcome["workflow"], "idempotent_task");
    assert_eq!(outcome["deduplicated"], false);
    let started = outcome["run_id"].as_str().unwrap();
    let (_, result) = s
        .get(&format!("/v1/runs/{started}/result?wait_ms=10000"))
        .await;
    assert_eq!(result["status"], "completed", "{result}");
    let (status, again) = s
        .post(
            "/v1/events/idempotency:example",
            json!({"payload": {"id": "b"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(again["outcomes"][0]["deduplicated"], true);
    assert_eq!(again["outcomes"][0]["run_id"], started);
    let (_, events) = s.get("/v1/events").await;
    let events = events["events"].as_array().unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["event_id"], again["event_id"], "newest first");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_refusal_is_a_json_error_with_its_status() {
    let s = server(None).await;
    let cases: Vec<(&str, &str, Option<&str>, StatusCode, &str)> = vec![
        (
            "POST",
            "/v1/workflows/nope/runs",
            Some("{}"),
            StatusCode::NOT_FOUND,
            "unknown_workflow",
        ),
        (
            "POST",
            "/v1/workflows/ten_steps/runs",
            Some("{\"input\": "),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/workflows/ten_steps/runs",
            Some("{\"inptu\": 1}"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/workflows/ten_steps/runs",
            Some("{\"deployment\": \"nope\"}"),
            StatusCode::NOT_FOUND,
            "deployment_not_found",
        ),
        (
            "POST",
            "/v1/workflows/ten_steps/runs",
            Some("{\"hook\": {\"retention_ms\": 5}}"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "POST",
            "/v1/workflows/refund/runs",
            Some("{\"deployment\": \"testbed\"}"),
            StatusCode::NOT_FOUND,
            "unknown_workflow",
        ),
        (
            "GET",
            "/v1/runs/nope",
            None,
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            "GET",
            "/v1/runs/nope/detail",
            None,
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            "GET",
            "/v1/runs/nope/events",
            None,
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            "POST",
            "/v1/runs/nope/cancel",
            None,
            StatusCode::NOT_FOUND,
            "run_not_found",
        ),
        (
            "GET",
            "/v1/runs?status=done",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/runs?limit=-1",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/runs?limit=5000",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/runs/x/result?wait_ms=soon",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/hooks/nope",
            None,
            StatusCode::NOT_FOUND,
            "hook_not_found",
        ),
        (
            "POST",
            "/v1/hooks/nope/resume",
            Some("1"),
            StatusCode::NOT_FOUND,
            "hook_not_found",
        ),
        (
            "POST",
            "/v1/hooks/nope/resume",
            Some("{"),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v1/deployments/nope",
            None,
            StatusCode::NOT_FOUND,
            "deployment_not_found",
        ),
        (
            "POST",
            "/v1/deployments",
            Some("not wasm"),
            StatusCode::BAD_REQUEST,
            "invalid_component",
        ),
        (
            "POST",
            "/v1/deployments",
            None,
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            "GET",
            "/v2/anything",
            None,
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            "DELETE",
            "/v1/runs",
            None,
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ];
    for (method, path, body, status, kind) in cases {
        let mut request = s
            .http
            .request(method.parse().unwrap(), format!("{}{path}", s.base));
        if let Some(body) = body {
            let content_type = if path.starts_with("/v1/deployments") {
                "application/octet-stream"
            } else {
                "application/json"
            };
            request = request
                .header("content-type", content_type)
                .body(body.to_string());
        }
        let response = request.send().await.unwrap();
        let got = response.status();
        let value: Value = response
            .json()
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: no JSON: {e}"));
        assert_eq!(
            (got, error_kind(&value)),
            (status, kind),
            "{method} {path}: {value}"
        );
        assert!(!value["error"]["message"].as_str().unwrap().is_empty());
    }
    // A body over the limit is refused, and the client hears it (the rest
    // is read and discarded rather than cut off mid-send).
    // Repeated, since a server that cuts the connection loses the answer
    // only sometimes; half the bodies are chunked (no length up front).
    let big = serde_json::to_vec(&json!({"input": "x".repeat(2 << 20)})).unwrap();
    for i in 0..20 {
        let request = s
            .http
            .post(format!("{}/v1/workflows/ten_steps/runs", s.base))
            .header("content-type", "application/json");
        let request = if i % 2 == 0 {
            request.body(big.clone())
        } else {
            let chunks = big
                .chunks(64 << 10)
                .map(|c| Ok::<_, std::io::Error>(c.to_vec()));
            request.body(reqwest::Body::wrap_stream(futures::stream::iter(
                chunks.collect::<Vec<_>>(),
            )))
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let body: Value = response.json().await.unwrap();
        assert_eq!(error_kind(&body), "payload_too_large");
    }
    // Input that does not fit the workflow's type: refused, no run exists.
    let (status, wrong) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": "ten", "wait_ms": 10000}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{wrong}");
    assert_eq!(error_kind(&wrong), "invalid_input");
    assert!(
        wrong["error"]["message"]
            .as_str()
            .unwrap()
            .contains("integer"),
        "{wrong}"
    );
    let (_, runs) = s.get("/v1/runs?workflow=ten_steps&limit=1000").await;
    assert!(runs["runs"].as_array().unwrap().is_empty(), "{runs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn components_deploy_over_http_with_their_grants() {
    let s = server(None).await;
    let bytes = std::fs::read(keel_tests::ORDER).unwrap();
    let response = s
        .http
        .post(format!(
            "{}/v1/deployments?name=shop&allow_http=127.0.0.1:9&allow_env=HOME&step_timeout_ms=5000",
            s.base
        ))
        .header("content-type", "application/wasm")
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    let deployment: Value = response.json().await.unwrap();
    assert_eq!(deployment["name"], "shop");
    assert_eq!(deployment["grants"]["http"], json!(["127.0.0.1:9"]));
    assert_eq!(deployment["limits"]["step_timeout_ms"], 5000);
    assert!(
        deployment["workflows"]
            .as_array()
            .unwrap()
            .contains(&json!("process_order"))
    );
    let (_, list) = s.get("/v1/deployments").await;
    assert_eq!(list["deployments"][0]["name"], "shop", "newest first");
    let hash = deployment["hash"].as_str().unwrap();
    let (status, by_hash) = s.get(&format!("/v1/deployments/{}", &hash[..12])).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(by_hash["name"], "shop");

    let bad = s
        .http
        .post(format!("{}/v1/deployments?allow_http=http://x", s.base))
        .header("content-type", "application/wasm")
        .body(std::fs::read(keel_tests::ORDER).unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let bad: Value = bad.json().await.unwrap();
    assert_eq!(error_kind(&bad), "invalid_grant");
}

#[tokio::test(flavor = "multi_thread")]
async fn live_updates_stream_the_journal_and_the_run_until_it_ends() {
    let s = server(None).await;
    let run = s.ten_steps(3).await;
    let run_id = run["run_id"].as_str().unwrap();
    let response = s
        .http
        .get(format!("{}/v1/runs/{run_id}/events", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The stream ends after the run's final record.
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the stream ends once the run has ended")
        .unwrap();
    let entries = text.matches("event: entry").count();
    let journal = s.keel.journal(run_id).await.unwrap();
    assert_eq!(entries, journal.len());
    assert_eq!(text.matches("event: run").count(), 1);
    assert!(text.contains("\"status\":\"completed\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn health_metrics_and_the_openapi_document_describe_the_server() {
    let s = server(None).await;
    let (status, health) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(health["status"], "ok");
    s.post(
        "/v1/workflows/ten_steps/runs",
        json!({"input": 2, "wait_ms": 10000}),
    )
    .await;
    s.post(
        "/v1/workflows/flaky/runs",
        json!({"input": 1, "wait_ms": 10000}),
    )
    .await;
    let metrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), StatusCode::OK);
    // The Prometheus text format unless OpenMetrics is asked for.
    assert_eq!(
        metrics.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = metrics.text().await.unwrap();
    assert!(
        text.contains("# TYPE keel_runs_started_total counter") && !text.contains("# EOF"),
        "{text}"
    );
    let openmetrics = s
        .http
        .get(format!("{}/metrics", s.base))
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        openmetrics.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let exposition = openmetrics.text().await.unwrap();
    assert!(
        exposition.contains("# TYPE keel_runs_started counter") && exposition.ends_with("# EOF\n"),
        "{exposition}"
    );
    assert!(
        text.contains("keel_runs_started_total{workflow=\"ten_steps\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("keel_runs_ended_total{workflow=\"ten_steps\",status=\"completed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("keel_step_attempts_total{step=\"noop\",outcome=\"completed\"} 2"),
        "{text}"
    );
    assert!(text.contains("keel_journal_flush_seconds_count"), "{text}");
    assert!(
        text.contains("keel_runs_live{status=\"waiting\"}"),
        "{text}"
    );

    let (_, doc) = s.get("/openapi.json").await;
    assert_eq!(doc["openapi"], "3.1.0");
    // That each route is documented under its operation is the unit test
    // beside the route table (server/src/routes.rs).
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    assert!(schemas.contains_key("RunView") && schemas.contains_key("ErrorBody"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_token_protects_everything_but_health_and_login() {
    let s = server(Some("s3cret")).await;
    let (status, body) = s.get("/v1/runs").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(error_kind(&body), "unauthorized");
    let status_with = |path: &str, token: Option<&str>| {
        let mut request = s.http.get(format!("{}{path}", s.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap().status() }
    };
    assert_eq!(
        status_with("/v1/runs", Some("guess")).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        status_with("/v1/runs", Some("s3cret")).await,
        StatusCode::OK
    );
    assert_eq!(
        status_with("/metrics", None).await,
        StatusCode::UNAUTHORIZED
    );
    let (status, _) = s.get("/healthz").await;
    assert_eq!(status, StatusCode::OK);

    // The console sends a browser to its login, which sets the cookie.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let page = no_redirects
        .get(format!("{}/", s.base))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::SEE_OTHER);
    assert_eq!(page.headers()["location"], "/login");
    let refused = no_redirects
        .post(format!("{}/login", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=guess")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.headers()["location"], "/login?wrong=1");
    assert!(refused.headers().get("set-cookie").is_none());
    let login = no_redirects
        .post(format!("{}/login", s.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=s3cret")
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    let console = no_redirects
        .get(format!("{}/", s.base))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(console.status(), StatusCode::OK);
    assert!(console.text().await.unwrap().contains("keel console"));
    let api = no_redirects
        .get(format!("{}/v1/runs", s.base))
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn serving_beyond_loopback_needs_a_token() {
    let open = ServerConfig::new("0.0.0.0:0".parse().unwrap(), None);
    let e = keel_server::check(&open).unwrap_err();
    assert!(
        matches!(e, keel_server::ServeError::TokenRequired { .. }),
        "{e}"
    );
    assert!(e.to_string().contains("without an API token"));
    let empty = ServerConfig::new("0.0.0.0:0".parse().unwrap(), Some(String::new()));
    assert!(keel_server::check(&empty).is_err());
    let with_token = ServerConfig::new("0.0.0.0:0".parse().unwrap(), Some("t".into()));
    assert!(keel_server::check(&with_token).is_ok());
    let loopback = ServerConfig::new("127.0.0.1:0".parse().unwrap(), None);
    assert!(keel_server::check(&loopback).is_ok());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_retried_over_http() {
    let s = server(None).await;
    let (_, failed) = s
        .post("/v1/workflows/trap/runs", json!({"wait_ms": 10000}))
        .await;
    assert_eq!(failed["status"], "failed");
    let run_id = failed["run_id"].as_str().unwrap();
    // A trapping workflow traps again: the retry is recorded and the run
    // fails anew, with the same error.
    let (status, retried) = s
        .post(
            &format!("/v1/runs/{run_id}/retry?wait_ms=10000"),
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["status"], "failed");
    assert_eq!(retried["error"]["kind"], "guest_trap");
    let (_, journal) = s.get(&format!("/v1/runs/{run_id}/journal")).await;
    let kinds: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds.iter().filter(|k| **k == "run_retried").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&"run_failed"));

    let (_, done) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "wait_ms": 10000}),
        )
        .await;
    let (status, refused) = s
        .post(
            &format!("/v1/runs/{}/retry", done["run_id"].as_str().unwrap()),
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_kind(&refused), "not_retryable");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_chosen_run_id_is_admitted_once() {
    let s = server(None).await;
    let body = json!({"input": 2, "run_id": "client-run-1", "wait_ms": 10000});
    let (status, run) = s.post("/v1/workflows/ten_steps/runs", body.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["run_id"], "client-run-1");
    assert_eq!(run["status"], "completed");
    let (status, again) = s.post("/v1/workflows/ten_steps/runs", body).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_kind(&again), "run_exists");
    let (status, bad) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 2, "run_id": "a/b"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
}

/// A body and its content type.
type Upload<'a> = (&'a str, Vec<u8>);

/// Sends `method path` with `headers` and a JSON `body` (if any) as the
/// given content type; the status and the error kind (or "" on success).
async fn raw(
    s: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Option<Upload<'_>>,
) -> (StatusCode, String) {
    let mut request = s
        .http
        .request(method.parse().unwrap(), format!("{}{path}", s.base));
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    if let Some((content_type, bytes)) = body {
        request = request.header("content-type", content_type).body(bytes);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path} answered {status} with no JSON ({e}): {text}"));
    let kind = value["error"]["kind"].as_str().unwrap_or("").to_string();
    (status, kind)
}

#[tokio::test(flavor = "multi_thread")]
async fn no_web_page_of_another_origin_can_change_anything() {
    for token in [None, Some("s3cret")] {
        let s = server(token).await;
        let port = s.base.rsplit(':').next().unwrap().to_string();
        let mut auth = vec![];
        if let Some(t) = token {
            // The console's cookie travels to another port of the same host.
            auth.push(("cookie", format!("keel_token={t}")));
        }
        let with = |extra: &[(&'static str, String)]| {
            let mut h = auth.clone();
            h.extend(extra.iter().cloned());
            h
        };
        let mut start_order = s
            .http
            .post(format!("{}/v1/workflows/order_updates/runs", s.base))
            .json(&json!({
                "input": {"order_id": "o1", "note": "placed"},
                "hook": {"token": "order:o1"},
                "wait_ms": 10000,
                "return_on_wait": true,
            }));
        if let Some(t) = token {
            start_order = start_order.bearer_auth(t);
        }
        let waiting: Value = start_order.send().await.unwrap().json().await.unwrap();
        let waiting_id = waiting["run_id"].as_str().unwrap().to_string();
        let start = serde_json::to_vec(&json!({"input": 3})).unwrap();
        let wasm = std::fs::read(keel_tests::ORDER).unwrap();
        let cross = [
            ("origin", "http://127.0.0.1:1".to_string()),
            ("sec-fetch-site", "same-site".to_string()),
        ];
        let other_port = [("origin", "http://127.0.0.1:1".to_string())];
        let same_site = [("sec-fetch-site", "same-site".to_string())];
        let evil = [("origin", "https://evil.example".to_string())];
        for headers in [&cross[..], &other_port[..], &same_site[..], &evil[..]] {
            let cancel = format!("/v1/runs/{waiting_id}/cancel");
            let calls: [(&str, Option<Upload>); 3] = [
                (
                    "/v1/workflows/ten_steps/runs",
                    Some(("application/json", start.clone())),
                ),
                (&cancel, None),
                (
                    "/v1/deployments?allow_dir=/",
                    Some(("application/wasm", wasm.clone())),
                ),
            ];
            for (path, body) in calls {
                let got = raw(&s, "POST", path, &with(headers), body).await;
                assert_eq!(
                    got,
                    (StatusCode::FORBIDDEN, "cross_origin".to_string()),
                    "POST {path} with {headers:?}, token {token:?}"
                );
            }
        }
        // Nothing happened: no run of ten_steps, the run still waits, one
        // deployment of order-hooks and testbed each.
        let (_, runs) = s.get_as(token, "/v1/runs?workflow=ten_steps").await;
        assert!(runs["runs"].as_array().unwrap().is_empty(), "{runs}");
        let (_, run) = s.get_as(token, &format!("/v1/runs/{waiting_id}")).await;
        assert_eq!(run["status"], "waiting");
        let (_, deployments) = s.get_as(token, "/v1/deployments").await;
        assert_eq!(deployments["deployments"].as_array().unwrap().len(), 2);

        // A form's body type is refused, whatever its origin.
        let text = raw(
            &s,
            "POST",
            "/v1/workflows/ten_steps/runs",
            &with(&[]),
            Some(("text/plain", start.clone())),
        )
        .await;
        assert_eq!(
            text,
            (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type".into()
            )
        );
        // The server's own origin (the console) may.
        let own = [
            ("origin", format!("http://127.0.0.1:{port}")),
            ("sec-fetch-site", "same-origin".into()),
        ];
        let ok = raw(
            &s,
            "POST",
            "/v1/workflows/ten_steps/runs",
            &with(&own),
            Some(("application/json", start.clone())),
        )
        .await;
        assert_eq!(ok, (StatusCode::CREATED, String::new()), "token {token:?}");
        // A rebound name is refused for reads too.
        let rebound = raw(
            &s,
            "GET",
            "/v1/runs",
            &with(&[("host", format!("rebind.evil.example:{port}"))]),
            None,
        )
        .await;
        assert_eq!(
            rebound,
            (StatusCode::MISDIRECTED_REQUEST, "host_not_allowed".into())
        );
        let localhost = raw(
            &s,
            "GET",
            "/v1/runs",
            &with(&[("host", format!("localhost:{port}"))]),
            None,
        )
        .await;
        assert_eq!(localhost.0, StatusCode::OK);
    }
    // Hosts and origins the server is told to trust.
    let s = server_with(None, |_, c| {
        c.allowed_hosts = vec!["keel.internal".into()];
        c.allowed_origins = vec!["https://app.example.com".into()];
    })
    .await;
    let named = raw(
        &s,
        "GET",
        "/v1/runs",
        &[("host", "keel.internal:80".into())],
        None,
    )
    .await;
    assert_eq!(named.0, StatusCode::OK);
    let start = serde_json::to_vec(&json!({"input": 3})).unwrap();
    let trusted = raw(
        &s,
        "POST",
        "/v1/workflows/ten_steps/runs",
        &[
            ("origin", "https://app.example.com".into()),
            ("sec-fetch-site", "cross-site".into()),
        ],
        Some(("application/json", start)),
    )
    .await;
    assert_eq!(trusted.0, StatusCode::CREATED);
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_names_and_ids_are_checked_with_json_refusals() {
    let s = server(None).await;
    let wasm = std::fs::read(keel_tests::ORDER).unwrap();
    let deploy = |query: &str| format!("/v1/deployments?{query}");
    for (query, kind) in [
        ("max_memory_mib=17592186044416", "invalid_limit"),
        ("max_memory_mib=17592186044417", "invalid_limit"),
        ("max_memory_mib=0", "invalid_limit"),
        ("step_timeout_ms=18446744073709551615", "invalid_limit"),
        ("name=a%0Ab", "invalid_name"),
        ("name=a%00b", "invalid_name"),
        ("name=%3Cscript%3E", "invalid_name"),
        ("name=..", "invalid_name"),
    ] {
        let (status, body) = s.upload(&deploy(query), &wasm).await;
        assert_eq!(
            (status, error_kind(&body)),
            (StatusCode::BAD_REQUEST, kind),
            "{query}: {body}"
        );
        let field = body["error"]["ids"]["field"].as_str().unwrap_or("");
        assert!(!field.is_empty(), "{query}: names the field: {body}");
    }
    let (status, body) = s
        .upload(&deploy("name=shop&max_memory_mib=64"), &wasm)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    for path in [
        "/v1/runs/%FF%FE",
        "/v1/runs/%FF%FE/journal",
        "/v1/hooks/%FF",
        "/v1/deployments/%FF",
        "/v1/runs/a%2Fb",
        "/v1/runs/a%00b",
    ] {
        let (status, body) = s.get(path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
        assert_eq!(error_kind(&body), "invalid_request", "{path}");
    }
    let (status, body) = raw(
        &s,
        "POST",
        "/v1/workflows/%FF/runs",
        &[],
        Some(("application/json", b"{}".to_vec())),
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, body) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "run_id": ".."}),
        )
        .await;
    assert_eq!(
        (status, error_kind(&body)),
        (StatusCode::BAD_REQUEST, "invalid_name"),
        "a start's run ID is refused as the README's table says: {body}"
    );
    assert_eq!(body["error"]["ids"]["field"], "run ID", "{body}");
    // The health check tells an anonymous caller nothing about the store.
    let (_, health) = s.get("/healthz").await;
    assert_eq!(health, json!({"status": "ok"}));
    let t = server(Some("s3cret")).await;
    let (_, anonymous) = t.get("/healthz").await;
    assert_eq!(anonymous, json!({"status": "ok"}));
    let (_, told) = t.get_as(Some("s3cret"), "/healthz").await;
    let store = told["store"].as_str().unwrap_or_default();
    assert!(store == t.keel.location() && !store.is_empty(), "{told}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_with_client_chosen_ids_are_listed_newest_first() {
    let clock = keel_tests::ManualClock::at(1_800_000_000_000);
    let engine_clock = clock.clone();
    let s = server_with(None, move |c, _| c.clock = engine_clock).await;
    for id in ["zzzz-older", "mmmm-middle", "aaaa-newer"] {
        let (status, _) = s
            .post(
                "/v1/workflows/ten_steps/runs",
                json!({"input": 1, "run_id": id}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED);
        clock.advance(1000);
    }
    let ids = |list: &Value| -> Vec<String> {
        list["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["run_id"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, all) = s.get("/v1/runs").await;
    assert_eq!(ids(&all), ["aaaa-newer", "mmmm-middle", "zzzz-older"]);
    let (_, since) = s.get("/v1/runs?since_ms=1800000001000").await;
    assert_eq!(ids(&since), ["aaaa-newer", "mmmm-middle"]);
    let (_, until) = s.get("/v1/runs?until_ms=1800000002000").await;
    assert_eq!(ids(&until), ["mmmm-middle", "zzzz-older"]);
    let (_, first) = s.get("/v1/runs?limit=1").await;
    assert_eq!(ids(&first), ["aaaa-newer"]);
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = s.get(&format!("/v1/runs?cursor={cursor}")).await;
    assert_eq!(ids(&rest), ["mmmm-middle", "zzzz-older"]);
    let (status, _) = s.get("/v1/runs?cursor=nonsense").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread")]
async fn live_updates_follow_the_journal_as_it_is_written_not_a_poll() {
    // A poll an hour apart: only hearing of each write can deliver them.
    let s = server_with(None, |c, _| c.watch_poll = Duration::from_secs(3600)).await;
    let (_, waiting) = s.start_order("live").await;
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let run_id = waiting["run_id"].as_str().unwrap().to_string();
    let response = s
        .http
        .get(format!("{}/v1/runs/{run_id}/events", s.base))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    // The journal so far and the waiting run.
    let bound = Duration::from_secs(30);
    while !text.contains("\"status\":\"waiting\"") {
        let chunk = tokio::time::timeout(bound, futures::StreamExt::next(&mut stream))
            .await
            .expect("the run as it is arrives")
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    let before = text.matches("event: entry").count();
    // A payload moves the run on to its end: the client hears each write.
    let (status, _) = s
        .post(
            "/v1/hooks/order:live/resume",
            json!({"note": "shipped", "done": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let rest = tokio::time::timeout(bound, async {
        let mut rest = String::new();
        while let Some(chunk) = futures::StreamExt::next(&mut stream).await {
            rest.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
        }
        rest
    })
    .await
    .expect("the run's end arrives without waiting for a poll");
    assert!(rest.contains("\"status\":\"completed\""), "{rest}");
    let journal = s.keel.journal(&run_id).await.unwrap();
    assert_eq!(before + rest.matches("event: entry").count(), journal.len());
}

#[tokio::test(flavor = "multi_thread")]
async fn schedules_are_created_fired_paused_and_deleted_over_http() {
    let server = server(None).await;
    let (status, created) = server
        .post(
            "/v1/schedules",
            json!({"name": "nightly", "workflow": "ten_steps", "input": 2,
                   "cron": "0 9 * * 1-5", "tz": "Europe/Paris", "overlap": "allow-all"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["description"], "cron `0 9 * * 1-5` in Europe/Paris");
    let upcoming = created["upcoming_ms"].as_array().unwrap();
    assert_eq!(upcoming.len(), 5, "{created}");
    assert_eq!(created["next_fire_ms"], upcoming[0]);
    assert_eq!(upcoming[0].as_u64().unwrap() % 60_000, 0, "{created}");

    // A trigger is one fire now: a run with the derived ID.
    let (status, fire) = server
        .post("/v1/schedules/nightly/trigger", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{fire}");
    assert_eq!(fire["outcome"], "started");
    let run_id = fire["run_id"].as_str().unwrap();
    assert!(run_id.starts_with("nightly:"), "{run_id}");
    let (status, run) = server.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["workflow"], "ten_steps");

    // A backfill of Friday to Tuesday, twice: each weekday morning started
    // once.
    let friday = 1_795_737_600_000_u64; // 2026-11-27T00:00:00Z
    let range = json!({"from_ms": friday, "to_ms": friday + 5 * 86_400_000});
    let (status, fires) = server
        .post("/v1/schedules/nightly/backfill", range.clone())
        .await;
    assert_eq!(status, StatusCode::OK, "{fires}");
    let outcomes: Vec<&str> = fires["fires"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["started", "started", "started"], "Fri, Mon, Tue");
    let (_, again) = server.post("/v1/schedules/nightly/backfill", range).await;
    assert!(
        again["fires"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["outcome"] == "already_fired"),
        "{again}"
    );

    // Fires are counted by outcome: the trigger and three backfilled
    // started, three found.
    let metrics = server.metrics().await;
    for line in [
        r#"keel_schedule_fires_total{schedule="nightly",outcome="started"} 4"#,
        r#"keel_schedule_fires_total{schedule="nightly",outcome="already_fired"} 3"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
    // Only the trigger was decided on time: backfilled times are past.
    assert!(
        metrics.contains("keel_schedule_fire_lag_seconds_count 1"),
        "{metrics}"
    );

    // An update changes the spec and keeps the fires.
    let (status, updated) = server
        .call(
            "PUT",
            "/v1/schedules/nightly",
            Some(json!({"workflow": "ten_steps", "input": 3, "cron": "30 7 * * *", "tz": "UTC"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["description"], "cron `30 7 * * *` in UTC");
    assert_eq!(updated["recent"].as_array().unwrap().len(), 7, "{updated}");
    assert_eq!(
        updated["upcoming_ms"][0].as_u64().unwrap() % 60_000,
        0,
        "cron times are whole minutes here: {updated}"
    );
    let (status, e) = server
        .call(
            "PUT",
            "/v1/schedules/nightly",
            Some(json!({"name": "other", "workflow": "ten_steps", "every_ms": 60000})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");
    let (status, e) = server
        .call(
            "PUT",
            "/v1/schedules/nightly",
            Some(json!({"name": "", "workflow": "ten_steps", "every_ms": 60000})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an empty name is no name: {e}"
    );

    let (status, paused) = server
        .post("/v1/schedules/nightly/pause", json!({"note": "holiday"}))
        .await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["paused"], true);
    assert_eq!(paused["note"], "holiday");
    assert!(paused["upcoming_ms"].as_array().unwrap().is_empty());
    let (_, listed) = server.get("/v1/schedules").await;
    let names: Vec<&str> = listed["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    // The testbed declares `hourly`: deploying it made its schedule.
    assert_eq!(names, ["nightly", "testbed.hourly"]);

    let (status, deleted) = server.call("DELETE", "/v1/schedules/nightly", None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    let (status, gone) = server.get("/v1/schedules/nightly").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(error_kind(&gone), "schedule_not_found");

    // Refusals name the problem.
    for (body, kind, code) in [
        (
            json!({"name": "x", "workflow": "ten_steps", "cron": "0 25 * * *"}),
            "invalid_schedule",
            400,
        ),
        (
            json!({"name": "x", "workflow": "ten_steps", "cron": "0 9 * * *", "tz": "Mars/Base"}),
            "invalid_schedule",
            400,
        ),
        (
            json!({"name": "x", "workflow": "ten_steps"}),
            "invalid_schedule",
            400,
        ),
        (
            json!({"name": "x", "workflow": "nope", "every_ms": 60000}),
            "unknown_workflow",
            404,
        ),
        (
            json!({"name": "bad name", "workflow": "ten_steps", "every_ms": 60000}),
            "invalid_name",
            400,
        ),
        (
            json!({"name": "x", "workflow": "ten_steps", "every_ms": 60000, "bogus": 1}),
            "invalid_request",
            400,
        ),
    ] {
        let (status, e) = server.post("/v1/schedules", body.clone()).await;
        assert_eq!(status.as_u16(), code, "{body} -> {e}");
        assert_eq!(error_kind(&e), kind, "{body} -> {e}");
    }
    // A delayed start is admitted now and listed scheduled.
    let (status, run) = server
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "delay_ms": 3_600_000, "wait_ms": 60000, "return_on_wait": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "scheduled");
    let (_, listed) = server.get("/v1/runs?status=scheduled").await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 1, "{listed}");
    let (status, e) = server
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "delay_ms": 1, "start_at_ms": 1}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{e}");

    let body = json!({"name": "dup", "workflow": "ten_steps", "every_ms": 60000});
    assert_eq!(
        server.post("/v1/schedules", body.clone()).await.0,
        StatusCode::CREATED
    );
    let (status, e) = server.post("/v1/schedules", body).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(error_kind(&e), "schedule_exists");
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_runs_show_their_key_and_place_and_limits_change_over_http() {
    let s = server(None).await;
    let start = |input: Value, priority: Option<u8>| {
        let mut body = json!({"input": input, "wait_ms": 10000, "return_on_wait": true});
        if let Some(p) = priority {
            body["priority"] = json!(p);
        }
        body
    };
    // The holder waits on a ten-minute timer (suspended) and keeps the slot.
    let (status, holder) = s
        .call(
            "POST",
            "/v1/workflows/one_at_a_time/runs",
            Some(start(json!(["holder", 600000]), None)),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{holder}");
    assert_eq!(holder["status"], "waiting");
    assert_eq!(holder["concurrency"]["state"], "holding");
    let mut queued = Vec::new();
    for (label, priority) in [("low", 5), ("high", 1)] {
        let (status, run) = s
            .call(
                "POST",
                "/v1/workflows/one_at_a_time/runs",
                Some(start(json!([label, 0]), Some(priority))),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{run}");
        assert_eq!(run["status"], "queued", "{run}");
        queued.push(run["run_id"].as_str().unwrap().to_string());
    }
    let (_, low) = s.get(&format!("/v1/runs/{}", queued[0])).await;
    assert_eq!(low["concurrency"]["key"], "all");
    assert_eq!(low["concurrency"]["position"], 2, "{low}");
    let (_, detail) = s.get(&format!("/v1/runs/{}/detail", queued[1])).await;
    assert_eq!(detail["run"]["concurrency"]["position"], 1, "{detail}");
    let (_, listed) = s.get("/v1/runs?status=queued").await;
    assert_eq!(listed["runs"].as_array().unwrap().len(), 2, "{listed}");
    let (status, bad) = s
        .call(
            "POST",
            "/v1/workflows/one_at_a_time/runs",
            Some(start(json!(["x", 0]), Some(7))),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    let (_, limits) = s.get("/v1/limits").await;
    let row = &limits["limits"][0];
    assert_eq!(
        (
            &row["workflow"],
            &row["key"],
            &row["limit"],
            &row["in_progress"],
            &row["queued"]
        ),
        (
            &json!("one_at_a_time"),
            &json!("all"),
            &json!(1),
            &json!(1),
            &json!(2)
        ),
        "{limits}"
    );
    // A second slot starts the highest priority at once.
    let (status, change) = s
        .call(
            "POST",
            "/v1/limits/one_at_a_time",
            Some(json!({"limit": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert_eq!(change["started"], json!([queued[1]]));
    let (status, change) = s
        .call("POST", "/v1/limits/one_at_a_time/reset", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::OK, "{change}");
    assert_eq!(change["started"], json!([]));
    let (status, refused) = s
        .call("POST", "/v1/limits/one_at_a_time", Some(json!({})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let metrics = s.metrics().await;
    assert!(
        metrics.contains(r#"keel_concurrency_queued{workflow="one_at_a_time"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"keel_runs_live{status="queued"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"keel_run_start_wait_seconds_count{workflow="one_at_a_time"}"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_deleted_counted_and_purged_over_http() {
    let s = server(None).await;
    let done = s.ten_steps(3).await;
    let done_id = done["run_id"].as_str().unwrap();
    let (_, waiting) = s.start_order("del-1").await;
    assert_eq!(waiting["status"], "waiting", "{waiting}");
    let waiting_id = waiting["run_id"].as_str().unwrap();

    let (status, stats) = s.get("/v1/store/stats").await;
    assert_eq!(status, StatusCode::OK, "{stats}");
    assert_eq!(stats["runs_by_status"]["completed"], 1, "{stats}");
    assert_eq!(stats["runs_by_status"]["waiting"], 1, "{stats}");
    assert_eq!(stats["hooks"], 1, "{stats}");
    // The count is in /metrics too, as last taken.
    let metrics = s.metrics().await;
    for line in [
        r#"keel_store{what="runs",status="completed"} 1"#,
        r#"keel_store{what="runs",status="waiting"} 1"#,
        r#"keel_store{what="hooks",status=""} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    let (status, refused) = s
        .call("DELETE", &format!("/v1/runs/{waiting_id}"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(error_kind(&refused), "run_live");
    assert_eq!(refused["error"]["ids"]["run_id"], waiting_id);

    let (status, deleted) = s.call("DELETE", &format!("/v1/runs/{done_id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_eq!(deleted["runs"], json!([done_id]));
    assert!(
        deleted["journal_entries"].as_u64().unwrap() > 10,
        "{deleted}"
    );
    let (status, gone) = s.get(&format!("/v1/runs/{done_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");
    let (status, again) = s.call("DELETE", &format!("/v1/runs/{done_id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{again}");

    let (status, cancelled) = s
        .call(
            "DELETE",
            &format!("/v1/runs/{waiting_id}?cancel=true"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["runs"], json!([waiting_id]));
    // Its token is free again.
    let (status, restarted) = s.start_order("del-1").await;
    assert_eq!(status, StatusCode::CREATED, "{restarted}");

    let (status, purged) = s.post("/v1/store/purge", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{purged}");
    assert_eq!(
        purged["deleted"]["runs"],
        json!([]),
        "no retention keeps every run"
    );
    assert_eq!(purged["complete"], true);

    let metrics = s.metrics().await;
    assert!(metrics.contains("keel_runs_purged_total 2"), "{metrics}");
}

/// Reads `/v1/jobs/{job_id}` until the job has ended (10 s at most).
async fn job_ended(s: &Server, job_id: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, job) = s.get(&format!("/v1/jobs/{job_id}")).await;
        assert_eq!(status, StatusCode::OK, "{job}");
        if job["state"] != "running" {
            return job;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the job did not end: {job}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failed_runs_are_retried_in_bulk_by_filter_over_http() {
    let s = server(None).await;
    let mut acme = Vec::new();
    let mut other = String::new();
    for tenant in ["acme", "acme", "acme", "other"] {
        let (_, run) = s
            .post(
                "/v1/workflows/trap/runs",
                json!({"wait_ms": 10000, "attributes": {"tenant": tenant}}),
            )
            .await;
        assert_eq!(run["status"], "failed", "{run}");
        match tenant {
            "acme" => acme.push(run["run_id"].as_str().unwrap().to_string()),
            _ => other = run["run_id"].as_str().unwrap().to_string(),
        }
    }
    let body = |dry_run: bool| {
        json!({"action": "retry", "dry_run": dry_run,
               "filter": {"status": ["failed"], "attributes": {"tenant": "acme"}}})
    };
    let (status, preview) = s.post("/v1/runs/bulk", body(true)).await;
    assert_eq!(status, StatusCode::OK, "{preview}");
    assert_eq!(preview["acted_on"], 3, "{preview}");
    assert_eq!(preview["sample"].as_array().unwrap().len(), 3);
    let (_, jobs) = s.get("/v1/jobs").await;
    assert_eq!(jobs["jobs"], json!([]), "a dry run submits nothing");

    let response = s
        .http
        .post(format!("{}/v1/runs/bulk", s.base))
        .json(&body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::ACCEPTED);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let job: Value = response.json().await.unwrap();
    let job_id = job["job_id"].as_str().unwrap();
    assert_eq!(location, format!("/v1/jobs/{job_id}"));
    assert_eq!(job["action"], "retry");
    let done = job_ended(&s, job_id).await;
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(
        done["counts"],
        json!({"matched": 3, "done": 3, "skipped": 0, "failed": 0})
    );
    for run_id in &acme {
        let retries = entries_of_kind(&s, run_id, "run_retried").await;
        assert_eq!(retries, 1, "{run_id}");
    }
    let (_, jobs) = s.get("/v1/jobs").await;
    assert_eq!(jobs["jobs"][0]["job_id"], job_id);
    let (status, ended) = s
        .post(&format!("/v1/jobs/{job_id}/cancel"), json!(null))
        .await;
    assert_eq!(status, StatusCode::OK, "{ended}");
    assert_eq!(
        ended["state"], "completed",
        "an ended job stays as it ended"
    );

    // Restarted in bulk from a position (the failed runs fail again), and
    // forked in bulk into new runs whose sources they name.
    let (status, job) = s
        .post(
            "/v1/runs/bulk",
            json!({"action": "restart", "at": 1,
                   "filter": {"status": ["failed"], "attributes": {"tenant": "other"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    assert_eq!(
        job["restart"],
        json!({"from": {"seq": 1}, "on": null}),
        "{job}"
    );
    let done = job_ended(&s, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["counts"]["done"], 1, "{done}");
    assert_eq!(entries_of_kind(&s, &other, "run_restarted").await, 1);
    let (_, source) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 2, "wait_ms": 10000, "attributes": {"tenant": "forked"}}),
        )
        .await;
    assert_eq!(source["status"], "completed", "{source}");
    let (status, job) = s
        .post(
            "/v1/runs/bulk",
            json!({"action": "fork", "from_step": "noop",
                   "filter": {"workflow": "ten_steps", "attributes": {"tenant": "forked"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{job}");
    let done = job_ended(&s, job["job_id"].as_str().unwrap()).await;
    assert_eq!(done["counts"]["done"], 1, "{done}");
    let source_id = source["run_id"].as_str().unwrap();
    let (_, forks) = s
        .get(&format!("/v1/runs?attr=forked_from%3D{source_id}"))
        .await;
    assert_eq!(forks["runs"].as_array().unwrap().len(), 1, "{forks}");
    for (body, refusal) in [
        (
            json!({"action": "fork", "filter": {"workflow": "trap"}}),
            "give `from_step` (a step's name) or `at` (a journal position)",
        ),
        (
            json!({"action": "cancel", "from_step": "charge", "filter": {"workflow": "trap"}}),
            "`from_step`, `at` and `on` are a bulk restart's or fork's",
        ),
        (
            json!({"action": "restart", "from_step": "charge", "at": 2, "filter": {"workflow": "trap"}}),
            "give `from_step` (a step's name) or `at` (a journal position), one of them",
        ),
    ] {
        let (status, refused) = s.post("/v1/runs/bulk", body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(refusal), "{message}");
    }

    // Refusals name the problem.
    let (status, refused) = s
        .post("/v1/runs/bulk", json!({"action": "delete", "filter": {}}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(error_kind(&refused), "invalid_request");
    assert_eq!(
        refused["error"]["message"],
        "a bulk delete needs a filter (a status, a workflow, a time, an attribute); to act on every run, name the statuses"
    );
    let (status, refused) = s
        .post(
            "/v1/runs/bulk",
            json!({"action": "explode", "filter": {"status": ["failed"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    // A value no run can hold (a NUL) matches no run: PostgreSQL's JSONB
    // is never asked about it.
    let (status, none) = s
        .post(
            "/v1/runs/bulk",
            json!({"action": "cancel", "dry_run": true,
                   "filter": {"attributes": {"tenant": "a\0b"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{none}");
    assert_eq!(none["acted_on"], 0, "{none}");
    let (status, none) = s.get("/v1/runs?attr=tenant%3Da%00b").await;
    assert_eq!(status, StatusCode::OK, "{none}");
    assert_eq!(none["runs"], json!([]));
    let (status, refused) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "attributes": {"tenant": "a\0b"}}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a start cannot store one: {refused}"
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("NUL"),
        "{refused}"
    );
    let (status, refused) = s
        .post(
            "/v1/workflows/ten_steps/runs",
            json!({"input": 1, "timeout_ms": 0}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, refused) = s
        .post(
            "/v1/components/prune",
            json!({"grace_ms": 3_153_600_000_001u64}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    let (status, missing) = s.get("/v1/jobs/no-such-job").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(error_kind(&missing), "job_not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn components_are_pruned_over_http_and_deployed_ones_kept() {
    let s = server(None).await;
    let (status, dry) = s
        .post(
            "/v1/components/prune",
            json!({"grace_ms": 0, "dry_run": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{dry}");
    assert_eq!(dry["components"], json!([]), "both are deployed: {dry}");
    assert_eq!(dry["referenced"], 2, "{dry}");
    assert_eq!(dry["dry_run"], true);
    let (status, pruned) = s.post("/v1/components/prune", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{pruned}");
    assert_eq!(pruned["components"], json!([]));
    let (status, refused) = s
        .post("/v1/components/prune", json!({"grace_ms": "soon"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}

/// An `order_updates` run of `order_id` started with its start token
/// `order:ORDER_ID`, answered once it waits.
async fn waiting_order(s: &Server, order_id: &str) -> Value {
    let (status, run) = s
        .post(
            "/v1/workflows/order_updates/runs",
            json!({"input": {"order_id": order_id, "note": "placed"}, "hook": {"token": format!("order:{order_id}")},
                   "wait_ms": 10000, "return_on_wait": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    run
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_run_says_over_http_which_hook_resumes_it() {
    let s = server(None).await;
    let run = waiting_order(&s, "w-1").await;
    assert_eq!(run["status"], "waiting");
    let hook = json!([{"kind": "hook", "token": "order:w-1"}]);
    assert_eq!(run["waiting_on"], hook, "the start says so: {run}");
    let run_id = run["run_id"].as_str().unwrap();
    let (_, got) = s.get(&format!("/v1/runs/{run_id}")).await;
    assert_eq!(got["waiting_on"], hook, "{got}");
    let (_, detail) = s.get(&format!("/v1/runs/{run_id}/detail")).await;
    assert_eq!(detail["run"]["waiting_on"], hook, "{detail}");
    let (status, resumed) = s
        .post(
            "/v1/hooks/order:w-1/resume?wait_ms=10000&return_on_wait=true",
            json!({"note": "paid", "done": false}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["waiting_on"], hook, "still its inbox: {resumed}");
    let (_, listed) = s.get("/v1/runs?status=waiting").await;
    assert!(
        listed["runs"][0].get("waiting_on").is_none(),
        "lists leave it out"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_that_does_not_fit_the_hooks_type_is_refused_over_http() {
    let s = server(None).await;
    let run = waiting_order(&s, "w-2").await;
    let run_id = run["run_id"].as_str().unwrap();
    // The workflow's own hook on the token holds the payload type's schema.
    let (_, resumed) = s
        .post(
            "/v1/hooks/order:w-2/resume?wait_ms=10000&return_on_wait=true",
            json!({"note": "paid"}),
        )
        .await;
    assert_eq!(resumed["status"], "waiting", "{resumed}");
    let (_, hook) = s.get("/v1/hooks/order:w-2").await;
    assert_eq!(
        hook["payload_schema"]["properties"]["note"]["type"], "string",
        "{hook}"
    );
    let (status, refused) = s
        .post("/v1/hooks/order:w-2/resume", json!({"note": 5}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(error_kind(&refused), "invalid_input");
    assert_eq!(refused["error"]["ids"]["run_id"], run_id, "{refused}");
    assert_eq!(refused["error"]["ids"]["token"], "order:w-2", "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(message.contains("at /note:"), "{message}");
    assert_eq!(
        refused["error"]["problems"][0]["path"], "/note",
        "each place, for clients: {refused}"
    );
    let received = entries_of_kind(&s, run_id, "hook_received").await;
    assert_eq!(received, 1, "only the payload that fits");
}

#[tokio::test(flavor = "multi_thread")]
async fn cancelling_pausing_or_resuming_a_run_that_had_ended_is_refused_over_http() {
    let s = server(None).await;
    let done = s.ten_steps(2).await;
    let done_id = done["run_id"].as_str().unwrap();
    let (status, refused) = s
        .post(&format!("/v1/runs/{done_id}/cancel"), json!(null))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(error_kind(&refused), "run_ended");
    assert_eq!(
        refused["error"]["message"],
        format!("run {done_id} had already ended (completed); nothing was cancelled")
    );
    assert_eq!(refused["error"]["ids"]["run_id"], done_id);
    for action in ["pause", "resume"] {
        let (status, refused) = s
            .post(&format!("/v1/runs/{done_id}/{action}"), json!(null))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{action}: {refused}");
        assert_eq!(error_kind(&refused), "run_ended", "{action}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .ends_with(&format!("nothing was {action}d")),
            "{refused}"
        );
    }
    // A waiting run is cancelled once; a second cancel is refused.
    let (_, waiting) = s.start_order("twice-1").await;
    let waiting_id = waiting["run_id"].as_str().unwrap();
    let (status, cancelled) = s
        .post(
            &format!("/v1/runs/{waiting_id}/cancel?wait_ms=10000"),
            json!(null),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    let (status, again) = s
        .post(&format!("/v1/runs/{waiting_id}/cancel"), json!(null))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("(cancelled)"),
        "{again}"
    );
}

/// The `(id, event, data)` of each complete server-sent event in `text`.
fn sse_events(text: &str) -> Vec<(Option<u64>, String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| {
                block
                    .lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
            };
            let data = field("data:")?;
            Some((
                field("id:").and_then(|id| id.parse().ok()),
                field("event:").unwrap_or_default(),
                serde_json::from_str(&data).ok()?,
            ))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_reader_that_reconnects_after_chunk_37_gets_the_rest_once() {
    use futures::StreamExt;
    let s = server(None).await;
    let (status, run) = s
        .post(
            "/v1/workflows/streamer/runs",
            json!({"input": {"count": 60}, "wait_ms": 10000}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    let run_id = run["run_id"].as_str().unwrap();
    let (status, listed) = s.get(&format!("/v1/runs/{run_id}/streams")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        listed,
        json!({"streams": [{"name": "progress", "chunks": 61, "closed": true, "bytes": 10 * 7 + 50 * 8}]})
    );
    let url = format!("{}/v1/runs/{run_id}/streams/progress", s.base);
    // Read until chunk 37, then drop the connection.
    let response = s.http.get(&url).send().await.unwrap();
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let first = loop {
        let bytes = body.next().await.expect("more events").unwrap();
        text.push_str(std::str::from_utf8(&bytes).unwrap());
        let events = sse_events(&text);
        if events.iter().any(|(id, _, _)| *id == Some(37)) {
            break events;
        }
    };
    drop(body);
    let first: Vec<_> = first
        .into_iter()
        .filter(|(id, _, _)| *id <= Some(37))
        .collect();
    assert_eq!(
        first
            .iter()
            .map(|(id, _, _)| id.unwrap())
            .collect::<Vec<_>>(),
        (0..=37).collect::<Vec<_>>()
    );
    assert_eq!(first[37].1, "data");
    assert_eq!(first[37].2["value"], json!({"i": 37}));
    // Reconnect as an EventSource does: after the last event it got.
    let rest = s
        .http
        .get(&url)
        .header("Last-Event-ID", "37")
        .send()
        .await
        .unwrap();
    let text = tokio::time::timeout(Duration::from_secs(20), rest.text())
        .await
        .expect("the stream ends at its close")
        .unwrap();
    let events = sse_events(&text);
    assert_eq!(
        events
            .iter()
            .map(|(id, _, _)| id.unwrap())
            .collect::<Vec<_>>(),
        (38..=60).collect::<Vec<_>>(),
        "no gap and no duplicate"
    );
    assert_eq!(events[0].2["value"], json!({"i": 38}));
    assert_eq!(events.last().unwrap().1, "closed");
    // `from` does what Last-Event-ID does, from an index.
    let from = s.http.get(format!("{url}?from=59")).send().await.unwrap();
    let ids: Vec<u64> = sse_events(&from.text().await.unwrap())
        .iter()
        .map(|(id, _, _)| id.unwrap())
        .collect();
    assert_eq!(ids, [59, 60]);
    // Bad reads are refused as JSON.
    let bad = s
        .http
        .get(&url)
        .header("Last-Event-ID", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let (status, body) = s.get("/v1/runs/nobody/streams/progress").await;
    assert_eq!(
        (status, error_kind(&body)),
        (StatusCode::NOT_FOUND, "run_not_found")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_resume_gets_the_workflows_reply_and_a_retry_with_its_payload_id_the_same_one() {
    let s = server(None).await;
    let (status, run) = s
        .post(
            "/v1/workflows/replier/runs",
            json!({"input": "ask:http", "wait_ms": 10000, "return_on_wait": true}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "waiting");
    let resume = "/v1/hooks/ask:http/resume?payload_id=q-1&wait_reply_ms=10000";
    let (status, answered) = s.post(resume, json!({"q": "hello"})).await;
    assert_eq!(status, StatusCode::OK, "{answered}");
    assert_eq!(answered["payload_id"], "q-1");
    assert_eq!(answered["reply"], json!({"echo": {"q": "hello"}, "n": 1}));
    // The client lost that answer and retries: the same reply, one payload.
    let (status, again) = s.post(resume, json!({"q": "hello"})).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["reply"], answered["reply"]);
    let (_, journal) = s
        .get(&format!(
            "/v1/runs/{}/journal",
            run["run_id"].as_str().unwrap()
        ))
        .await;
    let received = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "hook_received")
        .count();
    assert_eq!(received, 1, "the payload was applied once");
    let (status, reply) = s.get("/v1/hooks/ask:http/replies/q-1").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(reply["reply"], answered["reply"]);
    assert_eq!(reply["index"], 0);
    // No payload of that ID; a bad ID.
    let (status, body) = s.get("/v1/hooks/ask:http/replies/q-9").await;
    assert_eq!(
        (status, error_kind(&body)),
        (StatusCode::NOT_FOUND, "payload_not_found")
    );
    let (status, body) = s
        .post("/v1/hooks/ask:http/resume?payload_id=%20", json!(1))
        .await;
    assert_eq!(
        (status, error_kind(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    // Without a wait for the reply, the answer names the payload's ID.
    let (status, plain) = s.post("/v1/hooks/ask:http/resume", json!("stop")).await;
    assert_eq!(status, StatusCode::OK, "{plain}");
    assert!(
        plain["payload_id"]
            .as_str()
            .is_some_and(|id| !id.is_empty())
    );
    assert!(plain.get("reply").is_none());
    // Its run deleted, a retry of a payload it took is refused as such:
    // nothing is delivered, and the answer says where the payload went.
    let run_id = run["run_id"].as_str().unwrap();
    let (status, _) = s
        .call("DELETE", &format!("/v1/runs/{run_id}?cancel=true"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = s.post(resume, json!({"q": "hello"})).await;
    assert_eq!(
        (status, error_kind(&body)),
        (StatusCode::NOT_FOUND, "run_not_found"),
        "{body}"
    );
    assert_eq!(body["error"]["ids"]["run_id"], run_id);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deleted")
    );

    // A run that ends on the payload without replying ends the wait: the
    // payload was delivered (202, the run as it ended), not an error.
    let (_, run) = s
        .post(
            "/v1/workflows/streamer/runs",
            json!({"input": {"count": 2, "pause_at": 1, "token": "go:http"}, "wait_ms": 10000, "return_on_wait": true}),
        )
        .await;
    assert_eq!(run["status"], "waiting", "{run}");
    let (status, ended) = s
        .post(
            "/v1/hooks/go:http/resume?payload_id=g-1&wait_reply_ms=30000",
            json!(true),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{ended}");
    assert_eq!(ended["reply"], Value::Null, "{ended}");
    assert_eq!(ended["payload_id"], "g-1");
}

impl Server {
    /// A call with the bearer `token` (if any), any `headers`, and a raw
    /// JSON `body`: the status and the JSON answer.
    async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        path: &str,
        headers: &[(&str, String)],
        body: Option<Vec<u8>>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("{method} {path} answered {status} with no JSON ({e}): {text}")
        });
        (status, value)
    }
}

/// The count of journal entries of `kind` in `run_id`'s journal, read with
/// the server's `token`.
async fn entries_as(s: &Server, token: &str, run_id: &str, kind: &str) -> usize {
    let path = format!("/v1/runs/{run_id}/journal");
    let (_, journal) = s.call_as(Some(token), "GET", &path, &[], None).await;
    journal
        .as_array()
        .unwrap_or_else(|| panic!("not a journal: {journal}"))
        .iter()
        .filter(|e| e["kind"] == kind)
        .count()
}

fn body(value: Value) -> Option<Vec<u8>> {
    Some(serde_json::to_vec(&value).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn scoped_tokens_grant_one_thing_each_until_they_expire() {
    use keel_host::core::access::{self, Claims, Scope};
    let secret = b"a signing secret of 32 bytes at least".to_vec();
    let s = server_with(Some("s3cret"), |_, c| {
        c.signing_secret = Some(secret.clone())
    })
    .await;
    let master = Some("s3cret");
    let wait = "wait_ms=10000&return_on_wait=true";
    let start = |order: &'static str, token: Option<&'static str>| {
        let s = &s;
        async move {
            let request = json!({"input": {"order_id": order, "note": "placed"},
                "hook": {"token": format!("order:{order}")}, "wait_ms": 10000, "return_on_wait": true});
            s.call_as(
                token,
                "POST",
                "/v1/workflows/order_updates/runs",
                &[],
                body(request),
            )
            .await
        }
    };
    let (_, r1) = start("t-1", master).await;
    let (_, r2) = start("t-2", master).await;
    let (r1, r2) = (
        r1["run_id"].as_str().unwrap(),
        r2["run_id"].as_str().unwrap(),
    );
    let mint = |scope: Value| {
        let s = &s;
        async move {
            let (status, minted) = s
                .call_as(
                    master,
                    "POST",
                    "/v1/tokens",
                    &[],
                    body(json!({"scope": scope, "ttl_ms": 60000})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{minted}");
            minted["token"].as_str().unwrap().to_string()
        }
    };
    let forbidden = |token: String, method: &'static str, path: String, payload: Option<Value>| {
        let s = &s;
        async move {
            let (status, refused) = s
                .call_as(Some(&token), method, &path, &[], payload.and_then(body))
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {refused}");
            assert_eq!(error_kind(&refused), "forbidden");
            assert!(
                refused["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("may only"),
                "{refused}"
            );
        }
    };

    // One hook: it resumes that hook, and nothing else.
    let hook = mint(json!({"kind": "resume_hook", "token": "order:t-1"})).await;
    let (status, resumed) = s
        .call_as(
            Some(&hook),
            "POST",
            &format!("/v1/hooks/order:t-1/resume?{wait}"),
            &[],
            body(json!({"note": "paid"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    let (status, _) = s
        .call_as(Some(&hook), "GET", "/v1/hooks/order:t-1", &[], None)
        .await;
    assert_eq!(status, StatusCode::OK);
    forbidden(
        hook.clone(),
        "POST",
        "/v1/hooks/order:t-2/resume".into(),
        Some(json!({"note": "x"})),
    )
    .await;
    forbidden(hook.clone(), "GET", format!("/v1/runs/{r1}"), None).await;
    forbidden(hook.clone(), "GET", "/v1/runs".into(), None).await;
    forbidden(
        hook.clone(),
        "POST",
        "/v1/workflows/order_updates/runs".into(),
        Some(json!({"input": {"order_id": "x", "note": "n"}})),
    )
    .await;
    forbidden(
        hook.clone(),
        "POST",
        "/v1/tokens".into(),
        Some(json!({"scope": {"kind": "read_run", "run_id": r1}})),
    )
    .await;
    assert_eq!(
        entries_as(&s, "s3cret", r1, "hook_received").await,
        1,
        "the resume's"
    );
    assert_eq!(
        entries_as(&s, "s3cret", r2, "hook_received").await,
        0,
        "nothing"
    );

    // One run: read it, its journal and result; nothing else.
    let read = mint(json!({"kind": "read_run", "run_id": r1})).await;
    for path in [
        format!("/v1/runs/{r1}"),
        format!("/v1/runs/{r1}/journal"),
        format!("/v1/runs/{r1}/detail"),
        format!("/v1/runs/{r1}/queries"),
    ] {
        let (status, got) = s.call_as(Some(&read), "GET", &path, &[], None).await;
        assert_eq!(status, StatusCode::OK, "{path}: {got}");
    }
    forbidden(read.clone(), "GET", format!("/v1/runs/{r2}"), None).await;
    forbidden(read.clone(), "GET", format!("/v1/runs/{r2}/queries"), None).await;
    forbidden(read.clone(), "POST", format!("/v1/runs/{r1}/cancel"), None).await;
    forbidden(
        read.clone(),
        "POST",
        "/v1/hooks/order:t-1/resume".into(),
        Some(json!({"note": "x"})),
    )
    .await;

    // Starts of one workflow, only with the start hook token it fixes.
    let starts = mint(
        json!({"kind": "start_workflow", "workflow": "order_updates", "hook_token": "order:t-3"}),
    )
    .await;
    let (status, started) = start("t-3", None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "no token at all: {started}"
    );
    let request =
        json!({"input": {"order_id": "t-3", "note": "placed"}, "hook": {"token": "order:t-3"}});
    let (status, started) = s
        .call_as(
            Some(&starts),
            "POST",
            "/v1/workflows/order_updates/runs",
            &[],
            body(request),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    forbidden(
        starts.clone(),
        "POST",
        "/v1/workflows/order_updates/runs".into(),
        Some(
            json!({"input": {"order_id": "t-4", "note": "placed"}, "hook": {"token": "order:t-4"}}),
        ),
    )
    .await;
    forbidden(
        starts.clone(),
        "POST",
        "/v1/workflows/ten_steps/runs".into(),
        Some(json!({"input": 1})),
    )
    .await;

    // Expired, forged, or for too long: refused.
    let claims = Claims {
        scope: Scope::ReadRun { run_id: r1.into() },
        issued_at_ms: 1,
        expires_at_ms: 2,
    };
    let forged_claims = Claims {
        expires_at_ms: u64::MAX,
        ..claims.clone()
    };
    for (token, says) in [
        (access::mint(&secret, &claims), "expired"),
        (
            access::mint(b"another secret of 32 bytes at least", &forged_claims),
            "signature",
        ),
    ] {
        let (status, refused) = s
            .call_as(Some(&token), "GET", &format!("/v1/runs/{r1}"), &[], None)
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    let (status, refused) = s
        .call_as(master, "POST", "/v1/tokens", &[], body(json!({"scope": {"kind": "read_run", "run_id": r1}, "ttl_ms": 8 * 24 * 3_600_000u64})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signed_webhook_reaches_its_hook_and_a_wrong_stale_or_replayed_one_never_does() {
    use keel_host::core::webhook::sign;
    let s = server(Some("s3cret")).await;
    let master = Some("s3cret");
    let (status, run) = s
        .call_as(
            master,
            "POST",
            "/v1/workflows/replier/runs",
            &[],
            body(json!({"input": "pay:o-9", "wait_ms": 10000, "return_on_wait": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{run}");
    assert_eq!(run["status"], "waiting", "its hook is open: {run}");
    let run_id = run["run_id"].as_str().unwrap().to_string();
    let spec = json!({"id": "stripe", "hook": "pay:{/data/object/metadata/order_id}", "scheme": "stripe", "secret": "whsec_test_secret"});
    let (status, created) = s
        .call_as(master, "POST", "/v1/webhooks", &[], body(spec.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["path"], "/v1/webhooks/stripe");
    assert!(
        created.get("secret").is_none(),
        "the secret is never shown: {created}"
    );
    let (status, again) = s
        .call_as(master, "POST", "/v1/webhooks", &[], body(spec))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");
    assert_eq!(error_kind(&again), "webhook_exists");

    let delivery = |event: &str| {
        serde_json::to_vec(&json!({"id": event, "type": "payment_intent.succeeded",
            "data": {"object": {"metadata": {"order_id": "o-9"}}}}))
        .unwrap()
    };
    let signed = |t: u64, secret: &str, body: &[u8]| {
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        vec![(
            "stripe-signature",
            format!("t={t},v1={}", sign(secret, &signed)),
        )]
    };
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let deliver = |headers: Vec<(&'static str, String)>, payload: Vec<u8>| {
        let s = &s;
        // The sender has no keel token.
        async move {
            s.call_as(None, "POST", "/v1/webhooks/stripe", &headers, Some(payload))
                .await
        }
    };
    let received = || entries_as(&s, "s3cret", &run_id, "hook_received");
    let before = received().await;

    // A wrong secret, an altered body, a stale timestamp, no signature.
    let first = delivery("evt_1");
    for (headers, payload, says) in [
        (
            signed(now_s, "whsec_wrong", &first),
            first.clone(),
            "does not match",
        ),
        (
            signed(now_s, "whsec_test_secret", &first),
            delivery("evt_2"),
            "does not match",
        ),
        (
            signed(now_s - 400, "whsec_test_secret", &first),
            first.clone(),
            "beyond the tolerance",
        ),
        (vec![], first.clone(), "no `stripe-signature` header"),
    ] {
        let (status, refused) = deliver(headers, payload).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{refused}");
        assert_eq!(error_kind(&refused), "signature_refused");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    assert_eq!(received().await, before, "nothing reached the run");

    // A good one reaches the hook once; its replay is refused.
    let good = signed(now_s, "whsec_test_secret", &first);
    let (status, delivered) = deliver(good.clone(), first.clone()).await;
    assert_eq!(status, StatusCode::OK, "{delivered}");
    assert_eq!(delivered["token"], "pay:o-9");
    assert_eq!(delivered["run_id"], run_id.as_str());
    assert_eq!(delivered["duplicate"], false);
    // The workflow answers each payload: its reply to the event's ID says
    // it journaled the delivery.
    let (status, reply) = s
        .call_as(
            master,
            "GET",
            "/v1/hooks/pay:o-9/replies/evt_1?wait_ms=10000",
            &[],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(reply["reply"]["n"], 1, "{reply}");
    let (status, replayed) = deliver(good, first.clone()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{replayed}");
    assert!(
        replayed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("replayed"),
        "{replayed}"
    );
    // Stripe's retry of the same event, signed anew: delivered before.
    let (status, retried) = deliver(
        signed(now_s + 1, "whsec_test_secret", &first),
        first.clone(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{retried}");
    assert_eq!(retried["duplicate"], true, "{retried}");
    assert_eq!(
        received().await,
        before + 1,
        "one payload from three deliveries"
    );
    let journal_path = format!("/v1/runs/{run_id}/journal");
    let (_, journal) = s.call_as(master, "GET", &journal_path, &[], None).await;
    let payloads: Vec<&Value> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "hook_received")
        .collect();
    assert!(
        payloads.last().unwrap().to_string().contains("evt_1"),
        "the body is the payload: {payloads:?}"
    );

    // Listed without secrets; deleted, later deliveries are not found.
    let (_, listed) = s.call_as(master, "GET", "/v1/webhooks", &[], None).await;
    assert_eq!(listed["webhooks"][0]["id"], "stripe", "{listed}");
    let (status, _) = s.call_as(None, "GET", "/v1/webhooks", &[], None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "managing webhooks needs the token"
    );
    let (status, _) = s
        .call_as(master, "DELETE", "/v1/webhooks/stripe", &[], None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let second = delivery("evt_3");
    let (status, gone) = deliver(signed(now_s, "whsec_test_secret", &second), second).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{gone}");
    assert_eq!(error_kind(&gone), "webhook_not_found");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_senders_retry_of_the_delivery_that_ended_its_run_is_a_duplicate() {
    use keel_host::core::webhook::sign;
    let s = server(Some("s3cret")).await;
    let master = Some("s3cret");
    // A run that ends with the first payload its hook gets.
    let start = |token: &str| {
        let s = &s;
        let input = json!({"count": 1, "pause_at": 0, "token": token});
        async move {
            let (status, run) = s
                .call_as(
                    master,
                    "POST",
                    "/v1/workflows/streamer/runs",
                    &[],
                    body(json!({"input": input, "wait_ms": 10000, "return_on_wait": true})),
                )
                .await;
            assert_eq!(status, StatusCode::CREATED, "{run}");
            assert_eq!(run["status"], "waiting", "{run}");
            run["run_id"].as_str().unwrap().to_string()
        }
    };
    for spec in [
        json!({"id": "stripe", "hook": "pay:{/data/object/metadata/order_id}", "scheme": "stripe", "secret": "whsec_stripe_test"}),
        json!({"id": "github", "hook": "pr:{/pull_request/number}", "scheme": "github", "secret": "github_test"}),
    ] {
        let (status, created) = s
            .call_as(master, "POST", "/v1/webhooks", &[], body(spec))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{created}");
    }
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let stripe_event = |id: &str| {
        serde_json::to_vec(&json!({"id": id, "type": "payment_intent.succeeded",
            "data": {"object": {"metadata": {"order_id": "o-7"}}}}))
        .unwrap()
    };
    let stripe_signed = |t: u64, body: &[u8]| {
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        vec![(
            "stripe-signature",
            format!("t={t},v1={}", sign("whsec_stripe_test", &signed)),
        )]
    };
    let github_signed = |delivery: &str, body: &[u8]| {
        vec![
            (
                "x-hub-signature-256",
                format!("sha256={}", sign("github_test", body)),
            ),
            ("x-github-delivery", delivery.to_string()),
        ]
    };
    let deliver =
        |webhook: &'static str, headers: Vec<(&'static str, String)>, payload: Vec<u8>| {
            let s = &s;
            async move {
                s.call_as(
                    None,
                    "POST",
                    &format!("/v1/webhooks/{webhook}"),
                    &headers,
                    Some(payload),
                )
                .await
            }
        };
    let entries = |run_id: String| {
        let s = &s;
        async move {
            let path = format!("/v1/runs/{run_id}/result?wait_ms=10000");
            let (_, ended) = s.call_as(master, "GET", &path, &[], None).await;
            assert_eq!(ended["status"], "completed", "{ended}");
            let path = format!("/v1/runs/{run_id}/journal");
            let (_, journal) = s.call_as(master, "GET", &path, &[], None).await;
            journal.as_array().unwrap().len()
        }
    };

    // Stripe: the event ends the run; its resend, signed anew, is a
    // duplicate naming the run, and journals nothing.
    let paid = start("pay:o-7").await;
    let event = stripe_event("evt_7");
    let (status, first) = deliver("stripe", stripe_signed(now_s, &event), event.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    let written = entries(paid.clone()).await;
    let (status, resent) =
        deliver("stripe", stripe_signed(now_s + 60, &event), event.clone()).await;
    assert_eq!(status, StatusCode::OK, "{resent}");
    assert_eq!(resent["duplicate"], true, "{resent}");
    assert_eq!(resent["run_id"], paid.as_str(), "{resent}");
    assert_eq!(entries(paid).await, written, "a resend journals nothing");
    // Another event for a token no run holds: not found, as documented.
    let other = stripe_event("evt_8");
    let (status, unheld) = deliver("stripe", stripe_signed(now_s, &other), other).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unheld}");
    assert_eq!(error_kind(&unheld), "hook_not_found");

    // GitHub: a redelivery carries the same delivery GUID and signature.
    let reviewed = start("pr:42").await;
    let pull =
        serde_json::to_vec(&json!({"action": "closed", "pull_request": {"number": 42}})).unwrap();
    let (status, first) = deliver("github", github_signed("gh-1", &pull), pull.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["duplicate"], false, "{first}");
    let written = entries(reviewed.clone()).await;
    let (status, redelivered) = deliver("github", github_signed("gh-1", &pull), pull.clone()).await;
    assert_eq!(status, StatusCode::OK, "{redelivered}");
    assert_eq!(redelivered["duplicate"], true, "{redelivered}");
    assert_eq!(redelivered["run_id"], reviewed.as_str(), "{redelivered}");
    assert_eq!(
        entries(reviewed).await,
        written,
        "a redelivery journals nothing"
    );

    // A webhook that routes deliveries for hooks no run holds to an event
    // key: answered 200 with the event, which starts its subscriber; a
    // redelivery reaches the same run through the subscriber's key.
    let spec = json!({"id": "github-routed", "hook": "pr:{/pull_request/number}",
        "unheld_event": "idempotency:example", "scheme": "github", "secret": "github_test"});
    let (status, created) = s
        .call_as(master, "POST", "/v1/webhooks", &[], body(spec))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["unheld_event"], "idempotency:example", "{created}");
    let pull = serde_json::to_vec(&json!({"id": "pr-43", "pull_request": {"number": 43}})).unwrap();
    let (status, routed) =
        deliver("github-routed", github_signed("gh-2", &pull), pull.clone()).await;
    assert_eq!(status, StatusCode::OK, "{routed}");
    assert_eq!(routed["token"], "pr:43", "{routed}");
    assert!(
        routed.get("run_id").is_none(),
        "no run held the hook: {routed}"
    );
    assert_eq!(routed["event"]["key"], "idempotency:example", "{routed}");
    assert_eq!(routed["event"]["metadata"]["token"], "pr:43", "{routed}");
    assert_eq!(
        routed["event"]["metadata"]["delivery_id"], "gh-2",
        "{routed}"
    );
    let outcome = &routed["event"]["outcomes"][0];
    assert_eq!(outcome["workflow"], "idempotent_task", "{routed}");
    let run_id = outcome["run_id"].as_str().unwrap().to_string();
    let path = format!("/v1/runs/{run_id}/result?wait_ms=10000");
    let (_, ended) = s.call_as(master, "GET", &path, &[], None).await;
    assert_eq!(
        ended["output"]["result"], "Hello, world from task pr-43",
        "{ended}"
    );
    let (status, again) = deliver("github-routed", github_signed("gh-2", &pull), pull).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(
        again["event"]["outcomes"][0]["run_id"],
        run_id.as_str(),
        "{again}"
    );
    assert_eq!(
        again["event"]["outcomes"][0]["deduplicated"], true,
        "{again}"
    );
    // A webhook of an event key: every delivery is an event, with no token.
    let spec = json!({"id": "github-events", "event": "idempotency:example",
        "scheme": "github", "secret": "github_test"});
    let (status, created) = s
        .call_as(master, "POST", "/v1/webhooks", &[], body(spec))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let push = serde_json::to_vec(&json!({"id": "push-1"})).unwrap();
    let (status, pushed) = deliver("github-events", github_signed("gh-3", &push), push).await;
    assert_eq!(status, StatusCode::OK, "{pushed}");
    assert!(pushed.get("token").is_none(), "{pushed}");
    assert_eq!(
        pushed["event"]["metadata"],
        json!({"webhook": "github-events", "delivery_id": "gh-3"}),
        "{pushed}"
    );
    assert_eq!(
        pushed["event"]["outcomes"][0]["workflow"], "idempotent_task",
        "{pushed}"
    );
    // `unheld_event` goes with a hook, not an event key.
    let spec =
        json!({"id": "bad", "event": "a", "unheld_event": "b", "scheme": "github", "secret": "x"});
    let (status, refused) = s
        .call_as(master, "POST", "/v1/webhooks", &[], body(spec))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`unheld_event` goes with `hook`"),
        "{refused}"
    );
}
