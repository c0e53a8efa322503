//! Connecting a node to NATS from the URL list its configuration holds.

use async_nats::ServerAddr;

use crate::error::{GatewayError, Result};

/// The servers of `urls`, a comma-separated list (`nats://a:4222,nats://b:4222`):
/// a node given every server of a NATS cluster fails over between them.
fn servers(urls: &str) -> std::result::Result<Vec<ServerAddr>, String> {
    let servers = urls
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(|url| {
            url.parse::<ServerAddr>()
                .map_err(|e| format!("`{url}`: {e}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if servers.is_empty() {
        return Err("no server URL".into());
    }
    Ok(servers)
}

/// Connects to the servers of `urls`; `setting` names where they came from in
/// the error.
pub(super) async fn connect(urls: &str, setting: &str) -> Result<async_nats::Client> {
    let servers = servers(urls).map_err(|e| GatewayError::Config(format!("{setting}: {e}")))?;
    async_nats::connect(servers)
        .await
        .map_err(|e| GatewayError::Config(format!("{setting}: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_comma_separated_list_names_every_server() {
        let servers = servers("nats://127.0.0.1:4222, nats://127.0.0.1:4223,").unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[1].port(), 4223);
    }

    #[test]
    fn a_bad_or_empty_list_says_which_url() {
        assert!(servers("nats://a:x").unwrap_err().contains("`nats://a:x`"));
        assert_eq!(servers(" , ").unwrap_err(), "no server URL");
    }
}
