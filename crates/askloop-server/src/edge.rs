//! What a request must be before any route sees it: addressed to a `Host` this server answers
//! to (against DNS rebinding), and, when it changes state, sent from the server's own origin or
//! a configured CORS origin (against cross-site requests); and CORS for those origins.
//!
//! The rules, in order (the first that refuses answers):
//!
//! 1. **Host.** Every host a request names (its `Host` header, and the authority of an
//!    absolute request target or HTTP/2's `:authority`) must be one of: `localhost`,
//!    `127.0.0.1` or `[::1]` (any port, any case); the IP address the connection came in on,
//!    as a literal (so a server bound to `0.0.0.0:4111` answers `http://192.168.1.5:4111`
//!    when that is the address reached; only [`crate::Server::serve`] knows it); or an
//!    [`AllowedHost`] of the configuration (`*` allows every host). Otherwise 421
//!    `host_not_allowed`. A request naming no host at all (HTTP/1.0, or a router driven in
//!    process) passes: a browser always sends one, and DNS rebinding needs a browser.
//! 2. **Origin.** A request whose method changes state (anything but GET, HEAD, OPTIONS and
//!    TRACE) and that carries an `Origin` header is refused with 403 `cross_origin` unless that
//!    origin is the server's own (same host and port as the request's `Host`; the scheme is not
//!    compared, so a TLS proxy in front changes nothing) or a configured [`CorsOrigin`].
//!    `Origin: null` is never accepted. Requests without `Origin` (curl, the CLI, server-side
//!    clients) pass: a browser sends one with every cross-origin request that may change state.
//! 3. **CORS** (only with configured origins): preflights from a [`CorsOrigin`] are answered
//!    (methods GET and POST; request headers `authorization`, `x-api-key`, `content-type`,
//!    `user-agent`, which the AI SDK's transport may set; cached 10 minutes) and its responses
//!    carry `access-control-allow-origin` (exposing `x-vercel-ai-ui-message-stream`). No
//!    credentials: keys travel in headers, never cookies. Other origins get no CORS header, so
//!    browsers keep the responses from their pages.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::uri::{Authority, Scheme};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::error::ApiError;

/// The host names every server answers to, whatever its configuration.
const LOOPBACK_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];

/// How long browsers may cache a preflight's answer.
const PREFLIGHT_MAX_AGE: Duration = Duration::from_secs(600);

/// Why an [`AllowedHost`] or a [`CorsOrigin`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllowListError {
    /// Not a host name or address with an optional port.
    #[error(
        "invalid allowed host {given:?}: {reason}; expected HOST or HOST:PORT (e.g. askloop.example.com, 10.0.0.5:4111, [fd00::1]) or *"
    )]
    Host {
        /// The text given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Not an origin (`SCHEME://HOST[:PORT]`).
    #[error(
        "invalid CORS origin {given:?}: {reason}; expected http:// or https://, a host and an optional port, nothing after (e.g. https://app.example.com, http://localhost:3000)"
    )]
    Origin {
        /// The text given.
        given: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// A host the server answers to besides the loopback names ([`crate::ServerBuilder::allowed_hosts`],
/// `askloop serve --allowed-host`): `HOST` (any port), `HOST:PORT` (that port; a `Host` without a
/// port matches `:80` and `:443`, which browsers leave out), or `*` (every host: the `Host`
/// check is off, which only a server with keys should want).
///
/// Parsed with [`str::parse`]; names are compared without regard to case; IPv6 addresses are
/// written in brackets (`[fd00::1]:4111`).
///
/// ```
/// use askloop_server::AllowedHost;
///
/// let host: AllowedHost = "Askloop.Example.com".parse().unwrap();
/// assert_eq!(host.to_string(), "askloop.example.com");
/// assert!("https://askloop.example.com".parse::<AllowedHost>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost(HostPattern);

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Any,
    Host { host: String, port: Option<u16> },
}

impl FromStr for AllowedHost {
    type Err = AllowListError;

