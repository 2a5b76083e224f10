//! Answer links: a URL that answers one waiting call of one run without an API key. A store
//! keeps each link as the SHA-256 of its token ([`LinkHash`]; the token itself is never
//! stored), bound to one call ([`AnswerLink::run`], [`AnswerLink::tool_call_id`]), with an
//! expiry, and marks it used or revoked; [`AnswerLinks`] is what a store offers for them
//! ([`crate::RunStore::answer_links`]).
//!
//! The life of a link: a front end mints a token, stores its hash ([`AnswerLinks::create_link`]);
//! the person opening the link is shown the call while the link is live
//! ([`AnswerLink::is_live`]); submitting an answer first takes the link
//! ([`AnswerLinks::use_link`]: a conditional update, so of two racing submits one gets it), then
//! answers the call through the ordinary claim (the call's own compare-and-swap); an answer the
//! claim refuses gives the link back ([`AnswerLinks::release_link`]), so a typo does not burn
//! it. A process that dies between the two leaves the link used and the call waiting: a link
//! never answers twice. [`AnswerLinks::prune_links`] bounds the table.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::actor::Actor;
use crate::ids::{RunKey, ToolCallId};
use crate::store::StoreError;

/// The SHA-256 of a link's token: how a store keeps and finds a link.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkHash(pub [u8; 32]);

impl LinkHash {
    /// The hash as 64 lowercase hexadecimal digits (how the SQL stores keep it).
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The hash written as [`LinkHash::to_hex`] writes it; `None` for anything else.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 || !text.is_ascii() {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (index, byte) in bytes.iter_mut().enumerate() {
            let pair = text.get(index * 2..index * 2 + 2)?;
            *byte = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(Self(bytes))
    }
}

impl fmt::Debug for LinkHash {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "LinkHash({})", self.to_hex())
    }
}

/// Identifies a stored link: a number the store gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u64);

impl fmt::Display for LinkId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{}", self.0)
    }
}

/// A link to store ([`AnswerLinks::create_link`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewAnswerLink {
    /// The SHA-256 of the token.
    pub hash: LinkHash,
    /// The run (its exact key: the link's tenant is the run's resource).
    pub run: RunKey,
    /// The call it answers.
    pub tool_call_id: ToolCallId,
    /// The role the link acts with, if it was issued for one (kept, not interpreted by stores).
    pub role: Option<String>,
    /// Who issued the link, if known (kept, not interpreted by stores): an answer through the
    /// link acts as this party under the approver policy, with the link's role only.
    pub issuer: Option<Actor>,
    /// When it was made, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// When it stops working, ms since the Unix epoch (live while `now < expires_at_ms`).
    pub expires_at_ms: u64,
}

impl NewAnswerLink {
    /// A link of hash `hash` to call `tool_call_id` of `run`, made at `created_at_ms`, live
    /// until `expires_at_ms`, without a role or an issuer.
    pub fn new(
        hash: LinkHash,
        run: RunKey,
        tool_call_id: ToolCallId,
        created_at_ms: u64,
        expires_at_ms: u64,
    ) -> Self {
        Self {
            hash,
            run,
            tool_call_id,
            role: None,
            issuer: None,
            created_at_ms,
            expires_at_ms,
        }
    }

    /// The role the link acts with.
    #[must_use]
    pub fn role(mut self, role: Option<String>) -> Self {
        self.role = role;
        self
    }

    /// Who issued the link.
    #[must_use]
    pub fn issuer(mut self, issuer: Option<Actor>) -> Self {
        self.issuer = issuer;
        self
    }
}

