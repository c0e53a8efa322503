//! `A2A-Version`: the protocol version a request is written against.

use axum::http::HeaderMap;

use super::error::A2aError;

/// The request header naming the client's protocol version.
pub(crate) const VERSION_HEADER: &str = "a2a-version";

/// Refuses requests for a version other than 1.x. The spec reads a request
/// without the header as 0.3, which this server does not speak, so it is refused
/// too (clients send `A2A-Version: 1.0`).
pub(crate) fn check_version(headers: &HeaderMap) -> Result<(), A2aError> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Err(A2aError::VersionNotSupported(
            "0.3 (no A2A-Version header)".to_owned(),
        ));
    };
    let version = value
        .to_str()
        .map_err(|_| A2aError::VersionNotSupported("<not text>".to_owned()))?
        .trim();
    if supported(version) {
        return Ok(());
    }
    Err(A2aError::VersionNotSupported(version.to_owned()))
}

/// Any `1.x` (minor versions are compatible), written `1`, `1.0` or `1.0.2`.
fn supported(version: &str) -> bool {
    let mut parts = version.split('.');
    parts.next() == Some("1")
        && parts.all(|part| !part.is_empty() && part.chars().all(|c| c.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_1_x_is_supported() {
        for version in ["1.0", "1", "1.0.2", "1.1"] {
            assert!(supported(version), "{version}");
        }
        for version in ["0.3", "2.0", "1.0.x", "1.", "one", ""] {
            assert!(!supported(version), "{version}");
        }
    }
}
