//! API keys: [`ApiKey`] (a secret's SHA-256, the resource it is bound to, the agents it may
//! use) and the lookup of a request's key.

use std::collections::{BTreeSet, HashMap};

use askloop_core::{Actor, AgentId, ResourceId};
use sha2::{Digest, Sha256};

/// A key the server accepts: the SHA-256 of its secret (the secret itself is never kept), the
/// resource id it is bound to, and optionally the agents it may use.
///
/// A request presents the secret as `Authorization: Bearer <secret>` or `X-Api-Key: <secret>`.
/// Runs it starts get its resource id; it sees and answers only runs of that resource.
///
/// ```
/// use askloop_server::ApiKey;
///
/// let secret = ApiKey::new_secret();
/// let key = ApiKey::from_secret(&secret, "tenant-a".into()).agents(vec!["assistant".into()]);
/// let same = ApiKey::from_hash(&ApiKey::hash_hex(&secret), "tenant-a".into()).unwrap();
/// assert_eq!(key.hash(), same.hash());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiKey {
    hash: [u8; 32],
    resource: ResourceId,
    agents: Option<BTreeSet<AgentId>>,
    label: Option<String>,
    roles: Vec<String>,
}

/// The ids askloop's own actors use in the audit, which no key label may take: `web` (an open
/// server's caller), `webhooks` (links the webhook deliverer issues), `sweep` and
/// `askloop-server-sweep` (expiries), `cli` (the terminal before actors had users).
pub const RESERVED_LABELS: [&str; 5] = ["web", "webhooks", "sweep", "askloop-server-sweep", "cli"];

/// Why a key, or a set of keys, was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text is not 64 hexadecimal digits (a SHA-256).
    #[error(
        "invalid key hash {given:?}; expected 64 hexadecimal digits (the SHA-256 of the secret)"
    )]
    InvalidHash {
        /// The text given.
        given: String,
    },
    /// A label the audit keeps for askloop's own actors: with a `:` (`cli:USER`, `link:ID`),
    /// or one of [`RESERVED_LABELS`]. A key so labelled could pass for them.
    #[error(
        "the key label {given:?} is reserved: labels may not contain ':' nor be one of {}",
        RESERVED_LABELS.join(", ")
    )]
    ReservedLabel {
        /// The label given.
        given: String,
    },
    /// Two keys have the same secret (the same hash), for two tenants or even for one: a
    /// secret must name exactly one key, so neither is served.
    #[error(
        "keys number {} and {} have the same secret (resources {:?} and {:?}); a secret must belong to one key",
        .first + 1, .second + 1, .first_resource.as_str(), .second_resource.as_str()
    )]
    DuplicateSecret {
        /// The position of the first of them in the list (from 0).
        first: usize,
        /// The position of the second (from 0).
        second: usize,
        /// The resource of the first.
        first_resource: ResourceId,
        /// The resource of the second.
        second_resource: ResourceId,
    },
}

impl ApiKey {
    /// The key of this secret, bound to `resource`.
    pub fn from_secret(secret: &str, resource: ResourceId) -> Self {
        Self {
            hash: digest(secret),
            resource,
            agents: None,
            label: None,
            roles: Vec::new(),
        }
    }

    /// The key whose secret has this SHA-256 (64 hex digits, either case), bound to `resource`.
    ///
    /// # Errors
    /// [`KeyError::InvalidHash`] when the text is not 64 hexadecimal digits.
    pub fn from_hash(sha256_hex: &str, resource: ResourceId) -> Result<Self, KeyError> {
        let invalid = || KeyError::InvalidHash {
            given: sha256_hex.to_owned(),
        };
        let text = sha256_hex.trim();
        if text.len() != 64 || !text.is_ascii() {
            return Err(invalid());
        }
        let mut hash = [0u8; 32];
        for (index, byte) in hash.iter_mut().enumerate() {
            let pair = text.get(index * 2..index * 2 + 2).ok_or_else(invalid)?;
            *byte = u8::from_str_radix(pair, 16).map_err(|_| invalid())?;
        }
        Ok(Self {
            hash,
            resource,
            agents: None,
            label: None,
            roles: Vec::new(),
        })
    }

    /// Restricts the key to these agents: others answer 403 and are not listed.
    #[must_use]
    pub fn agents(mut self, agents: Vec<AgentId>) -> Self {
        self.agents = Some(agents.into_iter().collect());
        self
    }

