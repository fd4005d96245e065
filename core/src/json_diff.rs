//! Field-level differences between two JSON values: where a recorded input
//! or output and the one the code produces now part ways, as paths
//! (`/items/0/price`) with the value on each side.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One place two JSON values differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldDiff {
    /// A JSON Pointer to the place (`""` for the whole value).
    pub path: String,
    /// The recorded value there; `None` if the recorded value lacks it.
    pub recorded: Option<Value>,
    /// The new value there; `None` if the new value lacks it.
    pub new: Option<Value>,
}

impl FieldDiff {
    /// The difference on one line: `/a/b: 1 -> 2`.
    pub fn line(&self) -> String {
        let side = |v: &Option<Value>| v.as_ref().map_or("(absent)".to_string(), Value::to_string);
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        format!("{path}: {} -> {}", side(&self.recorded), side(&self.new))
    }

    /// A field the new value adds as `null`: an `Option` field added to a
    /// type, which serializes as `null` unless skipped.
    pub fn is_added_null(&self) -> bool {
        self.recorded.is_none() && self.new == Some(Value::Null)
    }
}

/// The differences between `recorded` and `new`, depth first, in key order.
pub fn diff(recorded: &Value, new: &Value) -> Vec<FieldDiff> {
    let mut out = Vec::new();
    walk("", Some(recorded), Some(new), &mut out);
    out
}

/// The differences between two JSON texts; `None` if either is not JSON.
pub fn diff_texts(recorded: &str, new: &str) -> Option<Vec<FieldDiff>> {
    let recorded = serde_json::from_str(recorded).ok()?;
    let new = serde_json::from_str(new).ok()?;
    Some(diff(&recorded, &new))
}

fn walk(path: &str, recorded: Option<&Value>, new: Option<&Value>, out: &mut Vec<FieldDiff>) {
    match (recorded, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let escaped = key.replace('~', "~0").replace('/', "~1");
                walk(&format!("{path}/{escaped}"), a.get(key), b.get(key), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                walk(&format!("{path}/{i}"), a.get(i), b.get(i), out);
            }
        }
        (a, b) if a == b => {}
        (a, b) => out.push(FieldDiff {
            path: path.to_string(),
            recorded: a.cloned(),
            new: b.cloned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn differences_are_listed_by_path() {
        let recorded = json!({"id": 1, "items": [{"sku": "a", "qty": 1}], "note": "x"});
        let new = json!({"id": 1, "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 1}], "gift": null});
        let lines: Vec<String> = diff(&recorded, &new).iter().map(FieldDiff::line).collect();
        assert_eq!(
            lines,
            [
                "/gift: (absent) -> null",
                "/items/0/qty: 1 -> 2",
                r#"/items/1: (absent) -> {"qty":1,"sku":"b"}"#,
                r#"/note: "x" -> (absent)"#,
            ]
        );
        assert!(diff(&recorded, &new)[0].is_added_null());
    }

    #[test]
    fn equal_values_have_no_difference_and_scalars_compare_whole() {
        assert!(diff(&json!({"a": [1, 2]}), &json!({"a": [1, 2]})).is_empty());
        assert_eq!(diff(&json!(1), &json!("1"))[0].line(), r#"/: 1 -> "1""#);
        assert!(diff_texts("{", "{}").is_none());
    }
}
