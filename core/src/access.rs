//! Scoped tokens: short-lived credentials the server signs, each limited
//! to one thing (resuming one hook, reading one run, starting one
//! workflow), verified with the server's secret and no store read.
//!
//! A token is `ks1.<claims>.<signature>`: the claims as JSON and the
//! HMAC-SHA256 of `ks1.<claims>` under the secret, both base64url without
//! padding. The claims say what the token may do and until when; nothing
//! in a token is secret, so one can be handed to a browser or a third
//! party, and what it grants is all it grants.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// The prefix every scoped token starts with (and the version of its
/// format).
pub const PREFIX: &str = "ks1.";

/// The longest a scoped token may live.
pub const MAX_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;

/// The lifetime of a token minted without one.
pub const DEFAULT_TTL_MS: u64 = 60 * 60 * 1000;

/// The length of a generated signing secret, in bytes.
pub const SECRET_LEN: usize = 32;

/// What a scoped token may do: one of these, and nothing else.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Scope {
    /// Resume the hook holding `token` (and read it, and its replies).
    ResumeHook {
        /// The hook's token.
        token: String,
    },
    /// Read the run `run_id`: its record, result, journal, events and
    /// streams.
    ReadRun {
        /// The run.
        run_id: String,
    },
    /// Start runs of `workflow`; with `hook_token`, only with that start
    /// hook token, and with `run_id`, only as that run (so at most one).
    StartWorkflow {
        /// The workflow.
        workflow: String,
        /// The start hook token every start must carry.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook_token: Option<String>,
        /// The run ID every start must ask for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        run_id: Option<String>,
    },
}

impl Scope {
    /// The scope in words, for messages: "resume hook `order:1`".
    pub fn describe(&self) -> String {
        match self {
            Scope::ResumeHook { token } => format!("resume hook `{token}`"),
            Scope::ReadRun { run_id } => format!("read run {run_id}"),
            Scope::StartWorkflow {
                workflow,
                hook_token,
                run_id,
            } => {
                let mut text = format!("start workflow `{workflow}`");
                if let Some(t) = hook_token {
                    text.push_str(&format!(" with hook token `{t}`"));
                }
                if let Some(r) = run_id {
                    text.push_str(&format!(" as run {r}"));
                }
                text
            }
        }
    }
}

/// What a token says: its scope and its lifetime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Claims {
    /// What the token may do.
    pub scope: Scope,
    /// When it was minted (ms since the epoch).
    pub issued_at_ms: u64,
    /// When it stops being accepted (ms since the epoch).
    pub expires_at_ms: u64,
}

/// Why a token was not accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a scoped token, or one whose parts do not decode.
    #[error("the token is not a well-formed scoped token: {reason}")]
    Malformed { reason: String },
    /// The signature is not the server's: forged, altered, or signed
    /// under another secret.
    #[error("the token's signature is not this server's")]
    BadSignature,
    /// The token was valid until `expired_at_ms`.
    #[error("the token expired at {expired_at_ms} (ms since the epoch)")]
    Expired { expired_at_ms: u64 },
}

/// Whether `token` has the form of a scoped token (and not of the
/// server's own token).
pub fn is_scoped(token: &str) -> bool {
    token.starts_with(PREFIX)
}

/// The signed token carrying `claims`, under `secret`.
pub fn mint(secret: &[u8], claims: &Claims) -> String {
    let body = serde_json::to_vec(claims).expect("claims serialize");
    let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(body));
    let signature = mac(secret, &signed).finalize().into_bytes();
    format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
}

