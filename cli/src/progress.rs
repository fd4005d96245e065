//! Progress of a run this process drives, on stderr when it is a terminal:
//! each step attempt as it starts, ends, or fails and waits for its retry.

use std::time::Duration;

use keel_host::{AttemptOutcome, Observer};

/// Prints step progress to stderr.
pub struct Progress;

impl Observer for Progress {
    fn step_started(&self, _run_id: &str, step: &str, attempt: u32) {
        if attempt == 1 {
            eprintln!("  {step}: started");
        } else {
            eprintln!("  {step}: attempt {attempt} started");
        }
    }

    fn step_attempt(&self, step: &str, outcome: AttemptOutcome) {
        match outcome {
            AttemptOutcome::Completed => eprintln!("  {step}: completed"),
            AttemptOutcome::Failed => eprintln!("  {step}: failed"),
            AttemptOutcome::Retried => {}
        }
    }

    fn step_retrying(&self, step: &str, attempt: u32, delay: Duration, error: &str) {
        let error = keel_host::core::journal::excerpt(error, 120);
        eprintln!(
            "  {step}: attempt {attempt} failed ({error}); retrying in {}",
            humantime::format_duration(Duration::from_millis(delay.as_millis() as u64))
        );
    }
}
