//! The binary encoding of everything keel stores: postcard, prefixed with
//! the layout version of the value, so that a store or a file written by
//! another keel is refused by name instead of misread, and a value written
//! with an earlier layout of its type is read through that layout.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The version of the record and journal formats; a type whose layout
/// changed since writes its own [`Stored::VERSION`].
pub const FORMAT_VERSION: u16 = 1;

/// A value keel stores, and the versions of its layout.
///
/// Postcard is not self-describing: a field added to a stored type makes
/// the bytes written before unreadable as the new type. Such a type raises
/// its `VERSION` and reads the earlier layouts in `decode_earlier`.
pub trait Stored: Serialize + DeserializeOwned {
    /// The layout version written with the value.
    const VERSION: u16 = FORMAT_VERSION;

    /// Decodes `bytes` (whole, version prefix included) written with the
    /// earlier layout `version`; `None` if the type never had that layout.
    fn decode_earlier(version: u16, bytes: &[u8]) -> Option<Result<Self, postcard::Error>> {
        let _ = (version, bytes);
        None
    }
}

/// Decodes the value of `bytes` (version prefix included) as type `T`:
/// the helper of [`Stored::decode_earlier`] for an earlier layout `T`.
pub fn decode_layout<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes::<Versioned<T>>(bytes).map(|v| v.value)
}

/// A stored record could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what} cannot be decoded: {reason}")]
pub struct CodecError {
    /// What was being decoded (`run record`, `journal entry`, ...).
    pub what: String,
    pub reason: String,
}

#[derive(Serialize, Deserialize)]
struct Versioned<T> {
    version: u16,
    value: T,
}

/// Encodes a value with its type's current layout version.
pub fn encode<T: Stored>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(&Versioned {
        version: T::VERSION,
        value,
    })
    .expect("records always encode")
}

/// Decodes a value written by [`encode`] with the current or an earlier
/// layout of its type, refusing other versions.
pub fn decode<T: Stored>(bytes: &[u8], what: &str) -> Result<T, CodecError> {
    let fail = |reason: String| CodecError {
        what: what.into(),
        reason,
    };
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(|e| fail(e.to_string()))?;
    if version != T::VERSION {
        return match T::decode_earlier(version, bytes) {
            Some(earlier) => earlier.map_err(|e| fail(e.to_string())),
            None => Err(fail(format!(
                "format version {version}, but this keel reads version {}",
                T::VERSION
            ))),
        };
    }
    let record: Versioned<T> = postcard::from_bytes(bytes).map_err(|e| fail(e.to_string()))?;
    Ok(record.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Stored for (String, u32) {}
    impl Stored for String {}

    #[test]
    fn values_round_trip_and_other_versions_are_refused() {
        let bytes = encode(&("a".to_string(), 7u32));
        assert_eq!(
            decode::<(String, u32)>(&bytes, "pair").unwrap(),
            ("a".into(), 7)
        );
        let mut other = bytes.clone();
        other[0] = 9;
        let err = decode::<(String, u32)>(&other, "pair").unwrap_err();
        assert!(err.to_string().contains("format version 9"), "{err}");
    }

    #[test]
    fn truncated_records_are_errors_not_panics() {
        let bytes = encode(&"a long enough string".to_string());
        for cut in 0..bytes.len() {
            assert!(decode::<String>(&bytes[..cut], "s").is_err());
        }
    }
}
