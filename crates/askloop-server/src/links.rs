//! Answer links: a URL (`/answer/{token}`) that shows one waiting call of one run and answers
//! it once, without an API key. What the routes, the webhook deliverer and the CLI share:
//! tokens ([`LinkToken`]), the server's settings ([`LinkSettings`], [`PublicUrl`]), the check
//! that a call still waits ([`waiting_call`]) and issuing a link ([`issue_link`]).
//!
//! A token is `al_` and 64 hexadecimal digits: the SHA-256 of two version-4 UUIDs (244 random
//! bits), or, for the link of a webhook delivery, an HMAC-SHA256 keyed with the endpoint's
//! secret over the delivery (the same link for every attempt of one delivery, none stored in
//! clear). The store keeps only the token's SHA-256 ([`askloop_core::store::LinkHash`]), bound
//! to the run's exact key and the call; a link expires at the earliest of the call's deadline
//! and [`LinkSettings::max_age`] (24 h by default), is used once, and can be revoked.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use askloop_core::model::Message;
use askloop_core::store::{AnswerLink, AnswerLinks, LinkHash, NewAnswerLink, RunState, StoredRun};
use askloop_core::time::lease_now_ms;
use askloop_core::{
    Actor, PendingToolCall, ResumeError, RunStatus, RunStore, StoreError, ToolCallId,
};
use sha2::{Digest, Sha256};

/// How long a link lives at most unless configured otherwise: 24 hours.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How long a link is kept after it expired, was used or revoked, before the sweep deletes
/// it: 7 days (a deleted link is "unknown", which answers exactly as a dead one).
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);

/// Links deleted per sweep, at most.
pub(crate) const PRUNE_BATCH: usize = 1000;

/// The prefix of every token.
const TOKEN_PREFIX: &str = "al_";

/// A link's token: `al_` and 64 lowercase hexadecimal digits. Only its SHA-256 is stored; the
/// token itself exists in the URL given out. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct LinkToken(String);

impl fmt::Debug for LinkToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("LinkToken(…)")
    }
}

impl LinkToken {
    /// A new random token (the SHA-256 of two version-4 UUIDs: 244 random bits).
    pub fn generate() -> Self {
        let mut hasher = Sha256::new();
        hasher.update(uuid::Uuid::new_v4().as_bytes());
        hasher.update(uuid::Uuid::new_v4().as_bytes());
        Self::of_bytes(&hasher.finalize())
    }

    /// The token derived from `key` (a secret) and `label` by HMAC-SHA256: the same inputs
    /// give the same token, and nobody without `key` can compute it.
    pub fn derive(key: &[u8], label: &str) -> Self {
        Self::of_bytes(&hmac_sha256(key, label.as_bytes()))
    }

    fn of_bytes(bytes: &[u8]) -> Self {
        let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        Self(format!("{TOKEN_PREFIX}{hex}"))
    }

    /// The token of a URL's last segment, if it has a token's form (`None` otherwise: such a
    /// link is "unknown").
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix(TOKEN_PREFIX)?;
        let valid = hex.len() == 64
            && hex
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
        valid.then(|| Self(text.to_owned()))
    }

    /// The token's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The SHA-256 of the token: what a store keeps and looks links up by.
    pub fn hash(&self) -> LinkHash {
        LinkHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The link's path: `/answer/{token}`.
    pub fn path(&self) -> String {
        format!("/answer/{}", self.0)
    }
}

