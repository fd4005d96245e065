//! TTL idempotency keys (Hatchet semantics): a workflow declares a CEL
//! expression over `input` and `additional_metadata` that evaluates to a
//! string, and a TTL; one run per (workflow, key) is admitted until the TTL
//! passes. Admission itself happens in the store, in one transaction; this
//! module compiles and evaluates the expressions.

use serde_json::Value;

use crate::{Error, Result};

/// A compiled key expression.
pub struct KeyExpr {
    workflow: String,
    source: String,
    program: cel::Program,
    /// How long a key is held after the run it admitted.
    pub ttl_ms: u64,
}

impl KeyExpr {
    /// Compiles `source`; a syntax error names the workflow and expression.
    pub fn compile(workflow: &str, source: &str, ttl_ms: u64) -> Result<KeyExpr> {
        let program = cel::Program::compile(source).map_err(|e| Error::KeyExpression {
            workflow: workflow.into(),
            expression: source.into(),
            reason: format!("it does not parse: {e}"),
        })?;
        Ok(KeyExpr {
            workflow: workflow.into(),
            source: source.into(),
            program,
            ttl_ms,
        })
    }

    /// The key of a run with this input and metadata.
    pub fn evaluate(&self, input: &Value, additional_metadata: &Value) -> Result<String> {
        let fail = |reason: String| Error::KeyExpression {
            workflow: self.workflow.clone(),
            expression: self.source.clone(),
            reason,
        };
        let mut context = cel::Context::default();
        context
            .add_variable("input", input)
            .and_then(|()| context.add_variable("additional_metadata", additional_metadata))
            .map_err(|e| fail(format!("the input cannot be given to CEL: {e}")))?;
        match self.program.execute(&context) {
            Ok(cel::Value::String(key)) => Ok(key.to_string()),
            Ok(other) => Err(fail(format!(
                "it must evaluate to a string, but gave {other:?}; convert it, e.g. string(...)"
            ))),
            Err(e) => Err(fail(format!("evaluating it failed: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_key_reads_the_input_and_the_metadata() {
        let k = KeyExpr::compile("w", "input.id + ':' + additional_metadata.tenant", 10).unwrap();
        let key = k
            .evaluate(&json!({"id": "7"}), &json!({"tenant": "t"}))
            .unwrap();
        assert_eq!(key, "7:t");
    }

    #[test]
    fn a_key_that_is_not_a_string_or_does_not_parse_is_refused() {
        let k = KeyExpr::compile("w", "input.n", 10).unwrap();
        let err = k.evaluate(&json!({"n": 3}), &json!({})).unwrap_err();
        assert!(
            err.to_string().contains("must evaluate to a string"),
            "{err}"
        );
        assert!(KeyExpr::compile("w", "input.(", 10).is_err());
    }
}