    /// Checks a label before [`ApiKey::label`]: a label with `:` (the form of `cli:USER` and
    /// `link:ID`) or one of [`RESERVED_LABELS`] would let a key's decisions pass for
    /// askloop's own actors'.
    ///
    /// # Errors
    /// [`KeyError::ReservedLabel`].
    pub fn check_label(label: &str) -> Result<(), KeyError> {
        let label = label.trim();
        if label.contains(':') || RESERVED_LABELS.contains(&label) {
            return Err(KeyError::ReservedLabel {
                given: label.to_owned(),
            });
        }
        Ok(())
    }

    /// Names the key for the audit: the id of the [`Actor`] its requests act as (who started a
    /// run, who answered, approved or declined). Without a label a key acts as its resource
    /// id, so keys of one resource are one party: give them labels to tell their holders apart
    /// (distinct approvers of a quorum, an approver who is not the run's starter).
    #[must_use]
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The roles the key holds: an agent's or a tool's approver policy
    /// ([`askloop_core::ApproverPolicy`]) lets it decide only when it holds one of the roles the
    /// policy names (403 `not_permitted` otherwise). Blank names and repeats are dropped.
    #[must_use]
    pub fn roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles = Actor::new("").roles(roles).roles;
        self
    }

    /// The key's label, if it has one.
    pub fn key_label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// The roles the key holds.
    pub fn held_roles(&self) -> &[String] {
        &self.roles
    }

    /// The id its requests act as: its label, else its resource id.
    pub fn actor_id(&self) -> &str {
        self.label.as_deref().unwrap_or(self.resource.as_str())
    }

    /// The SHA-256 of `secret`, as 64 lowercase hex digits (what configuration stores).
    pub fn hash_hex(secret: &str) -> String {
        hex(&digest(secret))
    }

    /// A new random secret: `ak_` and 64 lowercase hex digits.
    pub fn new_secret() -> String {
        let mut hasher = Sha256::new();
        hasher.update(uuid::Uuid::new_v4().as_bytes());
        hasher.update(uuid::Uuid::new_v4().as_bytes());
        hasher.update(uuid::Uuid::new_v4().as_bytes());
        format!("ak_{}", hex(&hasher.finalize()))
    }

    /// The SHA-256 of the key's secret.
    pub fn hash(&self) -> &[u8; 32] {
        &self.hash
    }

    /// The resource id the key is bound to.
    pub fn resource(&self) -> &ResourceId {
        &self.resource
    }

    /// The agents the key may use (`None`: all).
    pub fn allowed_agents(&self) -> Option<&BTreeSet<AgentId>> {
        self.agents.as_ref()
    }

    /// Checks that no two keys have the same secret (same hash): "the last one wins" would
    /// let one tenant act as another.
    ///
    /// # Errors
    /// [`KeyError::DuplicateSecret`] naming the first two keys (by position) that share one.
    ///
    /// ```
    /// use askloop_server::{ApiKey, KeyError};
    ///
    /// let keys = [
    ///     ApiKey::from_secret("s3cret", "tenant-a".into()),
    ///     ApiKey::from_secret("other", "tenant-c".into()),
    ///     ApiKey::from_secret("s3cret", "tenant-b".into()),
    /// ];
    /// assert!(matches!(
    ///     ApiKey::check_distinct(&keys),
    ///     Err(KeyError::DuplicateSecret { first: 0, second: 2, .. })
    /// ));
    /// assert!(ApiKey::check_distinct(&keys[..2]).is_ok());
    /// ```
    pub fn check_distinct(keys: &[ApiKey]) -> Result<(), KeyError> {
        let mut seen: HashMap<&[u8; 32], usize> = HashMap::with_capacity(keys.len());
        for (second, key) in keys.iter().enumerate() {
            if let Some(&first) = seen.get(&key.hash) {
                return Err(KeyError::DuplicateSecret {
                    first,
                    second,
                    first_resource: keys[first].resource.clone(),
                    second_resource: key.resource.clone(),
                });
            }
            seen.insert(&key.hash, second);
        }
        Ok(())
    }
}

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Who a request acts for: everyone (no keys configured) or one key's tenant.
#[derive(Clone, Debug)]
pub(crate) enum Caller {
    /// No keys are configured: every run and agent is visible.
    Open,
    /// A request with this key.
    Key(ApiKey),
}

