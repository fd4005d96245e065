//! The arguments of `keel runs` and `keel jobs`: reading, changing and
//! selecting runs, and the bulk jobs that act on many.

use clap::Subcommand;

use crate::parse_duration;

#[derive(Subcommand)]
pub enum RunsCommand {
    /// Runs, newest first, with their times and durations.
    List {
        #[command(flatten)]
        filter: RunFilterArgs,
        /// At most this many runs (listed a page of at most 1,000 at a
        /// time); says how to list the next ones when there are more.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
        limit: u64,
        /// List the runs below this cursor (the `next_cursor` of a listing).
        #[arg(long, value_name = "CURSOR")]
        before: Option<String>,
        /// Every run that matches, a page at a time (with --json, one JSON
        /// object per line).
        #[arg(long, conflicts_with = "limit")]
        all: bool,
    },
    /// A run's status and output.
    Get {
        /// The run's ID.
        run_id: String,
    },
    /// The streams a run wrote: chunks, whether closed, size.
    Streams {
        /// The run's ID.
        run_id: String,
    },
    /// Print a run's stream NAME as it is written, until it is closed or
    /// the run ends (one JSON line per chunk with --json).
    Stream {
        /// The run's ID.
        run_id: String,
        /// The stream's name.
        name: String,
        /// The index of the first chunk to print.
        #[arg(long, default_value_t = 0)]
        from: u64,
    },
    /// Cancel a run: the workflow receives the cancel at its next wait and
    /// runs its cleanup (compensations) within the cancel grace, then ends
    /// `cancelled`; waits for that end unless --detach.
    Cancel {
        /// The run's ID.
        run_id: String,
        /// Why, recorded with the cancel and in the run's error.
        #[arg(long, default_value = "")]
        reason: String,
        /// End the run at once, without its cleanup (a step attempt in
        /// flight is abandoned; its result is not journaled).
        #[arg(long)]
        force: bool,
        /// Return once the cancel is recorded, without waiting for the end.
        #[arg(long)]
        detach: bool,
    },
    /// Restart an ended run from a step (its first scheduling) or a journal
    /// position: the steps before keep their results, those from there run
    /// again under the same step IDs; drives it until it completes, fails
    /// or waits.
    Restart {
        /// The run's ID.
        run_id: String,
        #[command(flatten)]
        point: RestartPointArgs,
        /// Run it on this deployment's current build (or a build's hash):
        /// refused, with the first difference, unless the journal kept
        /// replays there.
        #[arg(long, value_name = "DEPLOYMENT")]
        on: Option<String>,
    },
    /// Fork a run from a step or a journal position into a new run of the
    /// same workflow, whose journal carries the source's up to there (the
    /// steps before keep their results, under the fork's own step IDs);
    /// drives it until it completes, fails or waits.
    Fork {
        /// The source run's ID.
        run_id: String,
        #[command(flatten)]
        point: RestartPointArgs,
        /// Run the fork on this deployment's current build (or a build's
        /// hash): refused unless the journal carried replays there.
        #[arg(long, value_name = "DEPLOYMENT")]
        on: Option<String>,
        /// The fork's input, as JSON (`@FILE`, `-`); the source's if not
        /// given. Refused unless the journal carried replays with it.
        #[arg(long)]
        input: Option<String>,
    },
    /// Pause a live run: no step, timer or payload reaches its code until
    /// `keel runs resume` (payloads queue), across workers and restarts. A
    /// step attempt it has running ends first; a cancel asked meanwhile
    /// is carried out once it is resumed (`cancel --force` ends it now).
    Pause {
        /// The run's ID.
        run_id: String,
        /// Return once the pause is recorded, without waiting for the run's
        /// driver to stop it.
        #[arg(long)]
        detach: bool,
    },
    /// Resume a paused run where it stood and drive it until it completes,
    /// fails or waits.
    Resume {
        /// The run's ID.
        run_id: String,
    },
    /// Read a run's state through the queries its workflow sets
    /// (`set_query`): every query, or the value of one. Answered by a
    /// replay of its journal as it stands, live or ended; nothing is
    /// written.
    Query {
        /// The run's ID.
        run_id: String,
        /// The query's name; every query if not given.
        name: Option<String>,
    },
    /// Delete ended runs with everything stored for them (their journal
    /// archived first with --archive): for data that must be erased.
    Delete {
        /// The runs' IDs.
        #[arg(required = true)]
        run_ids: Vec<String>,
        /// End a live run at once (no cleanup) and delete it; without it a
        /// live run is refused and nothing is deleted.
        #[arg(long)]
        cancel: bool,
    },
    /// Cancel, retry, delete, pause, resume, restart or fork every run the
    /// filters select (admitted until now), as a job that survives a
    /// worker's crash and acts on each run once; waits for its end unless
    /// --detach (`keel jobs`).
    Bulk {
        /// What to do to each run: cancel (live runs), retry (failed runs),
        /// delete (ended runs), pause (live runs), resume (paused runs),
        /// restart (ended runs, from --from-step or --at) or fork (any run,
        /// into a new one, from --from-step or --at).
        action: BulkActionArg,
        #[command(flatten)]
        filter: RunFilterArgs,
        /// Count the runs it would act on and show a few; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// cancel: why, recorded with each cancel.
        #[arg(long)]
        reason: Option<String>,
        /// cancel: end each run at once, without its cleanup. delete: end
        /// live runs at once, then delete them.
        #[arg(long)]
        force: bool,
        /// restart, fork: where each run starts over.
        #[command(flatten)]
        point: BulkPointArgs,
        /// restart, fork: run on this deployment's current build (or a
        /// build's hash): a run whose journal does not replay there is
        /// listed with the first difference and left as it is.
        #[arg(long, value_name = "DEPLOYMENT")]
        on: Option<String>,
        /// Return once the job is submitted; a worker carries it out.
        #[arg(long)]
        detach: bool,
    },
    /// Retry a failed run from its failed step (fresh attempts, the same
    /// step ID; completed steps keep their results) and drive it until it
    /// completes, fails or waits.
    Retry {
        /// The run's ID.
        run_id: String,
        /// Retry it on this deployment's current build (or a build's hash),
        /// pinning it there: refused, with the first difference, unless its
        /// journal replays on that build.
        #[arg(long, value_name = "DEPLOYMENT")]
        on: Option<String>,
    },
    /// A run's output; with --wait, drive it until it ends first.
    Result {
        /// The run's ID.
        run_id: String,
        /// Drive the run to its end (waiting for its timers) first; refused
        /// at once for a run that waits for a hook or another run while no
        /// worker holds the store.
        #[arg(long)]
        wait: bool,
    },
    /// A run as a timeline of its steps, timers, hooks and child runs
    /// (`--json`: the run and its journal).
    Show {
        /// The run's ID.
        run_id: String,
    },
}