    /// # Errors
    /// [`AllowListError::Host`] for anything but `HOST`, `HOST:PORT` or `*`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| AllowListError::Host {
            given: text.to_owned(),
            reason,
        };
        let trimmed = text.trim();
        if trimmed == "*" {
            return Ok(Self(HostPattern::Any));
        }
        if trimmed.is_empty() {
            return Err(invalid("it is empty"));
        }
        if trimmed.contains("://") || trimmed.contains('/') {
            return Err(invalid("a host has no scheme and no path"));
        }
        let (host, port) = split_authority(trimmed).ok_or_else(|| invalid("it is not a host"))?;
        Ok(Self(HostPattern::Host { host, port }))
    }
}

impl fmt::Display for AllowedHost {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            HostPattern::Any => formatter.write_str("*"),
            HostPattern::Host { host, port: None } => formatter.write_str(host),
            HostPattern::Host {
                host,
                port: Some(port),
            } => write!(formatter, "{host}:{port}"),
        }
    }
}

impl AllowedHost {
    /// Whether a request's host (lowercase) and port match.
    fn matches(&self, host: &str, port: Option<u16>) -> bool {
        match &self.0 {
            HostPattern::Any => true,
            HostPattern::Host {
                host: allowed,
                port: allowed_port,
            } => {
                allowed == host
                    && match (allowed_port, port) {
                        (None, _) => true,
                        (Some(allowed), Some(port)) => *allowed == port,
                        (Some(allowed), None) => *allowed == 80 || *allowed == 443,
                    }
            }
        }
    }
}

/// An origin whose pages may call the server from the browser ([`crate::ServerBuilder::cors_origins`],
/// `askloop serve --cors-origin`): `http://` or `https://`, a host, an optional port, nothing
/// after (a single trailing `/` is dropped). Its requests get CORS headers, and may change state.
///
/// ```
/// use askloop_server::CorsOrigin;
///
/// let origin: CorsOrigin = "HTTPS://App.Example.com:443/".parse().unwrap();
/// assert_eq!(origin.to_string(), "https://app.example.com");
/// assert!("https://app.example.com/chat".parse::<CorsOrigin>().is_err());
/// assert!("*".parse::<CorsOrigin>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorsOrigin {
    https: bool,
    host: String,
    /// The port, the scheme's default filled in.
    port: u16,
}

impl FromStr for CorsOrigin {
    type Err = AllowListError;

    /// # Errors
    /// [`AllowListError::Origin`] for anything but `http(s)://HOST[:PORT]`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| AllowListError::Origin {
            given: text.to_owned(),
            reason,
        };
        let trimmed = text.trim();
        let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
        if trimmed == "*" || trimmed == "null" {
            return Err(invalid("name each origin"));
        }
        parse_origin(trimmed).map_err(invalid)
    }
}

impl fmt::Display for CorsOrigin {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(formatter, "{scheme}://{}", self.host)?;
        if self.port != default_port(self.https) {
            write!(formatter, ":{}", self.port)?;
        }
        Ok(())
    }
}

fn default_port(https: bool) -> u16 {
    if https { 443 } else { 80 }
}

/// An origin as a browser serializes it (`scheme://host[:port]`), or why it is not one.
fn parse_origin(text: &str) -> Result<CorsOrigin, &'static str> {
    let uri: Uri = text.parse().map_err(|_| "it is not an origin")?;
    let https = match uri.scheme() {
        Some(scheme) if *scheme == Scheme::HTTPS => true,
        Some(scheme) if *scheme == Scheme::HTTP => false,
        Some(_) => return Err("the scheme must be http or https"),
        None => return Err("it has no scheme"),
    };
    if uri
        .path_and_query()
        .is_some_and(|path| path.as_str() != "/")
        || text.ends_with('/')
    {
        return Err("an origin has no path or query");
    }
    let authority = uri.authority().ok_or("it has no host")?;
    let (host, port) = split_authority(authority.as_str()).ok_or("it has no valid host")?;
    Ok(CorsOrigin {
        https,
        host,
        port: port.unwrap_or(default_port(https)),
    })
}

