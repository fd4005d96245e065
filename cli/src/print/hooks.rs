//! How hooks, events, streams, replies and webhooks print.

use keel_host::core::{EventRecord, HookRecord};
use keel_server::wire::HookView;
use serde_json::{Value, json};

use super::table::print_table;

/// Webhooks, a line each: where deliveries go and how they are signed
/// (`one`: a single webhook, printed as an object in JSON).
pub(crate) fn print_webhooks(list: &[keel_server::wire::WebhookView], json: bool, one: bool) {
    if json {
        match list {
            [w] if one => println!("{}", json!(w)),
            list => println!("{}", json!(list)),
        }
        return;
    }
    if list.is_empty() {
        println!(
            "no webhooks; create one with `keel webhooks create ID --hook TOKEN --secret SECRET`"
        );
        return;
    }
    let mut rows = Vec::new();
    for w in list {
        let scheme = match (&w.header, w.tolerance_s) {
            (Some(h), _) => format!("hmac ({h})"),
            (None, Some(t)) => format!("stripe (±{t} s)"),
            (None, None) => "github".into(),
        };
        let target = match (&w.hook, &w.event) {
            (Some(h), _) => match &w.unheld_event {
                Some(e) => format!("hook {h}, else event {e}"),
                None => format!("hook {h}"),
            },
            (_, Some(e)) => format!("event {e}"),
            _ => "-".into(),
        };
        rows.push(vec![w.id.clone(), w.path.clone(), scheme, target]);
    }
    print_table(&["id", "path", "scheme", "delivers to"], &[], rows);
}

pub(crate) fn print_hook(hook: &HookRecord, json: bool) {
    let value = hook_json(hook);
    if json {
        println!("{value}");
        return;
    }
    let state = if hook.active {
        "active"
    } else {
        "kept after its run ended"
    };
    println!("hook `{}` of run {}: {state}", hook.token, hook.run_id);
    println!("metadata: {}", value["metadata"]);
    if let Some(until) = hook.retain_until_ms {
        println!("retained until {until} ms");
    }
    if let Some(schema) = value.get("payload_schema") {
        println!("payloads must fit: {schema}");
    }
}

pub(crate) fn print_event(event: &EventRecord) {
    println!(
        "event {} `{}` at {} ms, payload {}",
        event.event_id, event.key, event.at_ms, event.payload
    );
    for o in &event.outcomes {
        match (&o.run_id, o.deduplicated, &o.error) {
            (Some(run), true, _) => println!("  {}: deduplicated against run {run}", o.workflow),
            (Some(run), false, _) => println!("  {}: started run {run}", o.workflow),
            (_, _, Some(error)) => println!("  {}: no run: {error}", o.workflow),
            _ => {}
        }
    }
}

/// A hook as the API spells it.
pub(crate) fn hook_json(hook: &HookRecord) -> Value {
    json!(HookView::from(hook))
}

/// A run's streams: one line each.
pub(crate) fn print_streams(streams: &[keel_server::wire::StreamView], json: bool) {
    if json {
        println!("{}", json!(streams));
        return;
    }
    if streams.is_empty() {
        println!("no streams");
        return;
    }
    let rows = streams.iter().map(|s| {
        let state = if s.closed { "closed" } else { "open" };
        vec![
            s.name.clone(),
            s.chunks.to_string(),
            s.bytes.to_string(),
            state.into(),
        ]
    });
    print_table(
        &["stream", "chunks", "bytes", "state"],
        &[1, 2],
        rows.collect(),
    );
}

/// A reply to a payload delivered with an ID, or that there is none yet.
pub(crate) fn print_hook_reply(reply: &keel_server::wire::ReplyView, json: bool) {
    if json {
        println!("{}", json!(reply));
        return;
    }
    println!("run: {}", reply.run_id);
    println!(
        "payload ID: {} (payload {} of hook {})",
        reply.payload_id, reply.index, reply.token
    );
    match &reply.reply {
        Some(value) => println!("reply: {value}"),
        None => {
            println!("reply: none yet (the workflow has not replied; wait with --wait DURATION)")
        }
    }
}

/// One chunk of a stream: its JSON line, or its value (a string as is) and
/// a line for a restart.
pub(crate) fn print_chunk(chunk: &keel_server::wire::ChunkView, json: bool) {
    if json {
        println!("{}", json!(chunk));
        return;
    }
    match (chunk.kind.as_str(), &chunk.value) {
        ("data", Some(Value::String(text))) => println!("{text}"),
        ("data", Some(value)) => println!("{value}"),
        ("restart", _) => println!(
            "-- step {} restarts (attempt {}): drop what its earlier attempts wrote above --",
            chunk.step_id.as_deref().unwrap_or("?"),
            chunk.attempt.unwrap_or_default()
        ),
        _ => {}
    }
}
