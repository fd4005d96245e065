//! Signed webhooks: a hook or an event key exposed at
//! `POST /v1/webhooks/{id}` to a third party (a payment provider, a code
//! host) that signs its deliveries instead of sending keel's token. The
//! record says where a delivery goes and how its signature is checked;
//! [`verify`] checks one (pure: the caller reads the store and the clock).
//!
//! Schemes: Stripe's `Stripe-Signature` (`t=TIMESTAMP,v1=HEX`, HMAC-SHA256
//! of `TIMESTAMP.BODY`, refused outside the timestamp tolerance), GitHub's
//! `X-Hub-Signature-256` (`sha256=HEX` of the body) and a generic
//! HMAC-SHA256 of the body in a header of the record's choosing.

use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Stripe's default tolerance between a delivery's timestamp and now.
pub const STRIPE_TOLERANCE_S: u64 = 300;

/// A webhook: its ID (the last segment of its URL), where deliveries go,
/// and how they are verified.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookRecord {
    /// The webhook's ID, a name (`[A-Za-z0-9._:-]`).
    pub id: String,
    /// Where a verified delivery goes.
    pub target: Target,
    /// How a delivery's signature is checked.
    pub scheme: Scheme,
    /// The secret shared with the sender (Stripe's `whsec_...`, GitHub's
    /// webhook secret), used as the HMAC key as given.
    pub secret: String,
    pub created_at_ms: u64,
}

/// Where a verified delivery goes: its body is the payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Target {
    /// Resume the hook whose token is `token`, where each `{/json/pointer}`
    /// is replaced by the string or number at that place in the body
    /// (`order:{/data/object/metadata/order_id}`).
    Hook { token: String },
    /// Push an event with key `key`.
    Event { key: String },
    /// Resume the hook, as `Hook` does; a delivery for a token no run
    /// holds (and not delivered before) is pushed as an event with key
    /// `unheld_event` instead of being refused.
    HookOrEvent { token: String, unheld_event: String },
}

/// How a delivery's signature is checked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scheme {
    /// Stripe: `Stripe-Signature: t=...,v1=...`; deliveries whose
    /// timestamp is more than `tolerance_s` from now are refused, and a
    /// signature is accepted once.
    Stripe { tolerance_s: u64 },
    /// GitHub: `X-Hub-Signature-256: sha256=...` of the body; a delivery
    /// is identified by `X-GitHub-Delivery`.
    Github,
    /// HMAC-SHA256 of the body, hex, in `header` (with or without a
    /// `sha256=` prefix).
    Hmac { header: String },
}

impl crate::codec::Stored for WebhookRecord {}

/// What a verified delivery carries beyond its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The sender's ID for the delivery (Stripe's event ID, GitHub's
    /// delivery GUID): a redelivery of it is not delivered again.
    pub delivery_id: Option<String>,
    /// The signature to accept only once, and until when it could be
    /// presented (later it is stale anyway); `None` when the scheme has no
    /// timestamp to bound a replay by.
    pub once: Option<(String, u64)>,
}

/// Why a delivery was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the delivery has no `{header}` header")]
    Missing { header: String },
    #[error("the `{header}` header is malformed: {reason}")]
    Malformed { header: String, reason: String },
    #[error("the signature does not match the body under the webhook's secret")]
    Mismatch,
    #[error(
        "the delivery's timestamp is {off_s} s from now, beyond the tolerance of {tolerance_s} s (a stale or replayed delivery)"
    )]
    Stale { off_s: u64, tolerance_s: u64 },
}

/// Checks a delivery of `body` with headers `header` (looked up by
/// lower-case name) at `now_ms` against `record`.
pub fn verify(
    record: &WebhookRecord,
    header: impl Fn(&str) -> Option<String>,
    body: &[u8],
    now_ms: u64,
) -> Result<Verified, SignatureError> {
    let required = |name: &str| {
        header(name).ok_or_else(|| SignatureError::Missing {
            header: name.into(),
        })
    };
    match &record.scheme {
        Scheme::Stripe { tolerance_s } => {
            let value = required("stripe-signature")?;
            let (timestamp, signatures) = stripe_parts(&value)?;
            let mut signed = format!("{timestamp}.").into_bytes();
            signed.extend_from_slice(body);
            let signature = signatures
                .iter()
                .find(|s| matches(&record.secret, &signed, s))
                .ok_or(SignatureError::Mismatch)?;
            let off_s = (now_ms / 1000).abs_diff(timestamp);
            if off_s > *tolerance_s {
                return Err(SignatureError::Stale {
                    off_s,
                    tolerance_s: *tolerance_s,
                });
            }
            let until_ms = timestamp.saturating_add(*tolerance_s).saturating_mul(1000);
            Ok(Verified {
                delivery_id: json_id(body),
                once: Some((signature.clone(), until_ms)),
            })
        }
        Scheme::Github => {
            let value = required("x-hub-signature-256")?;
            check_body_signature("x-hub-signature-256", &value, &record.secret, body)?;
            Ok(Verified {
                delivery_id: header("x-github-delivery"),
                once: None,
            })
        }
        Scheme::Hmac { header: name } => {
            let name = name.to_ascii_lowercase();
            let value = required(&name)?;
            check_body_signature(&name, &value, &record.secret, body)?;
            Ok(Verified {
                delivery_id: None,
                once: None,
            })
        }
    }
}

