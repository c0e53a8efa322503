//! Identifier newtypes.
//!
//! Every id that crosses a store, a wire or an API is its own type, so a run id can
//! never be passed where a thread id is expected. Ids are opaque strings: callers may
//! choose their own (`"thread-1"`), and the runtime generates UUID v7 strings
//! (time-ordered, so stores list them in creation order). Validation happens once, at
//! construction and at deserialization: an id is non-empty, at most
//! [`MAX_ID_LEN`] characters and free of control characters. The limit counts
//! characters, not bytes, so that it is exactly what the JSON Schema of an id
//! (`maxLength`) says to the clients generated from the OpenAPI document.
//!
//! An id is a shared, immutable string (`Arc<str>`): events, records and messages
//! carry the same ids many times per run, and cloning one is a reference count, not
//! an allocation.

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Longest accepted id, in characters (so at most four times as many bytes); long
/// enough for any UUID, URN or composite key.
pub const MAX_ID_LEN: usize = 256;

/// Why a string was refused as an id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The id was the empty string.
    #[error("{kind} id must not be empty")]
    Empty {
        /// Which id type refused it.
        kind: &'static str,
    },
    /// The id was longer than [`MAX_ID_LEN`].
    #[error("{kind} id is {len} characters long; the limit is {MAX_ID_LEN}")]
    TooLong {
        /// Which id type refused it.
        kind: &'static str,
        /// The offending length.
        len: usize,
    },
    /// The id contained a control character.
    #[error("{kind} id contains a control character")]
    ControlCharacter {
        /// Which id type refused it.
        kind: &'static str,
    },
}

/// The JSON Schema `pattern` of an id: no control character (Unicode `Cc`, what
/// [`char::is_control`] refuses).
pub const ID_PATTERN: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";

fn validate(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    // Bytes bound characters from above: only a long id is counted.
    if value.len() > MAX_ID_LEN {
        let len = value.chars().count();
        if len > MAX_ID_LEN {
            return Err(IdError::TooLong { kind, len });
        }
    }
    if value.chars().any(char::is_control) {
        return Err(IdError::ControlCharacter { kind });
    }
    Ok(())
}

macro_rules! define_id {
    ($(#[$meta:meta])* $name:ident, $kind:literal) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Deserialize)]
        #[serde(try_from = "String")]
        pub struct $name(Arc<str>);

        impl $name {
            /// Wraps a caller-chosen id after validating it.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                validate($kind, &value)?;
                Ok(Self(Arc::from(value)))
            }

            /// A fresh, time-ordered UUID v7 id.
            pub fn generate() -> Self {
                Self::from_uuid(uuid::Uuid::now_v7())
            }

            /// The id of a given UUID (always valid: 36 printable bytes).
            pub fn from_uuid(uuid: uuid::Uuid) -> Self {
                let mut buffer = uuid::Uuid::encode_buffer();
                Self(Arc::from(&*uuid.hyphenated().encode_lower(&mut buffer)))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Consumes the id, returning the inner string.
            pub fn into_string(self) -> String {
                String::from(&*self.0)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::new(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.into_string()
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

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                &*self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                &*self.0 == *other
            }
        }

        impl schemars::JsonSchema for $name {
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_ID_LEN,
                    "pattern": ID_PATTERN,
                })
            }
        }
    };
}

define_id!(
    /// A conversation thread: the unit of ownership (one ThreadActor per thread).
    ThreadId,
    "thread"
);
define_id!(
    /// One execution attempt over a thread.
    RunId,
    "run"
);
define_id!(
    /// A registered agent definition.
    AgentId,
    "agent"
);
define_id!(
    /// One tool call requested by the model; chosen by the model provider.
    ToolCallId,
    "tool call"
);
define_id!(
    /// One message in a thread's log.
    MessageId,
    "message"
);
define_id!(
    /// A human decision on a suspended tool call; the idempotency key for decisions.
    DecisionId,
    "decision"
);
define_id!(
    /// One durable activation of a run in the mailbox.
    DispatchId,
    "dispatch"
);
define_id!(
    /// One webhook on a run's status (an A2A push notification config id).
    WebhookId,
    "webhook"
);
define_id!(
    /// One request for a human's approval: a suspension of a tool call, found and
    /// decided by this id from any node.
    ApprovalId,
    "approval"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_caller_chosen_ids() {
        let id = ThreadId::new("thread-1").unwrap();
        assert_eq!(id.as_str(), "thread-1");
        assert_eq!(id.to_string(), "thread-1");
        assert_eq!(id, "thread-1");
    }

    #[test]
    fn refuses_empty_long_and_control_ids() {
        assert_eq!(RunId::new(""), Err(IdError::Empty { kind: "run" }));
        assert!(matches!(
            RunId::new("x".repeat(MAX_ID_LEN + 1)),
            Err(IdError::TooLong { len, .. }) if len == MAX_ID_LEN + 1
        ));
        let wide = "é".repeat(MAX_ID_LEN);
        assert!(
            RunId::new(wide.clone()).is_ok(),
            "the limit counts characters"
        );
        assert!(matches!(
            RunId::new(wide + "é"),
            Err(IdError::TooLong { len, .. }) if len == MAX_ID_LEN + 1
        ));
        assert!(matches!(
            RunId::new("a\nb"),
            Err(IdError::ControlCharacter { .. })
        ));
    }

    #[test]
    fn generated_ids_are_unique_and_time_ordered() {
        let a = RunId::generate();
        let b = RunId::generate();
        assert_ne!(a, b);
        assert!(a < b, "UUID v7 strings sort by creation time");
    }

    #[test]
    fn serde_is_a_plain_string_and_validates() {
        let id = ToolCallId::new("call_1").unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"call_1\"");
        let back: ToolCallId = serde_json::from_str("\"call_1\"").unwrap();
        assert_eq!(back, id);
        let err = serde_json::from_str::<ToolCallId>("\"\"").unwrap_err();
        assert!(err.to_string().contains("must not be empty"));
    }
}
