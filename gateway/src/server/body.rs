//! Request bodies are read before any route answers.
//!
//! A handler that answers without reading the body (a cancel, an unknown route,
//! a missing API key) leaves hyper to drain it: hyper tries once and, if the body
//! has not fully arrived, closes the connection after a response that promised
//! keep-alive. A client that sent the body as a second TCP segment then loses its
//! next request on that pooled connection ("server disconnected without sending a
//! response"). Reading the body first makes every answer leave the connection
//! reusable; the routes' own body limit still decides what is too large, so a
//! body over the limit is handed on unread past it.
//!
//! The read comes before the in-flight limit (decision 0083): a body still
//! arriving holds no request place, only its share of the bytes of bodies
//! arriving ([`Arriving`]), and only until `body_read_timeout_secs`.

use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use futures::StreamExt;

use super::arriving::{Arriving, ArrivingBody};
use super::error::ApiError;

/// Marks a request whose body holds the JSON escape `\u0000` (refused once the
/// caller is known; see [`refuse_nul`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NulInBody;

/// A request whose body was read first.
#[derive(Debug)]
pub(crate) struct Arrived {
    /// The request, its body in memory (or, past the limit, what was read
    /// followed by the rest of the stream).
    pub(crate) request: Request,
    /// Whether the body was read to its end: an answer then leaves the
    /// connection reusable.
    pub(crate) whole: bool,
}

/// `request` with its body read whole (up to `limit` bytes; a larger body is
/// handed on unread past that point, for the route's limit to refuse); 408 when
/// it did not arrive within `deadline`, 503 when the bodies arriving hold all of
/// `arriving`'s budget, 400 when it could not be read.
pub(crate) async fn read_first(
    request: Request,
    limit: usize,
    deadline: Duration,
    arriving: &Arriving,
) -> Result<Arrived, ApiError> {
    if request.body().is_end_stream() {
        return Ok(Arrived {
            request,
            whole: true,
        });
    }
    let (mut parts, body) = request.into_parts();
    let mut held = arriving.start();
    // A client trickling its body holds its connection and what it sent until
    // the deadline; then it gets 408.
    let Ok(read) = tokio::time::timeout(deadline, read_up_to(body, limit, &mut held)).await else {
        return Err(ApiError::RequestTimeout(format!(
            "the request body did not arrive within {} s",
            deadline.as_secs()
        )));
    };
    match read {
        Ok(read) => {
            if read.nul {
                parts.extensions.insert(NulInBody);
            }
            Ok(Arrived {
                request: Request::from_parts(parts, read.body),
                whole: read.whole,
            })
        }
        Err(Unread::BudgetSpent) => Err(ApiError::Unavailable(
            "server busy: too many request bodies arriving".into(),
        )),
        Err(Unread::Broken(error)) => Err(ApiError::BadRequest(format!(
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

/// A body read by [`read_up_to`].
struct Read {
    body: Body,
    /// Whether it escapes a NUL character (a whole body only).
    nul: bool,
    /// Whether it was read to its end (else it is over the limit).
    whole: bool,
}

/// Why a body was not read.
enum Unread {
    /// The bodies arriving hold the whole budget.
    BudgetSpent,
    /// The stream failed (the client went away, a malformed chunk).
    Broken(axum::Error),
}

/// The body, read whole if it is at most `limit` bytes (with whether it escapes
/// a NUL); otherwise what was read followed by the rest, for the route's limit to
/// refuse. Every byte received is taken from `held`'s budget.
async fn read_up_to(body: Body, limit: usize, held: &mut ArrivingBody<'_>) -> Result<Read, Unread> {
    let mut stream = body.into_data_stream();
    let mut chunks = Chunks::None;
    let mut read = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(Unread::Broken)?;
        held.hold(chunk.len()).map_err(|_| Unread::BudgetSpent)?;
        read = read.saturating_add(chunk.len());
        chunks.push(chunk);
        if read > limit {
            let prefix = chunks.into_bytes();
            let prefix = futures::stream::once(async move { Ok::<_, axum::Error>(prefix) });
            return Ok(Read {
                body: Body::from_stream(prefix.chain(stream)),
                nul: false,
                whole: false,
            });
        }
    }
    let whole = chunks.into_bytes();
    let nul = holds_escaped_nul(&whole);
    let body = if whole.is_empty() {
        Body::empty()
    } else {
        Body::from(whole)
    };
    Ok(Read {
        body,
        nul,
        whole: true,
    })
}

/// The chunks of a body read so far.
///
/// A body that arrives as one chunk is handed on as that chunk. Later chunks are
/// copied into a buffer of the body's own: a chunk shares its allocation with the
/// connection's read buffer, and the one-byte chunks of a trickled body would
/// each keep a read buffer of several KiB alive.
enum Chunks {
    None,
    One(Bytes),
    Copied(Vec<u8>),
}

impl Chunks {
    fn push(&mut self, chunk: Bytes) {
        *self = match std::mem::replace(self, Self::None) {
            Self::None => Self::One(chunk),
            Self::One(first) => {
                let mut copied = Vec::with_capacity(first.len() + chunk.len());
                copied.extend_from_slice(&first);
                copied.extend_from_slice(&chunk);
                Self::Copied(copied)
            }
            Self::Copied(mut copied) => {
                copied.extend_from_slice(&chunk);
                Self::Copied(copied)
            }
        };
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Self::None => Bytes::new(),
            Self::One(chunk) => chunk,
            Self::Copied(copied) => Bytes::from(copied),
        }
    }
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

    fn budget(bytes: usize) -> Arriving {
        Arriving::new(bytes, Default::default(), Default::default())
    }

    async fn read_all(parts: &[&'static str], limit: usize) -> Read {
        let arriving = budget(1024);
        let mut held = arriving.start();
        match read_up_to(chunked(parts), limit, &mut held).await {
            Ok(read) => read,
            Err(_) => panic!("{parts:?} not read"),
        }
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let read = read_all(&["{\"a\":", "1}"], 16).await;
        assert!(!read.nul && read.whole);
        assert_eq!(
            read.body.size_hint().exact(),
            Some(7),
            "read into one known size"
        );
        assert_eq!(bytes_of(read.body, 16).await.unwrap(), "{\"a\":1}");
        let one = read_all(&["{}"], 16).await;
        assert!(one.whole);
        assert_eq!(bytes_of(one.body, 16).await.unwrap(), "{}");
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_handed_on_whole_for_the_route_to_refuse() {
        let over = read_all(&["12345", "67890", "abc"], 8).await;
        assert!(!over.whole);
        assert_eq!(bytes_of(over.body, 64).await.unwrap(), "1234567890abc");
        let over = read_all(&["12345", "67890", "abc"], 8).await;
        assert!(
            bytes_of(over.body, 8).await.is_err(),
            "the route's limit still applies"
        );
    }

    #[tokio::test]
    async fn a_body_past_the_servers_budget_is_not_read_and_its_bytes_are_given_back() {
        let arriving = budget(8);
        let mut other = arriving.start();
        other.hold(3).unwrap();
        let mut held = arriving.start();
        let refused = read_up_to(chunked(&["1234", "5678"]), 64, &mut held).await;
        assert!(matches!(refused, Err(Unread::BudgetSpent)));
        drop(held);
        let mut held = arriving.start();
        let read = read_up_to(chunked(&["12", "345"]), 64, &mut held).await;
        assert!(matches!(read, Ok(Read { whole: true, .. })));
    }
}