/// The timestamp and the `v1` signatures of a `Stripe-Signature` value.
fn stripe_parts(value: &str) -> Result<(u64, Vec<String>), SignatureError> {
    let malformed = |reason: &str| SignatureError::Malformed {
        header: "stripe-signature".into(),
        reason: reason.into(),
    };
    let mut timestamp = None;
    let mut signatures = Vec::new();
    for part in value.split(',') {
        match part.trim().split_once('=') {
            Some(("t", t)) => {
                timestamp = Some(
                    t.parse::<u64>()
                        .map_err(|_| malformed("`t` is not a number"))?,
                )
            }
            Some(("v1", s)) => signatures.push(s.to_ascii_lowercase()),
            _ => {}
        }
    }
    let timestamp = timestamp.ok_or_else(|| malformed("it has no `t=` timestamp"))?;
    if signatures.is_empty() {
        return Err(malformed("it has no `v1=` signature"));
    }
    Ok((timestamp, signatures))
}

/// Checks a hex HMAC-SHA256 of `body` (after an optional `sha256=`).
fn check_body_signature(
    name: &str,
    value: &str,
    secret: &str,
    body: &[u8],
) -> Result<(), SignatureError> {
    let hex = value.trim();
    let hex = hex.strip_prefix("sha256=").unwrap_or(hex);
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(SignatureError::Malformed {
            header: name.into(),
            reason: "expected `sha256=` and 64 hex digits".into(),
        });
    }
    if matches(secret, body, &hex.to_ascii_lowercase()) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Whether `hex` is the HMAC-SHA256 of `signed` under `secret` (compared
/// in constant time).
fn matches(secret: &str, signed: &[u8], hex: &str) -> bool {
    let Ok(expected) = hex::decode(hex) else {
        return false;
    };
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(signed);
    mac.verify_slice(&expected).is_ok()
}

/// The hex HMAC-SHA256 of `signed` under `secret`: what a sender puts in
/// its header (for tests and for senders written against keel).
pub fn sign(secret: &str, signed: &[u8]) -> String {
    let mut mac =
        <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes any key");
    mac.update(signed);
    hex::encode(mac.finalize().into_bytes())
}

/// A JSON body's top-level `"id"` string (Stripe's event ID).
fn json_id(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    value.get("id")?.as_str().map(str::to_string)
}

/// The payload a delivery's body becomes: its JSON, or the body as a JSON
/// string when it is text but not JSON; `None` when it is neither.
pub fn payload(body: &[u8]) -> Option<serde_json::Value> {
    serde_json::from_slice(body)
        .ok()
        .or_else(|| std::str::from_utf8(body).ok().map(|t| t.into()))
}

/// The hook token `template` names for `payload`: each `{/pointer}`
/// replaced by the string or number there.
pub fn hook_token(template: &str, payload: &serde_json::Value) -> Result<String, String> {
    let mut token = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        token.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("the hook token template `{template}` has an unclosed `{{`"))?;
        let pointer = &rest[open + 1..open + close];
        let value = match payload.pointer(pointer) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(n @ serde_json::Value::Number(_)) => n.to_string(),
            Some(_) => {
                return Err(format!(
                    "`{pointer}` in the payload is not a string or a number"
                ));
            }
            None => return Err(format!("the payload has nothing at `{pointer}`")),
        };
        token.push_str(&value);
        rest = &rest[open + close + 1..];
    }
    token.push_str(rest);
    Ok(token)
}

