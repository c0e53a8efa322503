//! Where push notifications may go: public addresses only, unless a host is
//! allowed by name (`server.a2a_push_allowed_hosts`).
//!
//! A push URL is chosen by any caller that can create a task, and the node then
//! POSTs to it from inside the deployment: without a check, a tenant could make
//! the node call loopback services, cloud metadata endpoints or other internal
//! hosts (server-side request forgery). Hosts are checked by address after DNS
//! resolution — when the config is created, and again by the delivery client's
//! own resolver on every connection, so a name that later resolves to an
//! internal address is refused too. Deliveries follow no redirects.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The push URL policy of one node.
#[derive(Debug, Clone, Default)]
pub(crate) struct PushTargets {
    /// Host names and literal addresses allowed whatever they resolve to.
    allowed: Arc<BTreeSet<String>>,
}

impl PushTargets {
    /// A policy allowing public addresses and `allowed_hosts`.
    pub(crate) fn new(allowed_hosts: &[String]) -> Self {
        Self {
            allowed: Arc::new(
                allowed_hosts
                    .iter()
                    .map(|host| host.trim_matches(['[', ']']).to_ascii_lowercase())
                    .collect(),
            ),
        }
    }

    fn allows_host(&self, host: &str) -> bool {
        self.allowed
            .contains(&host.trim_matches(['[', ']']).to_ascii_lowercase())
    }

    /// Refuses a URL whose host is an internal address, or resolves only to
    /// internal addresses (unless allowed by name).
    pub(crate) async fn check(&self, url: &reqwest::Url) -> Result<(), String> {
        let host = url
            .host_str()
            .ok_or_else(|| format!("url `{url}` has no host"))?;
        if self.allows_host(host) {
            return Ok(());
        }
        let bare = host.trim_matches(['[', ']']);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return if is_public(ip) {
                Ok(())
            } else {
                Err(internal(host))
            };
        }
        let port = url.port_or_known_default().unwrap_or(443);
        let addresses: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|error| format!("host `{host}` does not resolve: {error}"))?
            .collect();
        if addresses.iter().any(|address| is_public(address.ip())) {
            Ok(())
        } else {
            Err(internal(host))
        }
    }

    /// The resolver of the delivery client: a host's internal addresses are
    /// dropped (all of them kept for an allowed host).
    pub(crate) fn resolver(&self) -> Arc<dyn Resolve> {
        Arc::new(self.clone())
    }
}

impl Resolve for PushTargets {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_owned();
        let allowed = self.allows_host(&host);
        Box::pin(async move {
            let addresses: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|address| allowed || is_public(address.ip()))
                .collect();
            if addresses.is_empty() {
                return Err(internal(&host).into());
            }
            Ok(Box::new(addresses.into_iter()) as Addrs)
        })
    }
}

fn internal(host: &str) -> String {
    format!(
        "push url host `{host}` is a loopback, private or link-local address; \
         allow it by name in `server.a2a_push_allowed_hosts`"
    )
}

/// Whether `ip` is reachable on the public internet (not loopback, private,
/// link-local, shared, unique-local, multicast, unspecified or broadcast).
fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_public_v4(v4),
            None => is_public_v6(v6),
        },
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let shared = a == 100 && (64..128).contains(&b);
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || shared
        || a == 0)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    let unique_local = first & 0xfe00 == 0xfc00;
    let link_local = first & 0xffc0 == 0xfe80;
    !(ip.is_loopback() || ip.is_unspecified() || ip.is_multicast() || unique_local || link_local)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn internal_addresses_are_not_public() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
        ] {
            assert!(!is_public(internal.parse().unwrap()), "{internal}");
        }
        for public in ["93.184.216.34", "8.8.8.8", "2606:4700::1111"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[tokio::test]
    async fn urls_to_internal_hosts_are_refused_unless_allowed_by_name() {
        let strict = PushTargets::new(&[]);
        for url in [
            "http://127.0.0.1:9/hook",
            "http://[::1]:9/hook",
            "http://169.254.169.254/latest/meta-data",
            "http://localhost:9/hook",
        ] {
            let error = strict.check(&url.parse().unwrap()).await.unwrap_err();
            assert!(error.contains("a2a_push_allowed_hosts"), "{url}: {error}");
        }
        let relaxed = PushTargets::new(&["localhost".into(), "[::1]".into()]);
        for url in ["http://localhost:9/hook", "http://[::1]:9/hook"] {
            assert!(relaxed.check(&url.parse().unwrap()).await.is_ok(), "{url}");
        }
        assert!(
            strict
                .check(&"http://8.8.8.8/hook".parse().unwrap())
                .await
                .is_ok()
        );
    }
}
