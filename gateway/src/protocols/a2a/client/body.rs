//! Answers of remote agents read whole but bounded: a task or a card larger than
//! [`MAX_ANSWER_BYTES`] is refused rather than held in memory.

use awaken_actors::delegation::RemoteError;
use reqwest::Response;

/// The largest answer (a task, a card) or stream event read from a remote agent:
/// a bigger one is refused rather than held in memory.
pub(super) const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;

/// The whole body, refused once it passes [`MAX_ANSWER_BYTES`].
pub(super) async fn read_body(mut response: Response, url: &str) -> Result<Vec<u8>, RemoteError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| RemoteError::Unreachable(format!("{url}: {e}")))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large(url));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The refusal of an answer above [`MAX_ANSWER_BYTES`].
pub(super) fn too_large(url: &str) -> RemoteError {
    RemoteError::Protocol(format!(
        "{url} answered more than {} MiB: refused",
        MAX_ANSWER_BYTES / (1024 * 1024)
    ))
}