/// A stored link, as [`AnswerLinks`] returns it (never its token).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AnswerLink {
    /// The link.
    pub id: LinkId,
    /// The run it answers a call of.
    pub run: RunKey,
    /// The call.
    pub tool_call_id: ToolCallId,
    /// The role it acts with, if any.
    pub role: Option<String>,
    /// Who issued it, if known (`None` for links stored before issuers were kept).
    pub issuer: Option<Actor>,
    /// When it was made, ms since the Unix epoch.
    pub created_at_ms: u64,
    /// When it stops working, ms since the Unix epoch.
    pub expires_at_ms: u64,
    /// When it was used (taken by a submit that was not given back), if it was.
    pub used_at_ms: Option<u64>,
    /// When it was revoked, if it was.
    pub revoked_at_ms: Option<u64>,
}

impl AnswerLink {
    /// Link `id` to call `tool_call_id` of `run`, made at `created_at_ms`, live until
    /// `expires_at_ms`, without a role or an issuer, neither used nor revoked (set the fields).
    pub fn new(
        id: LinkId,
        run: RunKey,
        tool_call_id: ToolCallId,
        created_at_ms: u64,
        expires_at_ms: u64,
    ) -> Self {
        Self {
            id,
            run,
            tool_call_id,
            role: None,
            issuer: None,
            created_at_ms,
            expires_at_ms,
            used_at_ms: None,
            revoked_at_ms: None,
        }
    }

    /// The stored form of `link` with id `id`, neither used nor revoked.
    pub fn of(id: LinkId, link: &NewAnswerLink) -> Self {
        let mut stored = Self::new(
            id,
            link.run.clone(),
            link.tool_call_id.clone(),
            link.created_at_ms,
            link.expires_at_ms,
        );
        stored.role = link.role.clone();
        stored.issuer = link.issuer.clone();
        stored
    }

    /// Whether the link works at `now_ms`: not used, not revoked, not expired.
    pub fn is_live(&self, now_ms: u64) -> bool {
        self.used_at_ms.is_none() && self.revoked_at_ms.is_none() && now_ms < self.expires_at_ms
    }
}

/// What a store offers for answer links ([`crate::RunStore::answer_links`]).
///
/// # Contract
/// - A link is found by the hash of its token, which is unique in the store; every other
///   query names the link's run by its exact [`RunKey`] (tenant and id) in the same statement.
/// - [`AnswerLinks::use_link`] is a conditional update: it takes a live link and marks it used
///   in one step, so of any number of racing uses, across processes, at most one gets it.
/// - [`AnswerLinks::release_link`] gives a use back only to the one that took it (the link
///   is still used at that time), never resurrects a revoked or expired link.
/// - Every method either fully happens or changes nothing.
#[async_trait]
pub trait AnswerLinks: Send + Sync {
    /// Stores `link` unless a link with its hash exists, and returns the stored link (the one
    /// that existed, unchanged, when the hash was known: storing the same token twice stores
    /// it once).
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn create_link(&self, link: &NewAnswerLink) -> Result<AnswerLink, StoreError>;

    /// The link with this hash, live or not; `None` when no link has it.
    ///
    /// # Errors
    /// [`StoreError::Backend`].
    async fn find_link(&self, hash: &LinkHash) -> Result<Option<AnswerLink>, StoreError>;

    /// Takes the link with this hash if it is live at `now_ms` ([`AnswerLink::is_live`]):
    /// marks it used at `now_ms` and returns it; `None` (nothing changed) when no live link
    /// has this hash.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn use_link(
        &self,
        hash: &LinkHash,
        now_ms: u64,
    ) -> Result<Option<AnswerLink>, StoreError>;

    /// Gives back the use of link `id` taken at `used_at_ms` (its answer was refused): the
    /// link is live again if it is still used at that time and not revoked; returns whether
    /// it was given back.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn release_link(&self, id: LinkId, used_at_ms: u64) -> Result<bool, StoreError>;

    /// Revokes, at `now_ms`, every link of call `tool_call_id` of `run` not revoked yet
    /// (expired and used ones too: a use in flight whose answer is then refused does not give
    /// its link back); returns how many.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn revoke_links(
        &self,
        run: &RunKey,
        tool_call_id: &ToolCallId,
        now_ms: u64,
    ) -> Result<u64, StoreError>;

    /// Deletes up to `limit` links that expired, were used or were revoked before
    /// `older_than_ms` (ms since the Unix epoch), oldest id first; returns how many. The
    /// bounded retention of the table: the server's sweep calls it each round.
    ///
    /// # Errors
    /// [`StoreError::ReadOnly`]; [`StoreError::Backend`].
    async fn prune_links(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError>;
}

