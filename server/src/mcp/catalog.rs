//! The tools: one per workflow a start reaches, and keel's own two.

use std::sync::Arc;

use keel_core::access::Scope;
use keel_core::manifest::WorkflowInfo;
use keel_host::Keel;
use rmcp::model::{ErrorData, JsonObject, Tool};
use schemars::JsonSchema;
use serde_json::{Value, json};

use super::internal;
use crate::wire::{AwaitRunArgs, ResumeHookArgs, ToolAnswer};

/// The tool that answers a run's hook.
pub(super) const RESUME_HOOK: &str = "keel-resume-hook";
/// The tool that waits for a run.
pub(super) const AWAIT_RUN: &str = "keel-await-run";

/// The tools a token of `scope` may call (all, with none).
pub(super) async fn tools(keel: &Keel, scope: Option<&Scope>) -> Result<Vec<Tool>, ErrorData> {
    let mut tools = Vec::new();
    if matches!(scope, None | Some(Scope::StartWorkflow { .. })) {
        for (deployment, info) in keel.workflows().await.map_err(internal)? {
            if may_start(scope, &info.name) {
                tools.extend(workflow_tool(&deployment, &info));
            }
        }
    }
    if matches!(scope, None | Some(Scope::ResumeHook { .. })) {
        tools.push(keel_tool::<ResumeHookArgs>(
            RESUME_HOOK,
            "Delivers a payload to the hook a run waits on (a tool's answer names its token and payload schema) and waits for the workflow's reply; answers with the run and the reply.",
        ));
    }
    if matches!(scope, None | Some(Scope::ReadRun { .. })) {
        tools.push(keel_tool::<AwaitRunArgs>(
            AWAIT_RUN,
            "Waits for a run to end or to wait on something; answers with the run, its output once it has one, and the hooks it waits on.",
        ));
    }
    Ok(tools)
}

/// Whether a token of `scope` may start `workflow`.
pub(super) fn may_start(scope: Option<&Scope>, workflow: &str) -> bool {
    match scope {
        None => true,
        Some(Scope::StartWorkflow { workflow: w, .. }) => w == workflow,
        Some(_) => false,
    }
}

/// The tool of a workflow, `None` when its name is not a tool name.
fn workflow_tool(deployment: &str, info: &WorkflowInfo) -> Option<Tool> {
    if !is_tool_name(&info.name) {
        tracing::warn!(workflow = %info.name, "not offered over MCP: its name is not a tool name");
        return None;
    }
    let description = info.description.clone().unwrap_or_else(|| {
        format!(
            "Starts a run of workflow `{}` (deployment `{deployment}`).",
            info.name
        )
    });
    let mut schema = input_schema(info);
    drop_number_formats(&mut schema);
    Some(
        Tool::new(info.name.clone(), description, Arc::new(schema))
            .with_raw_output_schema(Arc::new(schema_of::<ToolAnswer>())),
    )
}

/// Whether `name` is a tool name: 1 to 128 of ASCII letters, digits,
/// `_`, `-` and `.`.
fn is_tool_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Whether a workflow's tool takes the workflow's input as its arguments
/// object (its input is an object's); otherwise the input is the
/// argument `input`, whose absence is `null`.
pub(super) fn takes_object(info: &WorkflowInfo) -> bool {
    matches!(&info.input_schema, Some(Value::Object(schema)) if schema.get("type") == Some(&json!("object")))
}

/// The input schema of a workflow's tool: an object's schema as is; any
/// other input (a number, a tuple, one without a schema) as the argument
/// `input` ([`takes_object`]).
fn input_schema(info: &WorkflowInfo) -> JsonObject {
    match &info.input_schema {
        Some(Value::Object(schema)) if takes_object(info) => schema.clone(),
        other => wrapped(other.clone().unwrap_or(json!({}))),
    }
}

/// An object schema with `inner` as property `input`; `inner`'s
/// definitions move to the top, where its references point.
fn wrapped(mut inner: Value) -> JsonObject {
    let mut outer = JsonObject::new();
    outer.insert("type".into(), json!("object"));
    if let Value::Object(o) = &mut inner {
        o.remove("$schema");
        for key in ["$defs", "definitions"] {
            if let Some(defs) = o.remove(key) {
                outer.insert(key.into(), defs);
            }
        }
    }
    outer.insert("properties".into(), json!({ "input": inner }));
    outer.insert("additionalProperties".into(), json!(false));
    outer
}

