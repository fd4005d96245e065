//! Typed identifiers, and the one place where IDs derive from each other.
//!
//! A step's ID derives from the run ID, the step's name and how many steps
//! of that name the run scheduled before it (its *occurrence*), so that it
//! is the same on every attempt, every replay and every operation that runs
//! the step again, whatever other commands a new build adds before it (a
//! patch marker, another step). The default token of a hook and the ID of a
//! run a workflow starts derive from the run ID and the position of the
//! command that made them.

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

/// A run ID or a name (of a deployment) that is not in the safe set: 1 to
/// [`MAX_NAME_LEN`] letters, digits, `-`, `_`, `.` or `:`, and not `.` or
/// `..` alone.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{}` is not a valid {what}: {reason}", value.escape_debug())]
pub struct InvalidName {
    /// What it was meant to be (`run ID`, `deployment name`).
    pub what: &'static str,
    pub value: String,
    pub reason: String,
}

/// The longest run ID or name.
pub const MAX_NAME_LEN: usize = 128;

/// [`check_name`]'s rule as a regular expression (for JSON Schema, so it
/// uses no lookahead): 1 to 128 of the safe characters, but not `.` or
/// `..` alone.
pub const NAME_PATTERN: &str = r"^([A-Za-z0-9_:-]|[A-Za-z0-9_.:-][A-Za-z0-9_:-]|[A-Za-z0-9_:-][A-Za-z0-9_.:-]|[A-Za-z0-9_.:-]{3,128})$";

/// Checks that `value` is in the safe set of run IDs and names.
pub fn check_name(what: &'static str, value: &str) -> Result<(), InvalidName> {
    let refuse = |reason: String| {
        Err(InvalidName {
            what,
            value: value.to_string(),
            reason,
        })
    };
    if value.is_empty() || value.len() > MAX_NAME_LEN {
        return refuse(format!("use 1 to {MAX_NAME_LEN} characters"));
    }
    if let Some(c) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:".contains(*c)))
    {
        return refuse(format!(
            "{} is not allowed; use letters, digits, `-`, `_`, `.` or `:`",
            if c.is_control() {
                format!("the control character {:?}", c)
            } else {
                format!("`{c}`")
            }
        ));
    }
    if value == "." || value == ".." {
        return refuse("`.` and `..` alone are not names".into());
    }
    Ok(())
}

/// Makes a safe name of `raw` (a file's stem, say) by replacing what the
/// safe set lacks with `-`; `None` if nothing usable is left.
pub fn safe_name(raw: &str) -> Option<String> {
    let name: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:".contains(c) {
                c
            } else {
                '-'
            }
        })
        .take(MAX_NAME_LEN)
        .collect();
    check_name("name", &name).is_ok().then_some(name)
}

impl std::str::FromStr for RunId {
    type Err = InvalidName;

    /// A run ID from outside (a caller's choice, a path): in the safe set.
    fn from_str(s: &str) -> Result<RunId, InvalidName> {
        check_name("run ID", s)?;
        Ok(RunId(s.to_string()))
    }
}

impl RunId {
    /// Parses a run ID given from outside; see [`check_name`].
    pub fn parse(s: &str) -> Result<RunId, InvalidName> {
        s.parse()
    }

    /// The ID of the `occurrence`-th step named `name` this run schedules
    /// (from 0, counting the schedulings that count: a retry or a restart
    /// voids those it runs again, which then get the same IDs).
    pub fn step_id(&self, name: &str, occurrence: u32) -> StepId {
        StepId(format!("{}-{name}-{occurrence}", self.0))
    }