/// Answer links in process memory: what [`crate::store::MemoryStore`] keeps them in.
#[derive(Debug, Default)]
pub(crate) struct MemoryLinks {
    inner: Mutex<LinkTable>,
}

#[derive(Debug, Default)]
struct LinkTable {
    last_id: u64,
    by_id: BTreeMap<LinkId, AnswerLink>,
    by_hash: BTreeMap<LinkHash, LinkId>,
}

impl MemoryLinks {
    fn lock(&self) -> std::sync::MutexGuard<'_, LinkTable> {
        // Every method checks before it mutates: a poisoned lock holds a whole table.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[async_trait]
impl AnswerLinks for MemoryLinks {
    async fn create_link(&self, link: &NewAnswerLink) -> Result<AnswerLink, StoreError> {
        let mut table = self.lock();
        if let Some(existing) = table.by_hash.get(&link.hash).copied()
            && let Some(stored) = table.by_id.get(&existing)
        {
            return Ok(stored.clone());
        }
        table.last_id += 1;
        let id = LinkId(table.last_id);
        let stored = AnswerLink::of(id, link);
        table.by_hash.insert(link.hash, id);
        table.by_id.insert(id, stored.clone());
        Ok(stored)
    }

    async fn find_link(&self, hash: &LinkHash) -> Result<Option<AnswerLink>, StoreError> {
        let table = self.lock();
        Ok(table
            .by_hash
            .get(hash)
            .and_then(|id| table.by_id.get(id))
            .cloned())
    }

    async fn use_link(
        &self,
        hash: &LinkHash,
        now_ms: u64,
    ) -> Result<Option<AnswerLink>, StoreError> {
        let mut table = self.lock();
        let Some(id) = table.by_hash.get(hash).copied() else {
            return Ok(None);
        };
        Ok(table
            .by_id
            .get_mut(&id)
            .filter(|link| link.is_live(now_ms))
            .map(|link| {
                link.used_at_ms = Some(now_ms);
                link.clone()
            }))
    }

    async fn release_link(&self, id: LinkId, used_at_ms: u64) -> Result<bool, StoreError> {
        let mut table = self.lock();
        Ok(table
            .by_id
            .get_mut(&id)
            .filter(|link| link.used_at_ms == Some(used_at_ms) && link.revoked_at_ms.is_none())
            .map(|link| link.used_at_ms = None)
            .is_some())
    }

    async fn revoke_links(
        &self,
        run: &RunKey,
        tool_call_id: &ToolCallId,
        now_ms: u64,
    ) -> Result<u64, StoreError> {
        let mut table = self.lock();
        let mut revoked = 0;
        for link in table.by_id.values_mut() {
            if &link.run == run
                && &link.tool_call_id == tool_call_id
                && link.revoked_at_ms.is_none()
            {
                link.revoked_at_ms = Some(now_ms);
                revoked += 1;
            }
        }
        Ok(revoked)
    }

    async fn prune_links(&self, older_than_ms: u64, limit: usize) -> Result<u64, StoreError> {
        let mut table = self.lock();
        let before = |at: Option<u64>| at.is_some_and(|at| at < older_than_ms);
        let doomed: Vec<LinkId> = table
            .by_id
            .values()
            .filter(|link| {
                link.expires_at_ms < older_than_ms
                    || before(link.used_at_ms)
                    || before(link.revoked_at_ms)
            })
            .map(|link| link.id)
            .take(limit)
            .collect();
        table.by_hash.retain(|_, id| !doomed.contains(id));
        for id in &doomed {
            table.by_id.remove(id);
        }
        Ok(doomed.len() as u64)
    }
}
