//! Extractors whose refusals use the API's error format.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use bytes::Bytes;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// A JSON object body: 415 for a content type that is not JSON, 413 above the
/// body limit, 400 for anything unreadable or not an object.
///
/// Every body the API reads is an object; serde would also build a struct from
/// an array (`[null, null]`), which no client means, so that is refused before
/// parsing. A body is parsed once by `serde_json`; only one that fails is parsed
/// again by axum's `Json`, whose message names the path of the offending field
/// (tracking that path costs every request otherwise).
#[derive(Debug, Clone)]
pub(crate) struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(request.headers()) {
            return Err(ApiError::UnsupportedMediaType(
                "expected content-type application/json".into(),
            ));
        }
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| json_rejection(&JsonRejection::from(rejection)))?;
        if bytes.trim_ascii_start().first() != Some(&b'{') {
            return Err(ApiError::BadRequest(
                "the body must be a JSON object".into(),
            ));
        }
        if let Ok(value) = serde_json::from_slice(&bytes) {
            return Ok(Self(value));
        }
        match axum::Json::<T>::from_bytes(&bytes) {
            Ok(axum::Json(value)) => Ok(Self(value)),
            Err(rejection) => Err(json_rejection(&rejection)),
        }
    }
}

/// Whether the content type is JSON: `application/json` or `application/…+json`,
/// parameters (`; charset=utf-8`) aside, in any letter case — what axum's `Json`
/// takes.
fn json_content_type(headers: &HeaderMap) -> bool {
    let Some(value) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
    else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let Some((kind, subtype)) = essence.split_once('/') else {
        return false;
    };
    kind.eq_ignore_ascii_case("application")
        && (subtype.eq_ignore_ascii_case("json")
            || subtype
                .get(subtype.len().saturating_sub(5)..)
                .is_some_and(|suffix| suffix.eq_ignore_ascii_case("+json")))
}

fn json_rejection(rejection: &JsonRejection) -> ApiError {
    let text = rejection.body_text();
    match rejection.status() {
        StatusCode::UNSUPPORTED_MEDIA_TYPE => {
            ApiError::UnsupportedMediaType("expected content-type application/json".into())
        }
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge(text),
        _ => ApiError::BadRequest(text),
    }
}

/// Query parameters: 400 when they do not parse.
#[derive(Debug, Clone)]
pub(crate) struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Self(value))
            .map_err(|rejection: QueryRejection| ApiError::BadRequest(rejection.body_text()))
    }
}

/// Path parameters (ids are validated as they deserialize): 400 when invalid.
#[derive(Debug, Clone)]
pub(crate) struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Self(value))
            .map_err(|rejection: PathRejection| ApiError::BadRequest(rejection.body_text()))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::body::Body;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    struct Item {
        name: String,
    }

    #[derive(Debug, Deserialize)]
    struct Shape {
        items: Vec<Item>,
    }

    async fn extract(content_type: Option<&str>, body: impl Into<Body>) -> Result<Shape, ApiError> {
        let mut request = Request::builder().method("POST").uri("/");
        if let Some(content_type) = content_type {
            request = request.header(header::CONTENT_TYPE, content_type);
        }
        let request = request.body(body.into()).unwrap();
        ApiJson::<Shape>::from_request(request, &())
            .await
            .map(|ApiJson(shape)| shape)
    }

    #[tokio::test]
    async fn json_bodies_parse_whatever_json_content_type_they_name() {
        let body = r#"{"items":[{"name":"a"}]}"#;
        for content_type in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            "application/vnd.api+json",
        ] {
            let shape = extract(Some(content_type), body).await.unwrap();
            assert_eq!(shape.items.len(), 1, "{content_type}");
            assert_eq!(shape.items[0].name, "a", "{content_type}");
        }
    }

    #[tokio::test]
    async fn a_bad_body_is_refused_with_the_path_of_the_bad_field() {
        for content_type in ["application/json", "application/json; charset=utf-8"] {
            let error = extract(Some(content_type), r#"{"items":[{"name":1}]}"#)
                .await
                .unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST);
            assert!(error.to_string().contains("items[0].name"), "{error}");
        }
        for bad in ["{not json", "[null]", "null", "  [{\"items\": []}]", ""] {
            let error = extract(Some("application/json"), bad).await.unwrap_err();
            assert_eq!(error.status(), StatusCode::BAD_REQUEST, "{bad:?}");
        }
        let padded = extract(Some("application/json"), " \n {\"items\": []}")
            .await
            .unwrap();
        assert!(padded.items.is_empty());
    }

    #[tokio::test]
    async fn other_content_types_and_huge_bodies_are_refused() {
        let body = r#"{"items":[]}"#;
        for content_type in [
            None,
            Some("text/plain"),
            Some("application/jsonx"),
            Some("json"),
        ] {
            let error = extract(content_type, body).await.unwrap_err();
            assert_eq!(error.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        // Beyond axum's default limit of 2 MB when no route sets another.
        let huge = format!(r#"{{"items":[{{"name":"{}"}}]}}"#, "x".repeat(3 << 20));
        let error = extract(Some("application/json"), huge).await.unwrap_err();
        assert_eq!(error.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
}
