//! Credentials for a remote agent (`endpoint.auth`): a bearer token, an API key
//! in a header, or OAuth2 client credentials. Each secret is given as it is, by
//! environment variable (`<name>_env`) or by file (`<name>_file`, read at every
//! use, so a renewed Secret applies at once); none is ever logged or shown.
//!
//! ```toml
//! auth = { type = "bearer", token_file = "/var/run/secrets/b/token" }
//! auth = { type = "api_key", header = "X-API-Key", key_env = "B_KEY" }
//! auth = { type = "oauth2_client_credentials", token_url = "https://idp/token",
//!          client_id = "a", client_secret_file = "/var/run/secrets/b/secret",
//!          scopes = ["agents"], audience = "b" }
//! ```

use std::path::Path;
use std::time::Duration;

use awaken_actors::JsonValue;
use awaken_actors::contract::RemoteAuth;
use awaken_actors::delegation::RemoteError;
use dashmap::DashMap;
use reqwest::header::{AUTHORIZATION, HeaderName, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

use crate::secret::{Secret, read_secret_file};

/// An access token is taken as expired this long before the server says, so a
/// request never goes out with one that expires on the way.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);
/// The lifetime assumed for a token whose answer gives none.
const DEFAULT_TOKEN_LIFETIME: Duration = Duration::from_secs(300);

/// How requests to one remote agent are authorized.
#[derive(Clone, PartialEq, Eq)]
pub(super) enum Credentials {
    /// One header, sent as it is (a bearer token, an API key).
    Header { name: HeaderName, value: Secret },
    /// A bearer token from an OAuth2 token endpoint.
    OAuth2(OAuthClient),
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Header { name, .. } => write!(f, "Header({name}: <redacted>)"),
            Self::OAuth2(client) => write!(
                f,
                "OAuth2({} as {}, <redacted>)",
                client.token_url, client.client_id
            ),
        }
    }
}

/// An OAuth2 client of the client credentials grant.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct OAuthClient {
    token_url: String,
    client_id: String,
    client_secret: Secret,
    scopes: Vec<String>,
    audience: Option<String>,
}

impl OAuthClient {
    /// What tells this client's tokens apart in the cache.
    fn cache_key(&self) -> String {
        format!(
            "{} {} {}",
            self.token_url,
            self.client_id,
            self.scopes.join(" ")
        )
    }
}

fn config(message: impl Into<String>) -> RemoteError {
    RemoteError::Config(message.into())
}

impl Credentials {
    /// The credentials `auth` describes, its secrets read now.
    pub(super) fn of(auth: &RemoteAuth) -> Result<Self, RemoteError> {
        let params = Params(auth);
        match auth.r#type.as_str() {
            "bearer" => {
                params.only(&["token", "token_env", "token_file"])?;
                let token = params.secret("token")?;
                Ok(Self::Header {
                    name: AUTHORIZATION,
                    value: Secret::new(format!("Bearer {}", token.expose())),
                })
            }
            "api_key" => {
                params.only(&["header", "key", "key_env", "key_file"])?;
                let name = params.text("header")?.unwrap_or("X-API-Key");
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| config(format!("auth.header `{name}` is not a header name")))?;
                Ok(Self::Header {
                    name,
                    value: params.secret("key")?,
                })
            }
            "oauth2_client_credentials" => {
                params.only(&[
                    "token_url",
                    "client_id",
                    "client_secret",
                    "client_secret_env",
                    "client_secret_file",
                    "scopes",
                    "audience",
                ])?;
                let token_url = params
                    .text("token_url")?
                    .ok_or_else(|| config("oauth2 auth needs `token_url`"))?;
                let parsed = reqwest::Url::parse(token_url)
                    .map_err(|e| config(format!("auth.token_url `{token_url}`: {e}")))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(config(format!(
                        "auth.token_url `{token_url}` is not an http(s) URL"
                    )));
                }
                let scopes = match auth.params.get("scopes") {
                    None => Vec::new(),
                    Some(JsonValue::Array(scopes)) => scopes
                        .iter()
                        .map(|scope| scope.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| config("auth.scopes must be a list of strings"))?,
                    Some(_) => return Err(config("auth.scopes must be a list of strings")),
                };
                Ok(Self::OAuth2(OAuthClient {
                    token_url: token_url.to_owned(),
                    client_id: params
                        .text("client_id")?
                        .ok_or_else(|| config("oauth2 auth needs `client_id`"))?
                        .to_owned(),
                    client_secret: params.secret("client_secret")?,
                    scopes,
                    audience: params.text("audience")?.map(str::to_owned),
                }))
            }
            other => Err(config(format!(
                "auth type `{other}` is not supported; use `bearer`, `api_key` or \
                 `oauth2_client_credentials`"
            ))),
        }
    }
}