/// A request's URI as logs show it: an answer link's path (`/answer/{token}`) without its
/// token, any other URI as it is.
pub(crate) fn shown_uri(uri: &axum::http::Uri) -> std::borrow::Cow<'_, str> {
    let path = uri.path();
    if path.starts_with("/answer/") {
        std::borrow::Cow::Borrowed("/answer/…")
    } else {
        std::borrow::Cow::Owned(uri.to_string())
    }
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    use hmac::{Hmac, Mac};
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        // Not a fallible path: HMAC takes a key of any length (RFC 2104, section 2).
        unreachable!("HMAC accepts a key of any length")
    };
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// Why a [`PublicUrl`] was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid public URL {given:?}: {reason}; expected http:// or https://, a host and an optional port (e.g. https://askloop.example.com)"
)]
pub struct PublicUrlError {
    /// The text given.
    pub given: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The URL people reach the server at (`[server] public_url`, `askloop serve --public-url`):
/// answer links are this URL followed by `/answer/{token}`. An absolute `http` or `https` URL,
/// optionally with a path (a proxy's prefix), without query or fragment; a trailing `/` is
/// dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl(String);

impl FromStr for PublicUrl {
    type Err = PublicUrlError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| PublicUrlError {
            given: text.to_owned(),
            reason,
        };
        let url = reqwest::Url::parse(text.trim()).map_err(|_| invalid("not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("it has no host"));
        }
        if url.path() != "/" {
            // The link page loads its script and style from the server's root.
            return Err(invalid(
                "it must be the server's root (no path): askloop serves links at /answer/…",
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(invalid("it must have no query or fragment"));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("it must carry no user or password"));
        }
        Ok(Self(url.as_str().trim_end_matches('/').to_owned()))
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&self.0)
    }
}

impl PublicUrl {
    /// The URL of the link of `token`.
    pub fn link(&self, token: &LinkToken) -> String {
        format!("{}{}", self.0, token.path())
    }
}

/// How a server issues answer links: the URL they start with, and how long they live at most.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkSettings {
    /// The public URL; `None` (the default): links made through the API start with the
    /// request's own `Host` (`http://HOST`), and webhook payloads carry no link
    /// (`answerUrl: null`).
    pub public_url: Option<PublicUrl>,
    /// How long a link lives at most ([`DEFAULT_MAX_AGE`]); a call's deadline ends it sooner.
    pub max_age: Duration,
}

impl Default for LinkSettings {
    fn default() -> Self {
        Self {
            public_url: None,
            max_age: DEFAULT_MAX_AGE,
        }
    }
}

impl LinkSettings {
    /// No public URL, links of at most 24 h.
    pub fn new() -> Self {
        Self::default()
    }

    /// Links start with `url`.
    #[must_use]
    pub fn public_url(mut self, url: PublicUrl) -> Self {
        self.public_url = Some(url);
        self
    }

    /// Links live at most `max_age` (at least one second).
    #[must_use]
    pub fn max_age(mut self, max_age: Duration) -> Self {
        self.max_age = max_age.max(Duration::from_secs(1));
        self
    }
}

/// Why a link was not issued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The call does not wait (unknown, answered, expired, or the run is not suspended): the
    /// refusal a resume of it would get.
    #[error(transparent)]
    Refused(ResumeError),
    /// A role that is not 1 to 64 letters, digits, `-`, `_`, `.` or `:`.
    #[error("role {given:?} is not 1 to 64 letters, digits, '-', '_', '.' or ':'")]
    InvalidRole {
        /// The role given.
        given: String,
    },
    /// The store keeps no answer links ([`RunStore::answer_links`] is `None`).
    #[error("this store keeps no answer links")]
    Unsupported,
    /// The store failed.
    #[error("the store failed")]
    Store(#[source] StoreError),
}

/// A link just issued: its token (only here in clear) and the stored link.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct IssuedLink {
    /// The token: the URL is the public URL followed by [`LinkToken::path`].
    pub token: LinkToken,
    /// The link as stored.
    pub link: AnswerLink,
}

/// What a link is asked for with: how long it should live (at most the settings' maximum), the
/// role it acts with, and who issues it (the party an answer through it acts as).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LinkRequest {
    /// How long the link should live; `None`: the maximum. Longer is cut to the maximum.
    pub expires_in: Option<Duration>,
    /// The role the link acts with (kept with the link for the approval policy).
    pub role: Option<String>,
    /// Who issues the link (kept with the link: an answer through it acts as this party under
    /// the approval policy, with the link's role only); `None`: unknown, the link then acts as
    /// `link:<id>`.
    pub issuer: Option<Actor>,
}

impl LinkRequest {
    /// A link of the maximum age, without a role or an issuer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A link that lives `expires_in` (at most the maximum).
    #[must_use]
    pub fn expires_in(mut self, expires_in: Duration) -> Self {
        self.expires_in = Some(expires_in);
        self
    }

    /// A link that acts with `role`.
    #[must_use]
    pub fn role(mut self, role: Option<String>) -> Self {
        self.role = role;
        self
    }

