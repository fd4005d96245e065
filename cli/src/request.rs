//! What the command line's shared arguments mean as the API's inputs:
//! grants, JSON arguments given as text, a file or standard input, and the
//! run filter of a listing.

use anyhow::Context;
use serde_json::Value;

use keel_host::core::{Clock, GrantSpec, RunFilter};

use crate::args::{Cli, RunFilterArgs};

/// The grants given on the command line, as a deployment records them.
pub(crate) fn grants_of(cli: &Cli) -> Result<GrantSpec, keel_host::Error> {
    for grant in &cli.allow_http {
        GrantSpec::check_http(grant).map_err(|reason| keel_host::Error::InvalidGrant { reason })?;
    }
    Ok(GrantSpec {
        http: cli.allow_http.clone(),
        dirs: cli
            .allow_dir
            .iter()
            .map(|d| {
                std::path::absolute(d)
                    .unwrap_or_else(|_| d.clone())
                    .display()
                    .to_string()
            })
            .collect(),
        env: cli.allow_env.clone(),
    })
}

/// A JSON argument as given: the text itself, `@FILE` for a file's
/// contents, or `-` for standard input (for inputs too large for a command
/// line).
pub fn text_arg(flag: &str, value: &str) -> anyhow::Result<String> {
    if value == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .with_context(|| format!("{flag} -: reading standard input"))?;
        return Ok(text);
    }
    match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path)
            .with_context(|| format!("{flag} @{path}: reading the file")),
        None => Ok(value.to_string()),
    }
}

/// An optional JSON argument, parsed.
pub(crate) fn json_arg(
    flag: &str,
    value: &Option<String>,
) -> Result<Option<Value>, keel_host::Error> {
    value.as_deref().map(|v| parse_json(flag, v)).transpose()
}

/// A JSON argument given as [`text_arg`] takes it, parsed.
pub(crate) fn json_text_arg(flag: &str, value: &str) -> anyhow::Result<Value> {
    Ok(parse_json(flag, &text_arg(flag, value)?)?)
}

/// `text` parsed as JSON; an error names the flag it came from.
fn parse_json(flag: &str, text: &str) -> Result<Value, keel_host::Error> {
    serde_json::from_str(text).map_err(|e| keel_host::Error::InvalidInput {
        reason: format!("{flag}: {e}"),
    })
}

/// The filter the listing flags select; `--since` counts back from now.
pub(crate) fn run_filter(args: &RunFilterArgs) -> RunFilter {
    RunFilter {
        statuses: args.status.clone(),
        workflow: args.workflow.clone(),
        schedule: args.schedule.clone(),
        attributes: args.attr.iter().cloned().collect(),
        since_ms: args.since.map(|d| {
            keel_host::SystemClock
                .now_ms()
                .saturating_sub(d.as_millis() as u64)
        }),
        ..RunFilter::default()
    }
}
