//! Request bodies are read before any route answers.
//!
//! A handler that answers without reading the body (a cancel, an unknown route,
//! a missing API key) leaves hyper to drain it: hyper tries once and, if the body
//! has not fully arrived, closes the connection after a response that promised
//! keep-alive. A client that sent the body as a second TCP segment then loses its
//! next request on that pooled connection ("server disconnected without sending a
//! response"). Reading the body first makes every answer leave the connection
//! reusable; the routes' own body limit still decides what is too large, so a
//! body over the limit is handed on unread past it. It runs inside the in-flight
//! limit: a request whose body is still arriving is in flight.

use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use futures::StreamExt;

use super::error::ApiError;

/// Marks a request whose body holds the JSON escape `\u0000` (refused once the
/// caller is known; see [`refuse_nul`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NulInBody;

/// `request` with its body read whole (up to `limit` bytes; a larger body is
/// handed on unread past that point, for the route's limit to refuse), or a 400
/// when the body could not be read.
pub(crate) async fn read_first(
    request: Request,
    limit: usize,
    deadline: Duration,
) -> Result<Request, ApiError> {
    if request.body().is_end_stream() {
        return Ok(request);
    }
    let (mut parts, body) = request.into_parts();
    // A client trickling its body would hold its in-flight place for as long
    // as it likes; past the deadline it gets 408 and the place is free again.
    let Ok(read) = tokio::time::timeout(deadline, read_up_to(body, limit)).await else {
        return Err(ApiError::RequestTimeout(format!(
            "the request body did not arrive within {} s",
            deadline.as_secs()
        )));
    };
    match read {
        Ok((body, nul)) => {
            if nul {
                parts.extensions.insert(NulInBody);
            }
            Ok(Request::from_parts(parts, body))
        }
        Err(error) => Err(ApiError::BadRequest(format!(
            "the request body could not be read: {error}"
        ))),
    }
}

/// 400 for a body with a NUL character in a JSON string: no store can keep it
/// (PostgreSQL's `jsonb` refuses `\u0000`), so it is refused before anything is
/// applied rather than accepted and then lost.
pub(crate) fn refuse_nul(request: &Request) -> Result<(), ApiError> {
    if request.extensions().get::<NulInBody>().is_some() {
        return Err(ApiError::BadRequest(
            "the body holds a NUL character (\\u0000), which cannot be stored".into(),
        ));
    }
    Ok(())
}

/// Whether JSON text escapes a NUL character (`\u0000`), reading
/// escapes in pairs so an escaped backslash before `u0000` is not taken for one.
fn holds_escaped_nul(json: &[u8]) -> bool {
    let mut at = 0;
    while let Some(offset) = json[at..].iter().position(|&byte| byte == b'\\') {
        let escape = at + offset;
        match json.get(escape + 1) {
            Some(b'u') if json.get(escape + 2..escape + 6) == Some(b"0000") => return true,
            Some(_) => at = escape + 2,
            None => return false,
        }
    }
    false
}

/// The body, read whole if it is at most `limit` bytes (with whether it escapes
/// a NUL); otherwise what was read followed by the rest, for the route's limit to
/// refuse.
async fn read_up_to(body: Body, limit: usize) -> Result<(Body, bool), axum::Error> {
    let mut stream = body.into_data_stream();
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut read = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        read = read.saturating_add(chunk.len());
        chunks.push(chunk);
        if read > limit {
            let prefix = futures::stream::iter(chunks.into_iter().map(Ok::<_, axum::Error>));
            return Ok((Body::from_stream(prefix.chain(stream)), false));
        }
    }
    let whole = match chunks.len() {
        0 => return Ok((Body::empty(), false)),
        1 => chunks.remove(0),
        _ => Bytes::from(chunks.concat()),
    };
    let nul = holds_escaped_nul(&whole);
    Ok((Body::from(whole), nul))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_escaped_nul_counts() {
        for nul in [
            r#"{"a":"\u0000"}"#,
            r#"["x\u0000y"]"#,
            r#"{"a":"\\\u0000"}"#,
            r#"{"a":"\u00001"}"#,
        ] {
            assert!(holds_escaped_nul(nul.as_bytes()), "{nul}");
        }
        for clean in [
            r#"{"a":"\\u0000"}"#,
            r#"{"a":"\u0001"}"#,
            r#"{"a":"u0000"}"#,
            r#"{"a":"\"#,
            "",
        ] {
            assert!(!holds_escaped_nul(clean.as_bytes()), "{clean}");
        }
    }

    async fn bytes_of(body: Body, limit: usize) -> Result<Bytes, axum::Error> {
        axum::body::to_bytes(body, limit).await
    }

    fn chunked(parts: &[&'static str]) -> Body {
        let chunks = parts
            .iter()
            .map(|part| Ok::<_, std::io::Error>(Bytes::from_static(part.as_bytes())))
            .collect::<Vec<_>>();
        Body::from_stream(futures::stream::iter(chunks))
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let (body, nul) = read_up_to(chunked(&["{\"a\":", "1}"]), 16).await.unwrap();
        assert!(!nul);
        assert_eq!(
            body.size_hint().exact(),
            Some(7),
            "read into one known size"
        );
        assert_eq!(bytes_of(body, 16).await.unwrap(), "{\"a\":1}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_handed_on_whole_for_the_route_to_refuse() {
        let (body, _) = read_up_to(chunked(&["12345", "67890", "abc"]), 8)
            .await
            .unwrap();
        assert_eq!(bytes_of(body, 64).await.unwrap(), "1234567890abc");
        let (body, _) = read_up_to(chunked(&["12345", "67890", "abc"]), 8)
            .await
            .unwrap();
        assert!(
            bytes_of(body, 8).await.is_err(),
            "the route's limit still applies"
        );
    }
}
