//! Queries of a run's state: every query a run's workflow set, or one,
//! as a replay of its journal left them (`keel_core::run_query`).

use std::collections::BTreeMap;

use keel_core::run_query::RunQueries;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::value_of;

/// Every query a run's workflow had set when a replay of its journal
/// reached the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueriesView {
    pub run_id: String,
    /// The journal position the replay reached: the values hold for the
    /// run as it stood there.
    pub position: u64,
    /// Each query's value, by name.
    pub queries: BTreeMap<String, Value>,
}

impl From<RunQueries> for QueriesView {
    fn from(q: RunQueries) -> Self {
        QueriesView {
            run_id: q.run_id.to_string(),
            position: q.position,
            queries: q
                .values
                .iter()
                .map(|(name, value)| (name.clone(), value_of(value)))
                .collect(),
        }
    }
}

/// One query's value, as a replay of the run's journal left it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueryView {
    pub run_id: String,
    pub name: String,
    /// The journal position the replay reached.
    pub position: u64,
    pub value: Value,
}

impl QueryView {
    /// Query `name` of `queries`, whose value (JSON) is `value`.
    pub fn of(queries: &RunQueries, name: &str, value: &str) -> Self {
        QueryView {
            run_id: queries.run_id.to_string(),
            name: name.into(),
            position: queries.position,
            value: value_of(value),
        }
    }
}
