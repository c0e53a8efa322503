//! `A2A-Version`: the protocol version a request is written against.

use axum::http::HeaderMap;

use super::error::A2aError;

/// The request header naming the client's protocol version.
pub(crate) const VERSION_HEADER: &str = "a2a-version";

/// Refuses requests for a version other than 1.0. A request without the header
/// is taken as 1.0: every route of this server speaks only that, and clients that
/// predate the header cannot be served either way.
pub(crate) fn check_version(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    let version = value
        .to_str()
        .map_err(|_| A2aError::VersionNotSupported("<not text>".to_owned()))?
        .trim();
    if version.is_empty() || supported(version) {
        return Ok(());
    }
    Err(A2aError::VersionNotSupported(version.to_owned()))
}

/// `1.0`, `1`, or a `1.0.x` patch.
fn supported(version: &str) -> bool {
    let mut parts = version.split('.');
    matches!(parts.next(), Some("1"))
        && matches!(parts.next(), None | Some("0"))
        && parts.all(|patch| patch.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_oh_and_its_patches_are_supported() {
        for version in ["1.0", "1", "1.0.2"] {
            assert!(supported(version), "{version}");
        }
        for version in ["0.3", "2.0", "1.1", "1.0.x", "one"] {
            assert!(!supported(version), "{version}");
        }
    }
}