/// The host and port of an authority (`HOST`, `HOST:PORT`, `[IPV6]`, `[IPV6]:PORT`): the host
/// in lowercase (an IPv6 address in brackets, in its canonical form), the port as written.
/// `None` for anything else (user info, an empty or non-numeric port, other characters).
fn split_authority(text: &str) -> Option<(String, Option<u16>)> {
    let port_of = |digits: &str| {
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return None;
        }
        digits.parse::<u16>().ok()
    };
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(port_of(after.strip_prefix(':')?)?),
        };
        return Some((format!("[{ip}]"), port));
    }
    let (host, port) = match text.rsplit_once(':') {
        Some((host, digits)) => (host, Some(port_of(digits)?)),
        None => (text, None),
    };
    let name_byte = |byte: u8| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-' | b'_');
    if host.is_empty() || !host.bytes().all(name_byte) {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

/// The address a connection came in on, put in each of its requests by
/// [`crate::Server::serve`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnectionAddrs {
    /// The local end of the connection: the server's address as this client reached it.
    pub(crate) local: SocketAddr,
}

/// The Host and Origin rules of one server.
#[derive(Clone, Debug, Default)]
pub(crate) struct Edge {
    allowed_hosts: Vec<AllowedHost>,
    cors_origins: Vec<CorsOrigin>,
}

impl Edge {
    pub(crate) fn new(allowed_hosts: Vec<AllowedHost>, cors_origins: Vec<CorsOrigin>) -> Self {
        Self {
            allowed_hosts,
            cors_origins,
        }
    }

    /// Whether the server answers to this host (`Host` header or URI authority).
    fn host_allowed(&self, authority: &str, local: Option<IpAddr>) -> bool {
        let Some((host, port)) = split_authority(authority) else {
            return false;
        };
        if LOOPBACK_NAMES.contains(&host.as_str()) {
            return true;
        }
        if local.is_some() && ip_of_host(&host) == local.map(|ip| ip.to_canonical()) {
            return true;
        }
        self.allowed_hosts
            .iter()
            .any(|allowed| allowed.matches(&host, port))
    }

    /// Whether a request from `origin` to `request_host` may change state.
    fn origin_allowed(&self, origin: &HeaderValue, request_host: Option<&str>) -> bool {
        let Some(origin) = origin
            .to_str()
            .ok()
            .and_then(|text| parse_origin(text).ok())
        else {
            return false;
        };
        if self.cors_origins.contains(&origin) {
            return true;
        }
        let Some((host, port)) = request_host.and_then(split_authority) else {
            return false;
        };
        origin.host == host && origin.port == port.unwrap_or(default_port(origin.https))
    }

    /// The CORS layer of the configured origins; `None` without any.
    pub(crate) fn cors_layer(&self) -> Option<CorsLayer> {
        if self.cors_origins.is_empty() {
            return None;
        }
        let origins = Arc::new(self.cors_origins.clone());
        Some(
            CorsLayer::new()
                .allow_origin(AllowOrigin::predicate(move |origin, _| {
                    origin
                        .to_str()
                        .ok()
                        .and_then(|text| parse_origin(text).ok())
                        .is_some_and(|origin| origins.contains(&origin))
                }))
                .allow_methods([Method::GET, Method::POST])
                .allow_headers([
                    header::AUTHORIZATION,
                    header::CONTENT_TYPE,
                    HeaderName::from_static("x-api-key"),
                    header::USER_AGENT,
                ])
                .expose_headers([HeaderName::from_static(crate::ui_stream::STREAM_HEADER.0)])
                .max_age(PREFLIGHT_MAX_AGE),
        )
    }
}

/// The IP address a host names, if it is a literal (IPv4-mapped IPv6 as IPv4).
fn ip_of_host(host: &str) -> Option<IpAddr> {
    let literal = host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .unwrap_or(host);
    literal.parse::<IpAddr>().ok().map(|ip| ip.to_canonical())
}

/// Whether a request with this method may change state (RFC 9110's safe methods do not).
fn changes_state(method: &Method) -> bool {
    !matches!(method.as_str(), "GET" | "HEAD" | "OPTIONS" | "TRACE")
}