/// One of keel's own tools, taking `T`.
fn keel_tool<T: JsonSchema>(name: &'static str, description: &'static str) -> Tool {
    Tool::new(name, description, Arc::new(schema_of::<T>()))
        .with_raw_output_schema(Arc::new(schema_of::<ToolAnswer>()))
}

/// `T`'s JSON Schema, as an object.
fn schema_of<T: JsonSchema>() -> JsonObject {
    let mut schema = match serde_json::to_value(schemars::schema_for!(T)) {
        Ok(Value::Object(schema)) => schema,
        _ => JsonObject::new(),
    };
    drop_number_formats(&mut schema);
    schema
}

/// Removes the `format`s schemars gives Rust's number types (`uint32`,
/// `int64`, `double`, ...), which JSON Schema does not define and clients'
/// validators warn of; `minimum` and `type` still say what they meant.
fn drop_number_formats(schema: &mut JsonObject) {
    let rust_number = |f: &Value| {
        f.as_str().is_some_and(|f| {
            f.starts_with("int") || f.starts_with("uint") || matches!(f, "float" | "double")
        })
    };
    if schema.get("format").is_some_and(rust_number) {
        schema.remove("format");
    }
    for value in schema.values_mut() {
        match value {
            Value::Object(inner) => drop_number_formats(inner),
            Value::Array(items) => {
                for item in items.iter_mut().filter_map(Value::as_object_mut) {
                    drop_number_formats(item);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workflow(schema: Option<Value>) -> WorkflowInfo {
        serde_json::from_value(json!({
            "name": "w", "idempotency": null, "on_events": [], "input_schema": schema,
        }))
        .unwrap()
    }

    #[test]
    fn an_object_input_is_the_arguments_and_any_other_is_argument_input() {
        let object = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let info = workflow(Some(object.clone()));
        assert!(takes_object(&info));
        assert_eq!(Value::Object(input_schema(&info)), object);

        let tuple = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "array",
            "prefixItems": [{"$ref": "#/$defs/Call"}, {"type": "integer"}],
            "$defs": {"Call": {"type": "string"}},
        });
        let info = workflow(Some(tuple));
        assert!(!takes_object(&info));
        assert_eq!(
            Value::Object(input_schema(&info)),
            json!({
                "type": "object",
                "properties": {"input": {
                    "type": "array",
                    "prefixItems": [{"$ref": "#/$defs/Call"}, {"type": "integer"}],
                }},
                "additionalProperties": false,
                "$defs": {"Call": {"type": "string"}},
            })
        );
        let info = workflow(None);
        assert!(!takes_object(&info));
        assert_eq!(input_schema(&info)["properties"], json!({"input": {}}));
    }

    #[test]
    fn rust_number_formats_are_dropped_and_the_rest_kept() {
        let mut schema = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint32", "minimum": 0},
                "at": {"type": "string", "format": "date-time"},
                "xs": {"type": "array", "items": {"type": "number", "format": "double"}},
                "pair": {"prefixItems": [{"type": "integer", "format": "int64"}]},
            },
        });
        drop_number_formats(schema.as_object_mut().unwrap());
        assert_eq!(
            schema["properties"],
            json!({
                "n": {"type": "integer", "minimum": 0},
                "at": {"type": "string", "format": "date-time"},
                "xs": {"type": "array", "items": {"type": "number"}},
                "pair": {"prefixItems": [{"type": "integer"}]},
            })
        );
    }

    #[test]
    fn tool_names_are_the_specifications() {
        assert!(is_tool_name("ten_steps"));
        assert!(is_tool_name("keel-await-run"));
        assert!(!is_tool_name(""));
        assert!(!is_tool_name("with space"));
        assert!(!is_tool_name(&"x".repeat(129)));
    }

    #[test]
    fn a_start_token_reaches_its_workflow_alone() {
        let scope = Scope::StartWorkflow {
            workflow: "a".into(),
            hook_token: None,
            run_id: None,
        };
        assert!(may_start(None, "a"));
        assert!(may_start(Some(&scope), "a"));
        assert!(!may_start(Some(&scope), "b"));
        let read = Scope::ReadRun { run_id: "r".into() };
        assert!(!may_start(Some(&read), "a"));
    }
}