impl Caller {
    /// Whether the caller may vouch for `role` (issue an answer link acting with it): a key
    /// only for a role it holds; an open server's caller for any.
    pub(crate) fn holds_role(&self, role: &str) -> bool {
        match self {
            Self::Open => true,
            Self::Key(key) => key.roles.iter().any(|held| held == role),
        }
    }

    /// The resource the caller is bound to.
    pub(crate) fn resource(&self) -> Option<&ResourceId> {
        match self {
            Self::Open => None,
            Self::Key(key) => Some(&key.resource),
        }
    }

    /// Whether the caller may use this agent.
    pub(crate) fn may_use(&self, agent_id: &AgentId) -> bool {
        match self {
            Self::Open => true,
            Self::Key(key) => key
                .agents
                .as_ref()
                .is_none_or(|agents| agents.contains(agent_id)),
        }
    }

    /// Whether the caller may see a run of this resource and agent.
    pub(crate) fn may_see(&self, resource: Option<&ResourceId>, agent_id: &AgentId) -> bool {
        match self {
            Self::Open => true,
            Self::Key(key) => resource == Some(&key.resource) && self.may_use(agent_id),
        }
    }

    /// What the audit records as who acted: the key's label, else its resource, else `web`
    /// (an open server's caller, the page's person), never nothing.
    pub(crate) fn by(&self) -> String {
        match self {
            Self::Open => "web".to_owned(),
            Self::Key(key) => key.actor_id().to_owned(),
        }
    }

    /// Who acts, for the loop's checks and audit: [`Caller::by`] as the id, the key's resource
    /// and roles (an open server's caller holds none), and `route`, the route template the
    /// request came through (`POST /api/agents/{agentId}/approve-tool-call`).
    pub(crate) fn actor(&self, route: &str) -> Actor {
        let actor = Actor::new(self.by()).route(route);
        match self {
            Self::Open => actor,
            Self::Key(key) => actor
                .resource(key.resource.clone())
                .roles(key.roles.iter().cloned()),
        }
    }
}

/// The configured keys, by hash: a lookup compares hashes, never secrets. A secret configured
/// more than once is nobody's: it is refused (401), never resolved to one of its keys.
#[derive(Debug, Default)]
pub(crate) struct KeyRing {
    /// `None`: the hash of several keys.
    by_hash: HashMap<[u8; 32], Option<ApiKey>>,
    /// The first two keys found with one secret, which [`crate::Server::serve`] refuses to
    /// serve.
    duplicate: Option<KeyError>,
}

impl KeyRing {
    pub(crate) fn new(keys: Vec<ApiKey>) -> Self {
        let duplicate = ApiKey::check_distinct(&keys).err();
        if let Some(error) = &duplicate {
            tracing::error!(%error, "API keys: a secret configured twice is refused");
        }
        let mut by_hash = HashMap::with_capacity(keys.len());
        for key in keys {
            by_hash
                .entry(key.hash)
                .and_modify(|slot: &mut Option<ApiKey>| *slot = None)
                .or_insert(Some(key));
        }
        Self { by_hash, duplicate }
    }

    pub(crate) fn is_open(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// Two keys with one secret, if any were configured.
    pub(crate) fn duplicate(&self) -> Option<&KeyError> {
        self.duplicate.as_ref()
    }

    /// The caller presenting `secret` (`None`: no such key, or a secret of several keys).
    pub(crate) fn lookup(&self, secret: &str) -> Option<Caller> {
        self.by_hash
            .get(&digest(secret))
            .cloned()
            .flatten()
            .map(Caller::Key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_hash_and_parse_back() {
        let secret = ApiKey::new_secret();
        assert!(secret.starts_with("ak_"));
        assert_eq!(secret.len(), 67);
        let hex = ApiKey::hash_hex(&secret);
        let key = ApiKey::from_hash(&hex.to_uppercase(), "r".into()).unwrap();
        assert_eq!(key, ApiKey::from_secret(&secret, "r".into()));
        for bad in ["", "zz", &"g".repeat(64), &"a".repeat(63)] {
            assert!(ApiKey::from_hash(bad, "r".into()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn labels_of_askloops_own_actors_are_refused() {
        for reserved in ["cli:ann", "link:1", "web", " webhooks ", "sweep", "cli"] {
            assert!(ApiKey::check_label(reserved).is_err(), "{reserved:?}");
        }
        assert!(ApiKey::check_label("alice").is_ok());
    }
}