/// The middleware of the Host and Origin rules (see the module docs).
pub(crate) async fn guard(State(edge): State<Arc<Edge>>, request: Request, next: Next) -> Response {
    let local = request
        .extensions()
        .get::<ConnectionAddrs>()
        .map(|addrs| addrs.local.ip());
    let host_header = request.headers().get(header::HOST);
    let host_text = host_header.and_then(|value| value.to_str().ok());
    let hosts_allowed = request
        .uri()
        .authority()
        .is_none_or(|authority| edge.host_allowed(authority.as_str(), local))
        && match host_header {
            None => true,
            Some(_) => host_text.is_some_and(|host| edge.host_allowed(host, local)),
        };
    if !hosts_allowed {
        tracing::debug!(host = ?host_header, "request for a host this server does not answer to");
        return ApiError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "host_not_allowed",
            "this server does not answer to the host this request names (a protection against \
             DNS rebinding); it answers to localhost, 127.0.0.1, [::1], the address it is \
             reached at and the hosts it is configured with (askloop serve --allowed-host HOST)",
        )
        .into_response();
    }
    if changes_state(request.method())
        && let Some(origin) = request.headers().get(header::ORIGIN)
    {
        let request_host = host_text.or_else(|| request.uri().authority().map(Authority::as_str));
        if !edge.origin_allowed(origin, request_host) {
            tracing::debug!(?origin, "cross-origin request refused");
            return ApiError::new(
                StatusCode::FORBIDDEN,
                "cross_origin",
                "a page of another origin may not change anything here: the request's Origin \
                 is neither this server's nor one of its CORS origins (askloop serve \
                 --cors-origin ORIGIN)",
            )
            .into_response();
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_parse_and_match() {
        let edge = Edge::new(
            vec![
                "Askloop.Example".parse().unwrap(),
                "10.0.0.5:4111".parse().unwrap(),
                "[fd00::1]".parse().unwrap(),
                "proxy.example:443".parse().unwrap(),
            ],
            Vec::new(),
        );
        for allowed in [
            "localhost",
            "LOCALHOST:1",
            "127.0.0.1:4111",
            "[::1]:80",
            "askloop.example:8443",
            "10.0.0.5:4111",
            "[FD00::1]:9",
            "proxy.example",
            "proxy.example:443",
        ] {
            assert!(edge.host_allowed(allowed, None), "{allowed}");
        }
        for refused in [
            "evil.example",
            "10.0.0.5:4112",
            "10.0.0.5",
            "proxy.example:8443",
            "user@localhost",
            "localhost:",
            "",
            "127.0.0.2",
            "localhost.",
        ] {
            assert!(!edge.host_allowed(refused, None), "{refused}");
        }
        // The address the connection came in on, as a literal (IPv4-mapped too).
        let local: IpAddr = "::ffff:192.168.1.5".parse().unwrap();
        assert!(edge.host_allowed("192.168.1.5:4111", Some(local)));
        assert!(!edge.host_allowed("192.168.1.6:4111", Some(local)));
        let any = Edge::new(vec!["*".parse().unwrap()], Vec::new());
        assert!(any.host_allowed("anything.example:1", None));
        for bad in [
            "", "http://x", "x/y", "a b", "user@x", "x:port", "x:+1", "[::1",
        ] {
            assert!(bad.parse::<AllowedHost>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn origins_parse_and_match() {
        let edge = Edge::new(Vec::new(), vec!["http://localhost:3000/".parse().unwrap()]);
        let value = |text: &'static str| HeaderValue::from_static(text);
        assert!(edge.origin_allowed(&value("http://localhost:3000"), Some("localhost:4111")));
        assert!(edge.origin_allowed(&value("http://LOCALHOST:4111"), Some("localhost:4111")));
        assert!(edge.origin_allowed(&value("https://app.example"), Some("app.example")));
        assert!(edge.origin_allowed(&value("https://app.example"), Some("app.example:443")));
        for refused in [
            "http://localhost:3001",
            "null",
            "https://evil.example",
            "http://localhost",
            "",
        ] {
            assert!(
                !edge.origin_allowed(&value(refused), Some("localhost:4111")),
                "{refused}"
            );
        }
        assert!(!edge.origin_allowed(&value("http://localhost:4111"), None));
        for bad in [
            "localhost:3000",
            "ftp://x",
            "https://x/path",
            "https://x?q",
            "*",
            "null",
            "https://",
        ] {
            assert!(bad.parse::<CorsOrigin>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "http://[::1]:3000"
                .parse::<CorsOrigin>()
                .unwrap()
                .to_string(),
            "http://[::1]:3000"
        );
    }
}
