//! An A2A endpoint's settings, read and checked from a `RemoteEndpoint`:
//!
//! ```json
//! {"backend": "a2a", "base_url": "https://analyst.example.com/v1/a2a",
//!  "target": "analyst", "auth": {"type": "bearer", "token": "..."},
//!  "timeout_ms": 300000,
//!  "options": {"poll_interval_ms": 1000, "stream": true, "card_url": "https://..."}}
//! ```

use std::time::Duration;

use awaken_actors::contract::RemoteEndpoint;
use awaken_actors::delegation::RemoteError;
use reqwest::Url;

use awaken_actors::contract::TraceContext;

use super::auth::Credentials;

/// Default time between two reads of a polled task.
const DEFAULT_POLL_INTERVAL_MS: u64 = 1_000;
/// Shortest poll interval accepted.
const MIN_POLL_INTERVAL_MS: u64 = 10;
/// The `options` an A2A endpoint understands.
const KNOWN_OPTIONS: [&str; 3] = ["poll_interval_ms", "stream", "card_url"];

/// How to reach one remote A2A agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Settings {
    /// The endpoint's `base_url`, without a trailing slash.
    pub base: String,
    /// The agent's tenant on the server (`target`), if any.
    pub tenant: Option<String>,
    /// How requests are authorized (`endpoint.auth`).
    pub credentials: Option<Credentials>,
    /// Time between two reads of a polled task.
    pub poll_interval: Duration,
    /// `stream` as configured: `None` leaves it to the agent card.
    pub stream: Option<bool>,
    /// Where the agent card is, if not at the usual places.
    pub card_url: Option<String>,
    /// The `traceparent` of the call these settings serve, sent on its requests.
    pub trace: Option<TraceContext>,
}

fn config(message: impl Into<String>) -> RemoteError {
    RemoteError::Config(message.into())
}

