//! Typed identifiers, and the one place where IDs derive from each other.
//!
//! A step's ID, the default token of a hook and the ID of a run a workflow
//! starts all derive from the run ID and the position of the command that
//! made them, so they are the same on every attempt and every replay.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The ID as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The ID as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                $name(s)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                $name(s.to_string())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                &self.0 == other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }
    };
}

string_id!(
    /// A run's ID: time-sortable and unique (a UUIDv7 for runs started from
    /// outside; `parent.command` for runs a workflow starts).
    RunId
);
string_id!(
    /// A step's ID: stable across attempts and replays, unique across runs.
    /// Authors pass it to external APIs as an idempotency key.
    StepId
);
string_id!(
    /// The token that addresses a hook.
    HookToken
);
string_id!(
    /// The SHA-256 of a component's bytes, in hex.
    ComponentHash
);

impl RunId {
    /// The ID of the step scheduled by this run's command `command`.
    pub fn step_id(&self, command: u32) -> StepId {
        StepId(format!("{}-{command}", self.0))
    }

    /// The token of a hook that command `command` creates without one.
    pub fn default_hook_token(&self, command: u32) -> HookToken {
        HookToken(format!("{}:hook:{command}", self.0))
    }

    /// The ID of the run that this run's command `command` starts, so that a
    /// recovered run that starts it again finds it.
    pub fn child(&self, command: u32) -> RunId {
        RunId(format!("{}.{command}", self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_depend_only_on_the_run_and_the_command() {
        let run = RunId::from("0192-a");
        assert_eq!(run.step_id(3), "0192-a-3");
        assert_eq!(run.step_id(3), run.step_id(3));
        assert_ne!(run.step_id(3), RunId::from("0192-b").step_id(3));
        assert_eq!(run.default_hook_token(1), "0192-a:hook:1");
        assert_eq!(run.child(2), "0192-a.2");
    }

    #[test]
    fn ids_serialize_as_plain_strings() {
        let run = RunId::from("r-1");
        assert_eq!(serde_json::to_string(&run).unwrap(), "\"r-1\"");
        let bytes = postcard::to_stdvec(&run).unwrap();
        assert_eq!(bytes, postcard::to_stdvec("r-1").unwrap());
    }
}
