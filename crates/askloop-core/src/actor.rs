//! [`Actor`]: who acts on a run — starts it, answers, approves or declines one of its calls —
//! as the front end that received the action vouches for it: an id (an API key's label,
//! `cli:USER`, `link:<id>`, `web`), the resource it acts for, the roles it holds, and the entry
//! point it came through.

use serde::{Deserialize, Serialize};

use crate::ids::ResourceId;

/// Who acts, as a front end identified them. The loop records it in the audit of every decision
/// ([`crate::AuditRecord`]: `by` is its id, with its resource, roles and route) and as the
/// starter of a run ([`crate::RunOptions::actor`]), and checks it against the agent's
/// [`crate::ApproverPolicy`] before a decision changes anything.
///
/// The loop trusts what it is given: authenticating the person is the front end's business (the
/// server builds the actor from the request's API key, the CLI from the local user and its
/// configuration, an answer link from the link).
///
/// JSON (stored with a run as `startedBy`; camelCase, absent fields omitted):
/// `{"id": "ops-key", "resource": "tenant-a", "roles": ["ops"], "route": "POST /api/agents/{agentId}/approve-tool-call"}`.
///
/// ```
/// use askloop_core::Actor;
///
/// let actor = Actor::new("link:7f3a")
///     .resource("tenant-a")
///     .roles(["ops"])
///     .route("link");
/// assert!(actor.holds("ops"));
/// assert!(!actor.holds("admin"));
/// assert_eq!(serde_json::to_value(&actor)?["roles"][0], "ops");
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Actor {
    /// Who: an API key's label (or `key-` and the first 8 hex digits of its hash), `cli:USER`,
    /// `link:<id>`, `web` (an open server's page), a resource id, or any name a library caller
    /// chooses. Distinct approvers of a quorum are distinct ids.
    pub id: String,
    /// The resource (tenant) the actor acts for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<ResourceId>,
    /// The roles the actor holds (an approver policy's `roles` names them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<String>,
    /// The entry point the action came through, for the audit: e.g.
    /// `POST /api/agents/{agentId}/approve-tool-call`, `cli approve`, `link`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
}

impl Actor {
    /// An actor with only an id: no resource, no roles, no route.
    pub fn new(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            resource: None,
            roles: Vec::new(),
            route: None,
        }
    }

    /// The actor, acting for `resource`.
    #[must_use]
    pub fn resource(mut self, resource: impl Into<ResourceId>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// The actor, holding these roles (replacing any given before; blank names and repeats
    /// are dropped).
    #[must_use]
    pub fn roles<I, S>(mut self, roles: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.roles.clear();
        for role in roles {
            let role = role.into().trim().to_owned();
            if !role.is_empty() && !self.roles.contains(&role) {
                self.roles.push(role);
            }
        }
        self
    }

    /// The actor, acting through `route`.
    #[must_use]
    pub fn route(mut self, route: impl Into<String>) -> Self {
        self.route = Some(route.into());
        self
    }

    /// Whether the actor holds `role`.
    pub fn holds(&self, role: &str) -> bool {
        self.roles.iter().any(|held| held == role)
    }

    /// Whether this actor is the party that started a run `starter` started: the same id, or
    /// — when the starter was known only by its resource (its id is that resource id) — an
    /// actor acting for that resource.
    pub(crate) fn is_party_of(&self, starter: &Actor) -> bool {
        if self.id == starter.id {
            return true;
        }
        let starter_is_its_resource = starter
            .resource
            .as_ref()
            .is_some_and(|resource| resource.as_str() == starter.id);
        starter_is_its_resource && self.resource.is_some() && self.resource == starter.resource
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_drop_blanks_and_repeats() {
        let actor = Actor::new("a").roles(["ops", " ops ", "", "admin"]);
        assert_eq!(actor.roles, ["ops", "admin"]);
    }

    #[test]
    fn the_starting_party_is_its_id_or_its_resource_when_known_by_it_alone() {
        let key = Actor::new("alice-key").resource("t");
        assert!(key.is_party_of(&Actor::new("alice-key")));
        assert!(!key.is_party_of(&Actor::new("bob-key").resource("t")));
        // A run started on behalf of the resource as a whole.
        assert!(key.is_party_of(&Actor::new("t").resource("t")));
        assert!(!Actor::new("x").is_party_of(&Actor::new("t").resource("t")));
    }

    #[test]
    fn json_omits_what_is_absent() {
        let json = serde_json::to_value(Actor::new("cli:ann")).unwrap();
        assert_eq!(json, serde_json::json!({"id": "cli:ann"}));
        let back: Actor = serde_json::from_value(json).unwrap();
        assert_eq!(back, Actor::new("cli:ann"));
    }
}
