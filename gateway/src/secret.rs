//! Secrets in the configuration: values that must never reach a log line, an
//! error message or an HTTP answer, and that can come from a file (a Kubernetes
//! Secret mounted as files) instead of the config file or the environment.
//!
//! Every secret setting `x` has a sibling `x_file`; at most one of the two is
//! set, and the file is read once, when the configuration loads (decision 0058).

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A secret string: its `Debug` and `Serialize` say `<redacted>`; only
/// [`Secret::expose`] gives the value, at the one place that sends it.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value, for the connection or check that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str("<redacted>")
    }
}

/// Why a secret setting cannot be used; names the setting, never the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Both `x` and `x_file` are set.
    #[error("set `{key}` or `{key}_file`, not both")]
    Both {
        /// The setting, e.g. `cluster.nats_password`.
        key: String,
    },
    /// The file cannot be read.
    #[error("{key}_file: cannot read `{path}`: {source}")]
    Unreadable {
        /// The setting, without `_file`.
        key: String,
        /// The file named.
        path: String,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file's content is not in the expected format.
    #[error("{key}_file: `{path}` is malformed{what}")]
    Malformed {
        /// The setting, without `_file`.
        key: String,
        /// The file named.
        path: String,
        /// Where it went wrong (never the content).
        what: String,
    },
    /// The file holds nothing but white space.
    #[error("{key}_file: `{path}` is empty")]
    Empty {
        /// The setting, without `_file`.
        key: String,
        /// The file named.
        path: String,
    },
}

/// Reads the secret in `path`. A trailing line break is not part of it (`echo
/// secret > file` writes one); anything else is kept as it is.
pub fn read_secret_file(key: &str, path: &Path) -> Result<Secret, SecretError> {
    let text = std::fs::read_to_string(path).map_err(|source| SecretError::Unreadable {
        key: key.to_owned(),
        path: path.display().to_string(),
        source,
    })?;
    let value = text.strip_suffix('\n').unwrap_or(&text);
    let value = value.strip_suffix('\r').unwrap_or(value);
    if value.trim().is_empty() {
        return Err(SecretError::Empty {
            key: key.to_owned(),
            path: path.display().to_string(),
        });
    }
    Ok(Secret::new(value))
}

/// The secret of setting `key`: `value` as given, or read from `file`, or none.
pub fn resolve(
    key: &str,
    value: Option<Secret>,
    file: Option<&Path>,
) -> Result<Option<Secret>, SecretError> {
    match (value, file) {
        (Some(_), Some(_)) => Err(SecretError::Both {
            key: key.to_owned(),
        }),
        (Some(value), None) => Ok(Some(value)),
        (None, Some(path)) => read_secret_file(key, path).map(Some),
        (None, None) => Ok(None),
    }
}

/// Checks that the file of setting `key` can be opened for reading, so a
/// missing certificate is a clear error at start-up rather than a failed
/// handshake later.
pub fn check_readable(key: &str, path: &Path) -> Result<(), SecretError> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| SecretError::Unreadable {
            key: key.trim_end_matches("_file").to_owned(),
            path: path.display().to_string(),
            source,
        })
}

/// [`check_readable`] for each setting of `files` that is set.
pub fn check_all_readable(
    files: &[(&str, &Option<std::path::PathBuf>)],
) -> Result<(), SecretError> {
    for (key, path) in files {
        if let Some(path) = path {
            check_readable(key, path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Write;

    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    #[test]
    fn a_secret_never_shows_in_debug_or_json() {
        let secret = Secret::new("hunter2");
        assert_eq!(format!("{secret:?}"), "<redacted>");
        assert_eq!(serde_json::to_string(&secret).unwrap(), "\"<redacted>\"");
        assert_eq!(secret.expose(), "hunter2");
    }

    #[test]
    fn a_file_gives_its_content_without_the_final_line_break() {
        let f = file("s3cret\r\n");
        let secret = resolve("cluster.nats_password", None, Some(f.path())).unwrap();
        assert_eq!(secret.unwrap().expose(), "s3cret");
        let f = file("  two\nlines\n");
        assert_eq!(
            read_secret_file("k", f.path()).unwrap().expose(),
            "  two\nlines"
        );
    }

    #[test]
    fn both_a_value_and_a_file_or_a_bad_file_are_refused_by_name() {
        let f = file("s3cret");
        let both = resolve("store.url", Some(Secret::new("x")), Some(f.path())).unwrap_err();
        assert_eq!(
            both.to_string(),
            "set `store.url` or `store.url_file`, not both"
        );
        let missing = resolve("store.url", None, Some(Path::new("/nonexistent/url"))).unwrap_err();
        assert!(
            missing
                .to_string()
                .starts_with("store.url_file: cannot read `/nonexistent/url`: "),
            "{missing}"
        );
        let empty = file("\n");
        let empty = resolve("store.url", None, Some(empty.path())).unwrap_err();
        assert!(empty.to_string().ends_with("is empty"), "{empty}");
        assert!(resolve("store.url", None, None).unwrap().is_none());
    }

    #[test]
    fn an_unreadable_file_setting_is_named() {
        let error = check_readable("cluster.nats_tls_ca_file", Path::new("/nonexistent/ca.pem"))
            .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("cluster.nats_tls_ca_file: cannot read `/nonexistent/ca.pem`"),
            "{error}"
        );
    }
}