/// `value` as an http(s) URL.
fn http_url(what: &str, value: &str) -> Result<Url, RemoteError> {
    let url = Url::parse(value).map_err(|e| config(format!("{what} `{value}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(config(format!("{what} `{value}` is not an http(s) URL")));
    }
    Ok(url)
}

impl Settings {
    /// The settings `endpoint` gives, or what is wrong with them.
    pub(super) fn of(endpoint: &RemoteEndpoint) -> Result<Self, RemoteError> {
        http_url("base_url", &endpoint.base_url)?;
        let tenant = match endpoint.target.as_deref() {
            Some(target) if target.is_empty() || target.contains(['/', '?', '#']) => {
                return Err(config(format!(
                    "target `{target}` must be one non-empty path segment"
                )));
            }
            target => target.map(str::to_owned),
        };
        let mut settings = Self {
            base: endpoint.base_url.trim_end_matches('/').to_owned(),
            tenant,
            credentials: endpoint.auth.as_ref().map(Credentials::of).transpose()?,
            poll_interval: Duration::from_millis(DEFAULT_POLL_INTERVAL_MS),
            stream: None,
            card_url: None,
            trace: None,
        };
        for (key, value) in &endpoint.options {
            match key.as_str() {
                "poll_interval_ms" => {
                    let ms = value
                        .as_u64()
                        .filter(|ms| *ms >= MIN_POLL_INTERVAL_MS)
                        .ok_or_else(|| {
                            config(format!(
                                "options.poll_interval_ms must be an integer of at least {MIN_POLL_INTERVAL_MS}"
                            ))
                        })?;
                    settings.poll_interval = Duration::from_millis(ms);
                }
                "stream" => {
                    settings.stream = Some(
                        value
                            .as_bool()
                            .ok_or_else(|| config("options.stream must be true or false"))?,
                    );
                }
                "card_url" => {
                    let url = value
                        .as_str()
                        .ok_or_else(|| config("options.card_url must be a string"))?;
                    http_url("options.card_url", url)?;
                    settings.card_url = Some(url.to_owned());
                }
                other => {
                    return Err(config(format!(
                        "unknown option `{other}`; an a2a endpoint knows {}",
                        KNOWN_OPTIONS.join(", ")
                    )));
                }
            }
        }
        Ok(settings)
    }

    /// `{base_url}[/{target}]`: where the agent's operations are.
    pub(super) fn operations(&self) -> String {
        match &self.tenant {
            Some(tenant) => format!("{}/{tenant}", self.base),
            None => self.base.clone(),
        }
    }

    /// Where to look for the agent card, in order: `options.card_url` alone, or the
    /// tenant's card, the interface's, and the server's well-known card. Only the
    /// first names the agent for sure: a card found further on must list the target
    /// as a tenant of its HTTP+JSON interface.
    pub(super) fn card_urls(&self) -> Vec<String> {
        const WELL_KNOWN: &str = ".well-known/agent-card.json";
        if let Some(url) = &self.card_url {
            return vec![url.clone()];
        }
        let mut urls = vec![format!("{}/{WELL_KNOWN}", self.operations())];
        urls.push(format!("{}/{WELL_KNOWN}", self.base));
        if let Ok(mut origin) = Url::parse(&self.base) {
            origin.set_path(WELL_KNOWN);
            origin.set_query(None);
            urls.push(origin.to_string());
        }
        urls.dedup();
        urls
    }
}

#[cfg(test)]
mod tests {
    use awaken_actors::JsonValue;
    use awaken_actors::contract::RemoteAuth;
    use serde_json::json;

    use super::*;

    fn endpoint(options: JsonValue) -> RemoteEndpoint {
        let mut endpoint = RemoteEndpoint::new("a2a", "http://b.example:8080/v1/a2a/");
        endpoint.target = Some("analyst".to_owned());
        endpoint.options = serde_json::from_value(options).unwrap_or_default();
        endpoint
    }

    #[test]
    fn reads_target_options_and_bearer_auth() {
        let mut endpoint = endpoint(json!({"poll_interval_ms": 50, "stream": false}));
        endpoint.auth = Some(RemoteAuth::bearer("s3cret"));
        let Ok(settings) = Settings::of(&endpoint) else {
            panic!("valid settings refused");
        };
        assert_eq!(
            settings.operations(),
            "http://b.example:8080/v1/a2a/analyst"
        );
        assert!(
            matches!(&settings.credentials, Some(Credentials::Header { value, .. }) if value.expose() == "Bearer s3cret")
        );
        assert!(!format!("{settings:?}").contains("s3cret"));
        assert_eq!(settings.poll_interval, Duration::from_millis(50));
        assert_eq!(settings.stream, Some(false));
        assert_eq!(
            settings.card_urls(),
            vec![
                "http://b.example:8080/v1/a2a/analyst/.well-known/agent-card.json",
                "http://b.example:8080/v1/a2a/.well-known/agent-card.json",
                "http://b.example:8080/.well-known/agent-card.json",
            ]
        );
    }

    #[test]
    fn refuses_what_it_cannot_use() {
        let refused = |endpoint: RemoteEndpoint, needle: &str| match Settings::of(&endpoint) {
            Err(RemoteError::Config(message)) => {
                assert!(message.contains(needle), "{message} lacks {needle}");
            }
            other => panic!("expected a config error naming {needle}, got {other:?}"),
        };
        refused(endpoint(json!({"poll_ms": 5})), "unknown option `poll_ms`");
        refused(endpoint(json!({"poll_interval_ms": 1})), "at least 10");
        refused(endpoint(json!({"stream": "yes"})), "options.stream");
        refused(
            endpoint(json!({"card_url": "ftp://x"})),
            "not an http(s) URL",
        );
        let mut bad_base = endpoint(json!({}));
        bad_base.base_url = "not a url".to_owned();
        refused(bad_base, "base_url");
        let mut bad_target = endpoint(json!({}));
        bad_target.target = Some("a/b".to_owned());
        refused(bad_target, "one non-empty path segment");
        let mut basic = endpoint(json!({}));
        basic.auth = Some(RemoteAuth {
            r#type: "basic".to_owned(),
            params: Default::default(),
        });
        refused(basic, "`basic` is not supported");
        let mut no_token = endpoint(json!({}));
        no_token.auth = Some(RemoteAuth {
            r#type: "bearer".to_owned(),
            params: Default::default(),
        });
        refused(no_token, "exactly one of `token`");
        let mut unset = endpoint(json!({}));
        let mut auth = RemoteAuth::bearer("x");
        auth.params.clear();
        auth.params.insert(
            "token_env".to_owned(),
            json!("AWAKEN_TEST_TOKEN_THAT_IS_NEVER_SET"),
        );
        unset.auth = Some(auth);
        refused(unset, "not set");
    }
}