    /// A link issued by `issuer`.
    #[must_use]
    pub fn issuer(mut self, issuer: Actor) -> Self {
        self.issuer = Some(issuer);
        self
    }
}

/// The store's answer links, or [`LinkError::Unsupported`].
///
/// # Errors
/// [`LinkError::Unsupported`].
pub fn links_of(store: &dyn RunStore) -> Result<&dyn AnswerLinks, LinkError> {
    store.answer_links().ok_or(LinkError::Unsupported)
}

/// The call `id` of `state` if it waits at `now_ms` (a question or an approval, its deadline
/// not passed); otherwise the refusal an answer to it would get: [`ResumeError::Expired`],
/// [`ResumeError::AlreadyAnswered`], [`ResumeError::NotSuspended`],
/// [`ResumeError::UnknownToolCall`].
///
/// # Errors
/// As above.
pub fn waiting_call(
    state: &RunState,
    id: &ToolCallId,
    now_ms: u64,
) -> Result<PendingToolCall, ResumeError> {
    let run_id = state.run_id().clone();
    let pending = state.pending_tool_calls();
    if let Some(call) = pending.iter().find(|call| &call.tool_call_id == id)
        && state.status() == RunStatus::Suspended
    {
        return match call.expires_at_ms {
            Some(deadline) if deadline <= now_ms => Err(ResumeError::Expired {
                run_id,
                tool_call_id: id.clone(),
                expired_at_ms: deadline,
            }),
            _ => Ok(call.clone()),
        };
    }
    if let Some(at) = state.expired_at_ms(id) {
        return Err(ResumeError::Expired {
            run_id,
            tool_call_id: id.clone(),
            expired_at_ms: at,
        });
    }
    let answered = state.messages().iter().any(|message| match message {
        Message::Tool { results } => results.iter().any(|result| &result.tool_call_id == id),
        _ => false,
    });
    if answered && state.status() != RunStatus::Cancelled {
        return Err(ResumeError::AlreadyAnswered {
            run_id,
            tool_call_id: id.clone(),
            same_answer: false,
        });
    }
    if state.status() != RunStatus::Suspended {
        return Err(ResumeError::NotSuspended {
            run_id,
            status: state.status(),
        });
    }
    Err(ResumeError::UnknownToolCall {
        run_id,
        tool_call_id: id.clone(),
        pending: pending.into_iter().map(|call| call.tool_call_id).collect(),
    })
}

/// Checks a role's form (1 to 64 ASCII letters, digits, `-`, `_`, `.`, `:`).
///
/// # Errors
/// [`LinkError::InvalidRole`].
pub fn check_role(role: &str) -> Result<(), LinkError> {
    let valid = (1..=64).contains(&role.len())
        && role
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:".contains(&byte));
    if valid {
        Ok(())
    } else {
        Err(LinkError::InvalidRole {
            given: role.to_owned(),
        })
    }
}

/// When a link made at `now_ms` for `call` expires: after `request.expires_in` (at most
/// `max_age`; the maximum without one), and never after the call's deadline.
pub fn expiry(
    call: &PendingToolCall,
    request: &LinkRequest,
    max_age: Duration,
    now_ms: u64,
) -> u64 {
    let age = request
        .expires_in
        .map_or(max_age, |asked| asked.min(max_age));
    let until = now_ms.saturating_add(u64::try_from(age.as_millis()).unwrap_or(u64::MAX));
    call.expires_at_ms
        .map_or(until, |deadline| until.min(deadline))
}

/// Issues a link to call `tool_call_id` of `stored` (a run the caller may see), with token
/// `token` ([`LinkToken::generate`] for a new link): checks that the call waits
/// ([`waiting_call`]) and the role, stores the link's hash bound to the run's key and the call,
/// expiring as [`expiry`] says. Storing a token already stored returns that link unchanged.
///
/// # Errors
/// [`LinkError::Refused`] when the call does not wait; [`LinkError::InvalidRole`];
/// [`LinkError::Unsupported`]; [`LinkError::Store`].
pub async fn issue_link(
    store: &dyn RunStore,
    stored: &StoredRun,
    tool_call_id: &ToolCallId,
    request: &LinkRequest,
    max_age: Duration,
    token: LinkToken,
) -> Result<IssuedLink, LinkError> {
    let links = links_of(store)?;
    if let Some(role) = &request.role {
        check_role(role)?;
    }
    let now = lease_now_ms();
    let call = waiting_call(&stored.state, tool_call_id, now).map_err(LinkError::Refused)?;
    let new = NewAnswerLink::new(
        token.hash(),
        stored.state.key(),
        tool_call_id.clone(),
        now,
        expiry(&call, request, max_age, now),
    )
    .role(request.role.clone())
    .issuer(request.issuer.clone());
    let link = links.create_link(&new).await.map_err(LinkError::Store)?;
    Ok(IssuedLink { token, link })
}

