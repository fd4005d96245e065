//! Queries of a run's state: named JSON values a workflow sets as it goes
//! (`set-query`), never journaled. A query is answered by replaying the
//! run's journal offline: the value is the one the workflow had set when
//! the replay reached the journal's end, so it is a pure function of what
//! the run recorded, the same on every worker and every replay.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::RunId;

/// The most queries one run sets.
pub const MAX_QUERIES: usize = 32;

/// The largest value of one query, in bytes of JSON.
pub const MAX_QUERY_VALUE: usize = 64 * 1024;

/// Why the workflow cannot set query `name` to `value` beside the
/// `set` ones, if it cannot: a name no query has (1 to 64 letters,
/// digits, `_`, `.`, `-`), a value that is no JSON or over
/// [`MAX_QUERY_VALUE`], or one query over [`MAX_QUERIES`].
pub fn check_query(name: &str, value: &str, set: &BTreeMap<String, String>) -> Result<(), String> {
    crate::records::check_key_name("query", name)?;
    if value.len() > MAX_QUERY_VALUE {
        return Err(format!(
            "query `{name}`'s value is {} bytes, over the bound of {MAX_QUERY_VALUE}",
            value.len()
        ));
    }
    if let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(value) {
        return Err(format!("query `{name}`'s value is not JSON: {e}"));
    }
    if !set.contains_key(name) && set.len() >= MAX_QUERIES {
        return Err(format!(
            "the workflow has set {MAX_QUERIES} queries, the most it may"
        ));
    }
    Ok(())
}

/// A run's queries as a replay of its journal left them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunQueries {
    pub run_id: RunId,
    /// The journal position the replay reached: the answers hold for the
    /// run as it stood there.
    pub position: u64,
    /// Each query's value, as JSON, by name.
    pub values: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_values_and_counts_are_bounded() {
        let none = BTreeMap::new();
        assert!(check_query("total", "6", &none).is_ok());
        assert!(
            check_query("", "6", &none)
                .unwrap_err()
                .contains("not 1 to 64")
        );
        assert!(check_query("a b", "6", &none).is_err());
        assert!(
            check_query("t", "{", &none)
                .unwrap_err()
                .contains("not JSON")
        );
        let big = format!("\"{}\"", "x".repeat(MAX_QUERY_VALUE));
        assert!(
            check_query("t", &big, &none)
                .unwrap_err()
                .contains("over the bound")
        );
        let full: BTreeMap<String, String> = (0..MAX_QUERIES)
            .map(|i| (format!("q{i}"), "1".into()))
            .collect();
        assert!(
            check_query("more", "1", &full)
                .unwrap_err()
                .contains("the most")
        );
        assert!(
            check_query("q3", "2", &full).is_ok(),
            "a set query may change"
        );
    }
}
