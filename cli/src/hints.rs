//! What the CLI adds to an error: the command or flag that fixes it, keyed
//! by the error's kind. The library's messages say what is wrong; this
//! says what to type.

/// The hint for an error of `kind` carrying `ids`, if the CLI has one.
pub fn hint(kind: &str, ids: &[(String, String)]) -> Option<String> {
    let id = |field: &str| {
        ids.iter()
            .find(|(f, _)| f == field)
            .map_or("ID", |(_, v)| v.as_str())
            .to_string()
    };
    Some(match kind {
        "invalid_input" if ids.iter().any(|(f, _)| f == "workflow") => format!(
            "`keel inspect COMPONENT` shows the input schema of `{}`",
            id("workflow")
        ),
        "invalid_input" => "pass a JSON value, for example --input '{\"id\": 1}'".into(),
        "run_not_found" => "`keel runs list` shows the runs this store holds".into(),
        "fuel_exhausted" => {
            "raise the bound with --workflow-fuel, and `keel runs retry` the run".into()
        }
        "activation_timeout" => {
            "raise the bound with --activation-timeout (seconds), and `keel runs retry` the run".into()
        }
        "memory_exhausted" => "raise the bound with --max-memory (MiB)".into(),
        "sandbox_violation" => {
            "steps get capabilities from their deployment: `keel deploy COMPONENT --allow-http HOST --allow-dir DIR --allow-env NAME`".into()
        }
        "unknown_workflow" | "deployment_not_found" => {
            "`keel deployments list` shows what is deployed; deploy with `keel deploy COMPONENT.wasm`, or start from a .wasm path".into()
        }
        "invalid_grant" => "write --allow-http as HOST or HOST:PORT, for example --allow-http api.example.com".into(),
        "needs_worker" => format!(
            "resume its hook with `keel hooks resume TOKEN`, or start `keel worker` and ask again: `keel runs result {} --wait`",
            id("run_id")
        ),
        "bound_exceeded" => {
            let flag = match id("bound").as_str() {
                "max_payload_bytes" => "--max-payload-kib",
                "max_steps_in_flight" => "--max-steps-in-flight",
                _ => "--max-journal-entries",
            };
            format!(
                "raise the bound with {flag} if the run really needs it, and `keel runs retry` a run it failed"
            )
        }
        "not_retryable" => format!("`keel runs show {}` shows how it ended", id("run_id")),
        "run_ended" => format!("`keel runs show {}` shows how it ended", id("run_id")),
        "unauthorized" => "pass the server's token with --api-token or KEEL_API_TOKEN".into(),
        "store_locked" => "stop the other keel process, or pass another directory with --db".into(),
        "store_unavailable" | "corrupt_record" => {
            "if the store is corrupted, restore it from a backup or move it aside and start afresh"
                .into()
        }
        "storage_full" => {
            "free space on the disk holding the store (--min-free-mib sets the reserve); a running `keel worker` carries on by itself, or start one to resume the runs".into()
        }
        "store_schema_too_new" => "use the keel that wrote this store, or a newer one".into(),
        "unsafe_cache" => {
            "make the store's `compiled` directory yours alone (chmod 700), or pass another --db"
                .into()
        }
        "idempotency_collision" => format!(
            "read its result with `keel runs result {}`",
            id("existing_run_id")
        ),
        "hook_conflict" => format!(
            "resume its hook with `keel hooks resume {}`, or read its result with `keel runs result {}`",
            id("token"),
            id("conflicting_run_id")
        ),
        "hook_not_found" => format!(
            "`keel hooks get {}` shows a hook kept for its retention",
            id("token")
        ),
        "start_outcome_unknown" => format!(
            "`keel runs get {}` tells whether it was admitted; a start with a --token can simply be run again: it is admitted once",
            id("run_id")
        ),
        "drive_interrupted" => format!(
            "the run was recorded: `keel runs get {}` shows how it goes on, and a `keel worker` resumes it",
            id("run_id")
        ),
        "resume_outcome_unknown" => format!(
            "`keel hooks get {}` names the hook's run, and `keel runs show RUN_ID` lists the payloads it received",
            id("token")
        ),
        "outcome_unknown" => format!(
            "`keel runs get {}` shows where it stands; asking again is safe",
            id("run_id")
        ),
        "event_unrecorded" => "`keel runs list` shows the runs it started; push it again only if they should start again".into(),
        "invalid_name" => {
            "use 1 to 128 letters, digits, `-`, `_`, `.` or `:` (not `.` or `..` alone)".into()
        }
        "invalid_limit" => "`keel deploy --help` gives each limit's unit".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_name_the_ids_of_the_error() {
        let ids = vec![
            ("conflicting_run_id".to_string(), "r-1".to_string()),
            ("token".to_string(), "order:42".to_string()),
        ];
        let h = hint("hook_conflict", &ids).unwrap();
        assert!(
            h.contains("keel hooks resume order:42") && h.contains("runs result r-1"),
            "{h}"
        );
        assert!(
            hint("fuel_exhausted", &[])
                .unwrap()
                .contains("--workflow-fuel")
        );
        assert!(hint("wasm", &[]).is_none());
    }
}
