//! Why an object from the API server could not be cached.

/// An object the informer could not take into its cache; the object is skipped, logged and counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InformerError {
    /// The value is not an object with valid metadata.
    #[error("{kind}: not an object with valid metadata: {message}")]
    Decode {
        /// The kind being watched.
        kind: String,
        /// serde_json's message.
        message: String,
    },
    /// A required field is missing or has the wrong JSON type.
    #[error("{kind}: field {field} is missing or not {expected}")]
    BadField {
        /// The kind being watched.
        kind: String,
        /// Dotted path of the field.
        field: &'static str,
        /// What the field should have been.
        expected: &'static str,
    },
    /// The object could not be serialized back to JSON (cannot happen for a parsed value; kept
    /// so that the conversion never panics).
    #[error("{kind}: cannot serialize object: {message}")]
    Serialize {
        /// The kind being watched.
        kind: String,
        /// serde_json's message.
        message: String,
    },
}
