//! Which `Host` a request may name (`[server] allowed_hosts`). A web page
//! whose name an attacker points at 127.0.0.1 (DNS rebinding) reaches a
//! server on loopback from the victim's browser, with the page's own name
//! as `Host`: checking `Host` is what keeps the page out. So a server bound
//! to a loopback address answers, by default, only for the loopback names
//! and addresses (`localhost`, `127.0.0.1`, `[::1]`, on any port), as
//! development servers do; one bound elsewhere answers for any host unless
//! it is told which. A request for another host is answered 421 and does
//! nothing.

use std::net::SocketAddr;

use axum::extract::Request;
use axum::http::header;

/// The hosts a server answers for when bound to loopback and not told.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// The hosts requests may name.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// Any host (an entry `*`, or a server not bound to loopback and not
    /// told).
    any: bool,
    /// Each entry's host (lower case, IPv6 in brackets) and port, if it
    /// names one.
    entries: Vec<(String, Option<u16>)>,
}

impl AllowedHosts {
    /// `configured` (`[server] allowed_hosts`, each entry checked by
    /// [`check_entry`]), or the default for a server bound to `bind`.
    pub fn new(configured: Option<&[String]>, bind: SocketAddr) -> Self {
        let entries: Vec<&str> = match configured {
            Some(entries) => entries.iter().map(String::as_str).collect(),
            None if bind.ip().is_loopback() => LOOPBACK_HOSTS.to_vec(),
            None => vec!["*"],
        };
        Self {
            any: entries.contains(&"*"),
            entries: entries
                .into_iter()
                .filter(|entry| *entry != "*")
                .filter_map(split)
                .collect(),
        }
    }

    /// Whether `request` names a host it may (its `Host`, or an HTTP/2
    /// request's `:authority`); the host it names otherwise. A request that
    /// names none (HTTP/1.0) may.
    pub fn check(&self, request: &Request) -> Result<(), String> {
        if self.any {
            return Ok(());
        }
        let named = request.uri().authority().map(|a| a.as_str()).or_else(|| {
            request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
        });
        let Some(named) = named else {
            return Ok(());
        };
        let allowed = split(named).is_some_and(|(host, port)| {
            self.entries.iter().any(|(allowed, allowed_port)| {
                *allowed == host && allowed_port.is_none_or(|allowed| Some(allowed) == port)
            })
        });
        if allowed {
            Ok(())
        } else {
            Err(named.to_owned())
        }
    }
}

/// `authority` (`host`, `host:port`, `[v6]` or `[v6]:port`) as a host, in
/// lower case without a trailing dot, and a port; `None` when it is neither.
fn split(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            after => Some(after.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(port) => Some(port.parse::<u16>().ok()?),
        None => None,
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty() && !host.contains(['/', '@', ' '])).then_some((host, port))
}

/// What is wrong with an entry of `[server] allowed_hosts`, if anything.
pub fn check_entry(entry: &str) -> Result<(), &'static str> {
    if entry == "*" {
        return Ok(());
    }
    if entry.contains("://") {
        return Err("is a URL: give the host alone, or host:port");
    }
    split(entry)
        .map(drop)
        .ok_or("is not a host, host:port, [v6] or [v6]:port")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: &str) -> Request {
        Request::builder()
            .uri("/v1/runs")
            .header(header::HOST, host)
            .body(axum::body::Body::empty())
            .unwrap()
    }

    #[test]
    fn a_loopback_server_answers_for_the_loopback_names_only() {
        let hosts = AllowedHosts::new(None, "127.0.0.1:8080".parse().unwrap());
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:9",
            "[::1]:80",
            "LOCALHOST.",
        ] {
            assert!(hosts.check(&request(host)).is_ok(), "{host}");
        }
        for host in [
            "attacker.example:8080",
            "127.0.0.2",
            "localhost.attacker.example",
            "[::2]",
        ] {
            assert!(hosts.check(&request(host)).is_err(), "{host}");
        }
        let anywhere = AllowedHosts::new(None, "0.0.0.0:8080".parse().unwrap());
        assert!(anywhere.check(&request("runs.example.com")).is_ok());
    }

    #[test]
    fn an_entry_with_a_port_allows_that_port_alone() {
        let entries = vec!["runs.example.com:443".to_owned(), "internal".to_owned()];
        let hosts = AllowedHosts::new(Some(&entries), "0.0.0.0:8080".parse().unwrap());
        assert!(hosts.check(&request("runs.example.com:443")).is_ok());
        assert!(hosts.check(&request("runs.example.com:8443")).is_err());
        assert!(hosts.check(&request("runs.example.com")).is_err());
        assert!(hosts.check(&request("internal:1234")).is_ok());
        assert!(check_entry("http://a.example").is_err());
        assert!(check_entry("a.example:99999").is_err());
        assert!(check_entry("[::1]:8080").is_ok());
    }
}