/// Refuses a template that cannot name a token (an unclosed `{`, a
/// pointer not starting with `/`).
pub fn check_template(template: &str) -> Result<(), String> {
    if template.is_empty() {
        return Err("the hook token is empty".into());
    }
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| format!("`{template}` has an unclosed `{{`"))?;
        let pointer = &rest[open + 1..open + close];
        if !pointer.starts_with('/') {
            return Err(format!(
                "`{{{pointer}}}` in `{template}` is not a JSON pointer (it starts with `/`)"
            ));
        }
        rest = &rest[open + close + 1..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(scheme: Scheme) -> WebhookRecord {
        WebhookRecord {
            id: "stripe".into(),
            target: Target::Event {
                key: "payments".into(),
            },
            scheme,
            secret: "whsec_test".into(),
            created_at_ms: 0,
        }
    }

    fn headers<'a>(pairs: &'a [(&'a str, String)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        }
    }

    const BODY: &[u8] = br#"{"id": "evt_1", "type": "payment_intent.succeeded"}"#;

    fn stripe_header(t: u64, secret: &str, body: &[u8]) -> String {
        let mut signed = format!("{t}.").into_bytes();
        signed.extend_from_slice(body);
        format!("t={t},v1={},v0=ignored", sign(secret, &signed))
    }

    #[test]
    fn stripe_accepts_a_fresh_signature_once_and_names_the_event() {
        let r = record(Scheme::Stripe { tolerance_s: 300 });
        let h = [("stripe-signature", stripe_header(1_000, "whsec_test", BODY))];
        let v = verify(&r, headers(&h), BODY, 1_100_000).unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some("evt_1"));
        let (signature, until) = v.once.unwrap();
        assert_eq!(signature.len(), 64);
        assert_eq!(until, 1_300_000);
    }

    #[test]
    fn stripe_refuses_a_wrong_secret_an_altered_body_and_a_stale_timestamp() {
        let r = record(Scheme::Stripe { tolerance_s: 300 });
        let wrong = [(
            "stripe-signature",
            stripe_header(1_000, "whsec_other", BODY),
        )];
        assert_eq!(
            verify(&r, headers(&wrong), BODY, 1_000_000),
            Err(SignatureError::Mismatch)
        );
        let good = [("stripe-signature", stripe_header(1_000, "whsec_test", BODY))];
        assert_eq!(
            verify(&r, headers(&good), br#"{"id": "evt_2"}"#, 1_000_000),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&r, headers(&good), BODY, 1_301_000),
            Err(SignatureError::Stale {
                off_s: 301,
                tolerance_s: 300
            })
        );
        assert!(matches!(
            verify(&r, headers(&[]), BODY, 0),
            Err(SignatureError::Missing { .. })
        ));
        let no_t = [("stripe-signature", "v1=abc".to_string())];
        assert!(matches!(
            verify(&r, headers(&no_t), BODY, 0),
            Err(SignatureError::Malformed { .. })
        ));
    }

    #[test]
    fn github_and_generic_hmac_sign_the_body() {
        let r = record(Scheme::Github);
        let h = [
            (
                "x-hub-signature-256",
                format!("sha256={}", sign("whsec_test", BODY)),
            ),
            ("x-github-delivery", "d-1".to_string()),
        ];
        let v = verify(&r, headers(&h), BODY, 0).unwrap();
        assert_eq!(v.delivery_id.as_deref(), Some("d-1"));
        assert_eq!(v.once, None);
        assert_eq!(
            verify(&r, headers(&h), b"{}", 0),
            Err(SignatureError::Mismatch)
        );
        let r = record(Scheme::Hmac {
            header: "X-Signature".into(),
        });
        let h = [("x-signature", sign("whsec_test", BODY))];
        assert!(verify(&r, headers(&h), BODY, 0).is_ok());
        let short = [("x-signature", "sha256=abcd".to_string())];
        assert!(matches!(
            verify(&r, headers(&short), BODY, 0),
            Err(SignatureError::Malformed { .. })
        ));
    }

    #[test]
    fn hook_tokens_come_from_the_payload() {
        let payload =
            serde_json::json!({"data": {"object": {"metadata": {"order_id": "o-7"}, "n": 3}}});
        assert_eq!(
            hook_token(
                "order:{/data/object/metadata/order_id}:{/data/object/n}",
                &payload
            ),
            Ok("order:o-7:3".into())
        );
        assert_eq!(hook_token("fixed", &payload), Ok("fixed".into()));
        assert!(
            hook_token("x:{/missing}", &payload)
                .unwrap_err()
                .contains("nothing at")
        );
        assert!(check_template("x:{data}").is_err());
        assert!(check_template("x:{/data").is_err());
        assert!(check_template("x:{/data}").is_ok());
    }

    #[test]
    fn a_body_that_is_not_json_becomes_a_string() {
        assert_eq!(payload(b"{\"a\":1}"), Some(serde_json::json!({"a": 1})));
        assert_eq!(payload(b"a=1&b=2"), Some(serde_json::json!("a=1&b=2")));
        assert_eq!(payload(&[0xff, 0xfe]), None);
    }
}
