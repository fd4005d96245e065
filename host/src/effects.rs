//! Output commit: the effects a run makes that the world outside it can
//! see, each a gate before which what the effect may depend on is made
//! durable. This is the one list of them; every gate is one call
//! ([`crate::activation::RunJournal::gate`] in the workflow's activation,
//! [`StepGate::before`] in a step's sandbox).
//!
//! A run's journal is recorded in memory and written to the store at these
//! gates, and at the run's end (in one store write with its final record).
//! A crash loses only what no effect has shown: the recovered run does it
//! again, under the same step IDs. Acknowledgments to callers (a start, a
//! resume, a cancel) are store writes of their own and durable before they
//! answer. How much a step attempt's own start needs to be durable is the
//! workflow's [`Durability`](keel_core::manifest::Durability): before the
//! attempt runs (`strict`), before its first effect (`effect_gated`), or at
//! the run's next gate (`relaxed`).

use async_trait::async_trait;

/// Something a run does that can be seen outside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A step attempt's outbound HTTP request, before its first byte.
    StepHttpRequest,
    /// A step attempt granted directories, before it runs: its writes
    /// there are not observed one by one.
    StepGrantedDirectories,
    /// A chunk a step writes to its run's stream, readable outside once
    /// stored.
    StepStreamChunk,
    /// A payload a step delivers to another run's hook.
    StepHookResume,
    /// A hook the workflow registers or disposes of: others resume it by
    /// its token.
    Hook,
    /// A run the workflow starts.
    ChildStart,
    /// The run that continues this one (continue-as-new), whose input the
    /// journal so far decided.
    Continue,
    /// A child the run's end cancels (its close policy), whose cleanup
    /// then runs.
    ChildCancel,
    /// The workflow's reply to a hook's request, which its caller reads.
    HookReply,
    /// The run waits on a timer, a payload or another run, in memory:
    /// every view says it waits, and shows what it did so far.
    Wait,
    /// The run's activation stops (it suspends, or its end waits on its
    /// children).
    Suspend,
    /// The run stops for its pause, or goes on after it: every view says
    /// so, and the journal records it.
    Pause,
}

impl Effect {
    /// The effect's name, for traces.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::StepHttpRequest => "step_http_request",
            Effect::StepGrantedDirectories => "step_granted_directories",
            Effect::StepStreamChunk => "step_stream_chunk",
            Effect::StepHookResume => "step_hook_resume",
            Effect::Hook => "hook",
            Effect::ChildStart => "child_start",
            Effect::Continue => "continue",
            Effect::ChildCancel => "child_cancel",
            Effect::HookReply => "hook_reply",
            Effect::Wait => "wait",
            Effect::Suspend => "suspend",
            Effect::Pause => "pause",
        }
    }
}

/// The gate of one step attempt's effects.
#[async_trait]
pub trait StepGate: Send + Sync {
    /// Returns once what the attempt's `effect` may depend on (the
    /// attempt's start and every entry recorded before it) is durable. An
    /// error means it could not be made durable: the effect must not
    /// happen.
    async fn before(&self, effect: Effect) -> crate::Result<()>;
}