/// The claims of `token` if `secret` signed it and it has not expired at
/// `now_ms`. The signature is checked (in constant time) before the claims
/// are read.
pub fn verify(secret: &[u8], token: &str, now_ms: u64) -> Result<Claims, TokenError> {
    let malformed = |reason: &str| TokenError::Malformed {
        reason: reason.into(),
    };
    if !is_scoped(token) {
        return Err(malformed("it does not start with `ks1.`"));
    }
    let (signed, signature) = token
        .rsplit_once('.')
        .filter(|(signed, _)| signed.len() > PREFIX.len())
        .ok_or_else(|| malformed("it has no signature"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|_| malformed("its signature is not base64url"))?;
    mac(secret, signed)
        .verify_slice(&signature)
        .map_err(|_| TokenError::BadSignature)?;
    let body = URL_SAFE_NO_PAD
        .decode(&signed[PREFIX.len()..])
        .map_err(|_| malformed("its claims are not base64url"))?;
    let claims: Claims = serde_json::from_slice(&body)
        .map_err(|e| malformed(&format!("its claims do not decode: {e}")))?;
    if now_ms >= claims.expires_at_ms {
        return Err(TokenError::Expired {
            expired_at_ms: claims.expires_at_ms,
        });
    }
    Ok(claims)
}

/// The claims of a token minted at `now_ms` for `scope`, living `ttl_ms`
/// ([`DEFAULT_TTL_MS`] if none); refused over [`MAX_TTL_MS`] or at zero.
pub fn claims(scope: Scope, now_ms: u64, ttl_ms: Option<u64>) -> Result<Claims, String> {
    let ttl_ms = ttl_ms.unwrap_or(DEFAULT_TTL_MS);
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(format!(
            "a scoped token lives between 1 ms and 7 days ({MAX_TTL_MS} ms), not {ttl_ms} ms"
        ));
    }
    Ok(Claims {
        scope,
        issued_at_ms: now_ms,
        expires_at_ms: now_ms.saturating_add(ttl_ms),
    })
}

fn mac(secret: &[u8], signed: &str) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("HMAC takes any key");
    mac.update(signed.as_bytes());
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn hook(token: &str) -> Scope {
        Scope::ResumeHook {
            token: token.into(),
        }
    }

    #[test]
    fn a_minted_token_verifies_until_it_expires() {
        let claims = claims(hook("order:1"), 1_000, Some(500)).unwrap();
        let token = mint(SECRET, &claims);
        assert!(is_scoped(&token));
        assert_eq!(verify(SECRET, &token, 1_499), Ok(claims));
        assert_eq!(
            verify(SECRET, &token, 1_500),
            Err(TokenError::Expired {
                expired_at_ms: 1_500
            })
        );
    }

    #[test]
    fn another_secret_or_an_altered_scope_is_refused() {
        let token = mint(SECRET, &claims(hook("order:1"), 0, None).unwrap());
        assert_eq!(
            verify(b"another secret", &token, 1),
            Err(TokenError::BadSignature)
        );
        // The same signature over claims naming another hook.
        let (_, signature) = token.rsplit_once('.').unwrap();
        let forged_claims = claims(hook("order:2"), 0, None).unwrap();
        let forged = mint(SECRET, &forged_claims);
        let (forged_signed, _) = forged.rsplit_once('.').unwrap();
        assert_eq!(
            verify(SECRET, &format!("{forged_signed}.{signature}"), 1),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong() {
        for (token, says) in [
            ("s3cret", "does not start"),
            ("ks1.", "no signature"),
            ("ks1.abc", "no signature"),
            ("ks1.abc.!!", "not base64url"),
        ] {
            match verify(SECRET, token, 0) {
                Err(TokenError::Malformed { reason }) => {
                    assert!(reason.contains(says), "{token}: {reason}")
                }
                other => panic!("{token}: {other:?}"),
            }
        }
        // Signed, but not claims.
        let signed = format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(b"{\"x\":1}"));
        let signature = URL_SAFE_NO_PAD.encode(mac(SECRET, &signed).finalize().into_bytes());
        match verify(SECRET, &format!("{signed}.{signature}"), 0) {
            Err(TokenError::Malformed { reason }) => assert!(reason.contains("do not decode")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lifetimes_are_bounded() {
        assert!(claims(hook("t"), 0, Some(0)).is_err());
        assert!(claims(hook("t"), 0, Some(MAX_TTL_MS + 1)).is_err());
        let c = claims(hook("t"), 10, None).unwrap();
        assert_eq!(c.expires_at_ms, 10 + DEFAULT_TTL_MS);
    }

    #[test]
    fn scopes_read_as_json_and_in_words() {
        let scope: Scope = serde_json::from_str(
            r#"{"kind": "start_workflow", "workflow": "order", "hook_token": "o:1"}"#,
        )
        .unwrap();
        assert_eq!(
            scope.describe(),
            "start workflow `order` with hook token `o:1`"
        );
        assert!(serde_json::from_str::<Scope>(r#"{"kind": "admin"}"#).is_err());
        assert!(
            serde_json::from_str::<Scope>(r#"{"kind": "read_run", "run_id": "r", "x": 1}"#)
                .is_err()
        );
    }
}
