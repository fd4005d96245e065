//! TTL idempotency keys (Hatchet semantics): a workflow declares a CEL
//! expression over `input` and `additional_metadata` that evaluates to a
//! string, and a TTL; one run per (workflow, key) is admitted until the TTL
//! passes. Admission itself happens in the store, in one transaction.

use std::time::{SystemTime, UNIX_EPOCH};

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

/// Where admission reads the time (injectable for tests).
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The machine's clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}
