//! Runs and their streams as resources: `keel://runs/{run_id}` is the run
//! (as `GET /v1/runs/{run_id}/detail` gives it: its record, output and
//! timeline), `keel://runs/{run_id}/streams/{name}` a stream's chunks so
//! far. Nothing lists them: a list of all runs is an operator's command.
//! A client subscribes to them (`resources/subscribe` on a session,
//! `subscriptions/listen` on 2026-07-28) and hears each change.

use futures::{Stream, StreamExt};
use keel_core::RunId;
use keel_core::access::Scope;
use keel_host::{Keel, Watched};
use rmcp::model::{ErrorData, ReadResourceResult, ResourceContents, ResourceTemplate};

use super::{forbidden, internal};
use crate::state::AppState;
use crate::wire::{ChunkView, RunDetail};

/// The scheme and authority every resource URI starts with.
const RUNS: &str = "keel://runs/";

/// How many chunks one read of a stream resource gives at most.
const MAX_CHUNKS: usize = 1_000;

/// The URI of run `run_id`.
pub(super) fn run_uri(run_id: &str) -> String {
    format!("{RUNS}{run_id}")
}

/// The templates a client fills to read a run or a stream.
pub(super) fn templates() -> Vec<ResourceTemplate> {
    vec![
        ResourceTemplate::new(format!("{RUNS}{{run_id}}"), "run")
            .with_title("A run")
            .with_description("The run: its status, input, output or error, and its timeline")
            .with_mime_type("application/json"),
        ResourceTemplate::new(format!("{RUNS}{{run_id}}/streams/{{name}}"), "stream")
            .with_title("A run's stream")
            .with_description("The chunks the run's stream holds so far, in order")
            .with_mime_type("application/json"),
    ]
}

/// Whether a token of `scope` may read run `run_id`.
pub(super) fn may_read(scope: &Scope, run_id: &str) -> bool {
    matches!(scope, Scope::ReadRun { run_id: r } if r == run_id)
}

/// What `uri` names.
enum Named {
    Run(RunId),
    Stream(RunId, String),
}

/// Parses a resource URI, or says which forms there are.
fn parse(uri: &str) -> Result<Named, ErrorData> {
    let unknown = || {
        ErrorData::resource_not_found(
            format!(
                "`{uri}` is not a keel resource: read `{RUNS}RUN_ID` or `{RUNS}RUN_ID/streams/NAME`"
            ),
            None,
        )
    };
    let rest = uri.strip_prefix(RUNS).ok_or_else(unknown)?;
    let (run, stream) = match rest.split_once("/streams/") {
        Some((run, name)) => (run, Some(name)),
        None => (rest, None),
    };
    let run_id = RunId::parse(run).map_err(|_| unknown())?;
    Ok(match stream {
        Some(name) if keel_core::stream::check_stream_name(name).is_ok() => {
            Named::Stream(run_id, name.to_string())
        }
        Some(_) => return Err(unknown()),
        None => Named::Run(run_id),
    })
}

/// Reads the resource `uri`, within `scope`.
pub(super) async fn read(
    s: &AppState,
    uri: &str,
    scope: Option<&Scope>,
) -> Result<ReadResourceResult, ErrorData> {
    let named = parse(uri)?;
    let run_id = match &named {
        Named::Run(id) | Named::Stream(id, _) => id,
    };
    if let Some(scope) = scope.filter(|s| !may_read(s, run_id.as_str())) {
        return Err(forbidden(scope, &format!("reading run {run_id}")));
    }
    let run = s.keel.get_run(run_id).await.map_err(|e| match e {
        keel_host::Error::RunNotFound { .. } => {
            ErrorData::resource_not_found(format!("no run has the ID {run_id}"), None)
        }
        e => internal(e),
    })?;
    let json = match &named {
        Named::Run(_) => {
            let detail = RunDetail::read(&s.keel, &run).await.map_err(internal)?;
            serde_json::to_string(&detail)
        }
        Named::Stream(_, name) => {
            let chunks = s
                .keel
                .chunks(run_id, name, 0, MAX_CHUNKS)
                .await
                .map_err(internal)?;
            let views: Vec<ChunkView> = chunks.iter().map(ChunkView::from).collect();
            serde_json::to_string(&views)
        }
    }
    .map_err(internal)?;
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(json, uri).with_mime_type("application/json"),
    ]))
}

/// The URIs in `uris` that name keel resources, the rest left out.
pub(super) fn known(uris: &[String]) -> Vec<String> {
    uris.iter().filter(|u| parse(u).is_ok()).cloned().collect()
}

/// Refuses `uri` unless it names a keel resource that a token of `scope`
/// may read.
pub(super) fn check(uri: &str, scope: Option<&Scope>) -> Result<(), ErrorData> {
    let (Named::Run(run_id) | Named::Stream(run_id, _)) = parse(uri)?;
    match scope.filter(|s| !may_read(s, run_id.as_str())) {
        Some(scope) => Err(forbidden(scope, &format!("reading run {run_id}"))),
        None => Ok(()),
    }
}

/// Each time one of `uris` changes, its URI: a run's when its record
/// changes (its status, what it waits on), a stream's when it gets a
/// chunk. Ends once none of them can change again (their runs ended).
pub(super) async fn changes(
    keel: &Keel,
    uris: &[String],
) -> Result<impl Stream<Item = String> + Send + use<>, ErrorData> {
    let mut each = Vec::with_capacity(uris.len());
    for uri in uris {
        let told = uri.clone();
        let tell = move || std::future::ready(told.clone());
        each.push(match parse(uri)? {
            Named::Run(run_id) => {
                let now = keel.get_run(&run_id).await.map_err(internal)?;
                if now.status.is_final() {
                    // It ended before the subscription was read: told
                    // once, as nothing comes after.
                    futures::stream::once(tell()).boxed()
                } else {
                    // Every record unlike the one read now is a change.
                    keel.watch(&run_id)
                        .filter(move |w| {
                            std::future::ready(matches!(w, Ok(Watched::Run(r)) if *r != now))
                        })
                        .then(move |_| tell())
                        .boxed()
                }
            }
            // From the chunk after those it holds now.
            Named::Stream(run_id, name) => {
                let streams = keel.streams(&run_id).await.map_err(internal)?;
                let held = streams
                    .iter()
                    .find(|s| s.name == name)
                    .map_or(0, |s| s.chunks);
                keel.follow_stream(&run_id, &name, held)
                    .then(move |_| tell())
                    .boxed()
            }
        });
    }
    Ok(futures::stream::select_all(each))
}