    /// The ID the step scheduled by command `command` had in runs admitted
    /// before step IDs were named ([`RunId::step_id`]): their journals keep
    /// these, and a step of theirs that runs again keeps its own.
    pub fn positional_step_id(&self, command: u32) -> StepId {
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

    /// The ID of the run this run continues as when its workflow continues
    /// as new ([`RunId::derived`]), so that a recovered run that continues
    /// again finds the run it started, and a chain of continuations keeps
    /// IDs of one length.
    pub fn continued(&self) -> RunId {
        self.derived("continue-as-new")
    }

    /// The run ID a caller's key names for `purpose` (an MCP tool call's
    /// idempotency key, say): [`RunId::derived`] of the key, so a call
    /// retried with the key finds the run the first one made, and keys of
    /// any characters and length give IDs of the safe set.
    pub fn keyed(purpose: &str, key: &str) -> RunId {
        RunId(key.to_string()).derived(purpose)
    }

    /// A run ID that derives from this one and `purpose` alone: a UUID
    /// (version 8) of their SHA-256, the same every time it is asked for.
    pub fn derived(&self, purpose: &str) -> RunId {
        use sha2::Digest;
        let digest = sha2::Sha256::new()
            .chain_update(b"keel ")
            .chain_update(purpose.as_bytes())
            .chain_update(b"\0")
            .chain_update(self.0.as_bytes())
            .finalize();
        let mut b: [u8; 16] = digest[..16].try_into().expect("a SHA-256 has 32 bytes");
        b[6] = (b[6] & 0x0f) | 0x80;
        b[8] = (b[8] & 0x3f) | 0x80;
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        RunId(format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_depend_only_on_what_names_them() {
        let run = RunId::from("0192-a");
        assert_eq!(run.step_id("charge", 0), "0192-a-charge-0");
        assert_eq!(run.step_id("charge", 1), run.step_id("charge", 1));
        assert_ne!(run.step_id("charge", 0), run.step_id("charge", 1));
        assert_ne!(run.step_id("charge", 0), run.step_id("verify", 0));
        assert_ne!(
            run.step_id("charge", 0),
            RunId::from("0192-b").step_id("charge", 0)
        );
        assert_eq!(run.positional_step_id(3), "0192-a-3");
        assert_eq!(run.default_hook_token(1), "0192-a:hook:1");
        assert_eq!(run.child(2), "0192-a.2");
        let next = run.continued();
        assert_eq!(next, run.continued());
        assert_ne!(next, RunId::from("0192-b").continued());
        assert_eq!(next.continued().len(), 36, "{next}");
        assert_eq!(RunId::parse(&next).unwrap(), next);
        assert_eq!(&next[14..15], "8", "a version-8 UUID: {next}");
        assert_ne!(run.derived("fork j-1"), run.derived("fork j-2"));
    }

    #[test]
    fn run_ids_and_names_are_in_the_safe_set() {
        for ok in [
            "0192f3a0-7c1e-7a4b-9c1d-1234567890ab",
            "order:42",
            "a.1.2",
            "x_y-z",
        ] {
            assert_eq!(RunId::parse(ok).unwrap(), ok);
        }
        for bad in ["", ".", "..", "a/b", "a\0b", "a\nb", "<script>", "a b"] {
            let e = RunId::parse(bad).unwrap_err();
            assert_eq!(e.what, "run ID");
            assert!(!e.to_string().contains('\n'), "{e}");
        }
        assert!(RunId::parse(&"a".repeat(129)).is_err());
        assert_eq!(safe_name("my order v2").as_deref(), Some("my-order-v2"));
        assert_eq!(safe_name(".."), None);
    }

    #[test]
    fn the_pattern_says_what_check_name_does() {
        let pattern = regex::Regex::new(NAME_PATTERN).unwrap();
        let samples = [
            "",
            ".",
            "..",
            "...",
            "a",
            ".a",
            "a.",
            "a..",
            ":",
            "-",
            "ab",
            "a b",
            "a/b",
            "ä",
            "0192f3a0-7c1e-7a4b-9c1d-1234567890ab.3",
        ];
        let long = "x".repeat(129);
        for s in samples.iter().copied().chain([long.as_str(), &long[..128]]) {
            assert_eq!(pattern.is_match(s), check_name("name", s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn ids_serialize_as_plain_strings() {
        let run = RunId::from("r-1");
        assert_eq!(serde_json::to_string(&run).unwrap(), "\"r-1\"");
        let bytes = postcard::to_stdvec(&run).unwrap();
        assert_eq!(bytes, postcard::to_stdvec("r-1").unwrap());
    }
}