/// The fields of one `auth` table.
struct Params<'a>(&'a RemoteAuth);

impl Params<'_> {
    /// Refuses a field not in `known`.
    fn only(&self, known: &[&str]) -> Result<(), RemoteError> {
        match self
            .0
            .params
            .keys()
            .find(|key| !known.contains(&key.as_str()))
        {
            Some(unknown) => Err(config(format!(
                "{} auth knows {}, not `{unknown}`",
                self.0.r#type,
                known.join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// A text field, if present.
    fn text(&self, name: &str) -> Result<Option<&str>, RemoteError> {
        match self.0.params.get(name) {
            None => Ok(None),
            Some(JsonValue::String(text)) if !text.is_empty() => Ok(Some(text)),
            Some(_) => Err(config(format!("auth.{name} must be a non-empty string"))),
        }
    }

    /// Secret `name`: exactly one of `name`, `name_env` and `name_file`.
    fn secret(&self, name: &str) -> Result<Secret, RemoteError> {
        let (env, file) = (format!("{name}_env"), format!("{name}_file"));
        let secret = match (self.text(name)?, self.text(&env)?, self.text(&file)?) {
            (Some(value), None, None) => Secret::new(value),
            (None, Some(variable), None) => std::env::var(variable)
                .map(Secret::new)
                .map_err(|_| config(format!("auth.{env} names `{variable}`, which is not set")))?,
            (None, None, Some(path)) => read_secret_file(&format!("auth.{name}"), Path::new(path))
                .map_err(|e| config(e.to_string()))?,
            _ => {
                return Err(config(format!(
                    "{} auth needs exactly one of `{name}`, `{env}` and `{file}`",
                    self.0.r#type
                )));
            }
        };
        if secret.expose().trim().is_empty() {
            return Err(config(format!("auth.{name} is empty")));
        }
        Ok(secret)
    }
}

/// An access token and when it stops being used.
#[derive(Clone)]
struct Token {
    bearer: Secret,
    until: Instant,
}

/// The answer of a token endpoint (RFC 6749 §5.1).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// OAuth2 access tokens by client, reused until shortly before they expire.
#[derive(Default)]
pub(super) struct TokenCache {
    tokens: DashMap<String, Token>,
}

impl std::fmt::Debug for TokenCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCache")
            .field("clients", &self.tokens.len())
            .finish()
    }
}

impl TokenCache {
    /// The header that authorizes a request with `credentials`: fetching a
    /// token first when none is at hand.
    pub(super) async fn header(
        &self,
        http: &reqwest::Client,
        credentials: &Credentials,
    ) -> Result<(HeaderName, HeaderValue), RemoteError> {
        let (name, value) = match credentials {
            Credentials::Header { name, value } => (name.clone(), value.clone()),
            Credentials::OAuth2(client) => {
                let token = self.token(http, client).await?;
                (
                    AUTHORIZATION,
                    Secret::new(format!("Bearer {}", token.expose())),
                )
            }
        };
        let mut value = HeaderValue::from_str(value.expose())
            .map_err(|_| config("the credential cannot be sent in a header"))?;
        value.set_sensitive(true);
        Ok((name, value))
    }

    /// The remote agent refused the credentials: an OAuth2 token is dropped, so
    /// the next request gets a new one. Whether there is anything to retry.
    pub(super) fn refused(&self, credentials: &Credentials) -> bool {
        match credentials {
            Credentials::OAuth2(client) => self.tokens.remove(&client.cache_key()).is_some(),
            Credentials::Header { .. } => false,
        }
    }

    async fn token(
        &self,
        http: &reqwest::Client,
        client: &OAuthClient,
    ) -> Result<Secret, RemoteError> {
        let key = client.cache_key();
        if let Some(token) = self.tokens.get(&key)
            && Instant::now() < token.until
        {
            return Ok(token.bearer.clone());
        }
        let url = &client.token_url;
        let mut form = vec![("grant_type", "client_credentials".to_owned())];
        if !client.scopes.is_empty() {
            form.push(("scope", client.scopes.join(" ")));
        }
        if let Some(audience) = &client.audience {
            form.push(("audience", audience.clone()));
        }
        let response = http
            .post(url)
            .basic_auth(&client.client_id, Some(client.client_secret.expose()))
            .form(&form)
            .send()
            .await
            .map_err(|e| {
                RemoteError::Unreachable(format!("token endpoint {url}: {}", e.without_url()))
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(RemoteError::Refused(format!(
                "token endpoint {url} answered {status}: check the client id and secret"
            )));
        }
        let body = super::body::read_body(response, url).await?;
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|_| {
            RemoteError::Protocol(format!("token endpoint {url} answered no access_token"))
        })?;
        let lifetime = answer
            .expires_in
            .map_or(DEFAULT_TOKEN_LIFETIME, Duration::from_secs);
        let token = Token {
            bearer: Secret::new(answer.access_token),
            until: Instant::now() + lifetime.saturating_sub(EXPIRY_MARGIN),
        };
        self.tokens.insert(key, token.clone());
        Ok(token.bearer)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn auth(value: JsonValue) -> RemoteAuth {
        serde_json::from_value(value).unwrap()
    }

    fn refused(value: JsonValue) -> String {
        match Credentials::of(&auth(value)) {
            Err(error) => error.to_string(),
            Ok(credentials) => panic!("accepted: {credentials:?}"),
        }
    }

    #[test]
    fn each_type_reads_its_secret_inline_from_the_environment_or_from_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "from-file\n").unwrap();
        let Credentials::Header { name, value } = Credentials::of(&auth(
            json!({"type": "api_key", "header": "X-Key", "key_file": file}),
        ))
        .unwrap() else {
            panic!("a header")
        };
        assert_eq!((name.as_str(), value.expose()), ("x-key", "from-file"));

        let Credentials::Header { name, value } =
            Credentials::of(&auth(json!({"type": "bearer", "token": "t-1"}))).unwrap()
        else {
            panic!("a header")
        };
        assert_eq!((name, value.expose()), (AUTHORIZATION, "Bearer t-1"));

        let credentials = Credentials::of(&auth(json!({
            "type": "oauth2_client_credentials", "token_url": "https://idp.example/token",
            "client_id": "a", "client_secret": "s3cret", "scopes": ["x", "y"]})))
        .unwrap();
        assert!(!format!("{credentials:?}").contains("s3cret"));
    }

    #[test]
    fn bad_auth_tables_are_refused_without_showing_secrets() {
        let cases = [
            (json!({"type": "basic", "user": "u"}), "not supported"),
            (json!({"type": "bearer"}), "exactly one of `token`"),
            (
                json!({"type": "bearer", "token": "a", "token_env": "B"}),
                "exactly one",
            ),
            (
                json!({"type": "bearer", "token": "s3cret", "extra": 1}),
                "not `extra`",
            ),
            (
                json!({"type": "bearer", "token_env": "AWAKEN_TEST_UNSET_VARIABLE"}),
                "not set",
            ),
            (
                json!({"type": "bearer", "token_file": "/nonexistent/token"}),
                "auth.token_file",
            ),
            (
                json!({"type": "api_key", "header": "bad header", "key": "s3cret"}),
                "not a header name",
            ),
            (
                json!({"type": "oauth2_client_credentials", "client_id": "a", "client_secret": "s3cret"}),
                "needs `token_url`",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "ftp://x", "client_id": "a", "client_secret": "s3cret"}),
                "not an http(s) URL",
            ),
            (
                json!({"type": "oauth2_client_credentials", "token_url": "https://x", "client_id": "a", "client_secret": "s3cret", "scopes": "x"}),
                "list of strings",
            ),
        ];
        for (table, says) in cases {
            let error = refused(table.clone());
            assert!(error.contains(says), "{table}: {error}");
            assert!(!error.contains("s3cret"), "{error}");
        }
        let empty = RemoteAuth {
            r#type: "bearer".into(),
            params: BTreeMap::from([("token".to_owned(), json!(" "))]),
        };
        assert!(Credentials::of(&empty).is_err());
    }
}
