//! The binary encoding of everything keel stores: postcard, prefixed with
//! the record format version, so that a store or a file written by another
//! keel is refused by name instead of misread.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The version of the record and journal formats.
pub const FORMAT_VERSION: u16 = 1;

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

/// Encodes a value with the current format version.
pub fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    postcard::to_stdvec(&Versioned {
        version: FORMAT_VERSION,
        value,
    })
    .expect("records always encode")
}

/// Decodes a value written by [`encode`], refusing other format versions.
pub fn decode<T: DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, CodecError> {
    let fail = |reason: String| CodecError {
        what: what.into(),
        reason,
    };
    let (version, _) = postcard::take_from_bytes::<u16>(bytes).map_err(|e| fail(e.to_string()))?;
    if version != FORMAT_VERSION {
        return Err(fail(format!(
            "format version {version}, but this keel reads version {FORMAT_VERSION}"
        )));
    }
    let record: Versioned<T> = postcard::from_bytes(bytes).map_err(|e| fail(e.to_string()))?;
    Ok(record.value)
}

#[cfg(test)]
mod tests {
    use super::*;

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