/// A live link and the call it answers, which still waits.
#[derive(Debug)]
pub(crate) struct OpenLink {
    /// The link's run as loaded.
    pub(crate) stored: StoredRun,
    /// The call, waiting.
    pub(crate) call: PendingToolCall,
}

/// The link of `token` (a URL's last segment) if it works now: a token of the right form,
/// stored, live, its run found and its call still waiting (not answered through another
/// route, not expired). `None` for every other case alike — unknown, used, revoked, expired,
/// answered elsewhere — so that nobody learns which.
///
/// # Errors
/// [`LinkError::Unsupported`]; [`LinkError::Store`] (a store failure, not a dead link).
pub(crate) async fn open_link(
    store: &dyn RunStore,
    token: &str,
) -> Result<Option<OpenLink>, LinkError> {
    let links = links_of(store)?;
    let Some(token) = LinkToken::parse(token) else {
        return Ok(None);
    };
    let now = lease_now_ms();
    let Some(link) = links
        .find_link(&token.hash())
        .await
        .map_err(LinkError::Store)?
        .filter(|link| link.is_live(now))
    else {
        return Ok(None);
    };
    let stored = match store.load_run(&link.run).await {
        Ok(stored) => stored,
        Err(StoreError::NotFound { .. }) => return Ok(None),
        Err(error) => return Err(LinkError::Store(error)),
    };
    Ok(waiting_call(&stored.state, &link.tool_call_id, now)
        .ok()
        .map(|call| OpenLink { stored, call }))
}

/// Deletes the links expired, used or revoked more than [`RETENTION`] ago, 1000 at most; how
/// many (0 for a store without links).
///
/// # Errors
/// The store's.
pub async fn prune_links(store: &dyn RunStore) -> Result<u64, StoreError> {
    let Some(links) = store.answer_links() else {
        return Ok(0);
    };
    let retention = u64::try_from(RETENTION.as_millis()).unwrap_or(u64::MAX);
    links
        .prune_links(lease_now_ms().saturating_sub(retention), PRUNE_BATCH)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_parse_back() {
        let token = LinkToken::generate();
        assert_eq!(token.as_str().len(), 67);
        assert_ne!(token, LinkToken::generate());
        assert_eq!(LinkToken::parse(token.as_str()), Some(token.clone()));
        assert_eq!(
            token.hash(),
            LinkToken::parse(token.as_str()).unwrap().hash()
        );
        assert!(!format!("{token:?}").contains(&token.as_str()[3..]));
        for bad in [
            "",
            "al_",
            "al_zz",
            &format!("al_{}", "A".repeat(64)),
            &token.as_str()[1..],
        ] {
            assert_eq!(LinkToken::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn derived_tokens_are_the_hmac_of_the_label() {
        // RFC 4231, test case 2.
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        let hex: String = mac.iter().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let key = [0xaa_u8; 131];
        let long = hmac_sha256(
            &key,
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(long[..4], [0x60, 0xe4, 0x31, 0x59]);
        assert_eq!(LinkToken::derive(b"k", "a"), LinkToken::derive(b"k", "a"));
        assert_ne!(LinkToken::derive(b"k", "a"), LinkToken::derive(b"k", "b"));
    }

    #[test]
    fn public_urls_are_absolute_http_without_query() {
        let url: PublicUrl = "https://askloop.example.com/".parse().unwrap();
        assert_eq!(url.to_string(), "https://askloop.example.com");
        for bad in [
            "https://askloop.example.com/base/",
            "askloop.example.com",
            "ftp://x",
            "https://x/?a=1",
            "https://u:p@x",
        ] {
            assert!(bad.parse::<PublicUrl>().is_err(), "{bad}");
        }
    }
}