/// Where a restart or a fork starts over: one of the two.
#[derive(clap::Args, Clone, Debug)]
#[group(required = true, multiple = false)]
pub struct RestartPointArgs {
    /// The step whose first scheduling it starts over from.
    #[arg(long, value_name = "STEP")]
    pub from_step: Option<String>,
    /// The journal position it starts over from (`runs show --json`
    /// lists each entry's `seq`).
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}

/// Where each run of a bulk restart or fork starts over: one of the two
/// (neither for other actions). [`RestartPointArgs`] requires one; a
/// flattened `Option` of it is required all the same.
#[derive(clap::Args, Clone, Debug)]
#[group(required = false, multiple = false)]
pub struct BulkPointArgs {
    /// restart, fork: the step whose first scheduling each run starts
    /// over from.
    #[arg(long, value_name = "STEP")]
    pub from_step: Option<String>,
    /// restart, fork: the journal position each run starts over from.
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
}

/// Which runs a command selects: the filters of `runs list` and `runs
/// bulk`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RunFilterArgs {
    /// Only runs with this status (repeatable).
    #[arg(long, value_parser = status_parser())]
    pub status: Vec<keel_host::core::RunStatus>,
    /// Only runs of this workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only runs this schedule fired.
    #[arg(long, value_name = "NAME")]
    pub schedule: Option<String>,
    /// Only runs started within this long: `1h`, `2 days`.
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Only runs with this attribute, KEY=VALUE (repeatable: every one).
    #[arg(long = "attr", value_name = "KEY=VALUE", value_parser = parse_attribute)]
    pub attr: Vec<(String, String)>,
}

/// A bulk action named on the command line.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum BulkActionArg {
    Cancel,
    Retry,
    Delete,
    Pause,
    Resume,
    Restart,
    Fork,
}

impl From<BulkActionArg> for keel_host::core::bulk::BulkAction {
    fn from(a: BulkActionArg) -> Self {
        use keel_host::core::bulk::BulkAction;
        match a {
            BulkActionArg::Cancel => BulkAction::Cancel,
            BulkActionArg::Retry => BulkAction::Retry,
            BulkActionArg::Pause => BulkAction::Pause,
            BulkActionArg::Resume => BulkAction::Resume,
            BulkActionArg::Delete => BulkAction::Delete,
            BulkActionArg::Restart => BulkAction::Restart,
            BulkActionArg::Fork => BulkAction::Fork,
        }
    }
}

#[derive(Subcommand)]
pub enum JobsCommand {
    /// Bulk jobs, newest first, with their progress.
    List {
        /// At most this many.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1000))]
        limit: u64,
    },
    /// A job: its filter, progress, and the runs it failed on.
    Show {
        /// The job's ID.
        job_id: String,
    },
    /// Stop a running job; the runs it acted on stay so.
    Cancel {
        /// The job's ID.
        job_id: String,
    },
}

/// An attribute `KEY=VALUE` named on the command line.
pub(super) fn parse_attribute(s: &str) -> Result<(String, String), String> {
    let (key, value) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}` is not KEY=VALUE (e.g. tenant=acme)"))?;
    keel_host::core::records::check_attribute(key, value)?;
    Ok((key.to_string(), value.to_string()))
}

/// Parses a run status named on the command line; help and errors list
/// every status.
pub(super) fn status_parser()
-> impl clap::builder::TypedValueParser<Value = keel_host::core::RunStatus> {
    use clap::builder::TypedValueParser;
    use keel_host::core::RunStatus;
    use strum::IntoEnumIterator;
    clap::builder::PossibleValuesParser::new(RunStatus::iter().map(RunStatus::as_str))
        .try_map(|s: String| RunStatus::named(&s))
}
