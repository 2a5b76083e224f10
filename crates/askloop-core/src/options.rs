//! [`RunOptions`]: where a new run goes (its thread and owner).

use crate::actor::Actor;
use crate::ids::{ResourceId, RunId, ThreadId};
use crate::run::ParentRun;

/// Where a new run goes: its thread and owner. Build with [`RunOptions::new`] and the setters.
///
/// # Example
/// ```
/// use askloop_core::RunOptions;
///
/// let options = RunOptions::new().thread("t-42").resource("user-7");
/// assert_eq!(options.thread_id.as_ref().map(|id| id.as_str()), Some("t-42"));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOptions {
    /// The thread to continue; a new thread when `None`. A thread belongs to the run's
    /// resource: the same thread id in another resource is another thread. A run of an
    /// existing thread sees the messages of its ended (completed or cancelled) runs, and is
    /// refused while another of its runs is running ([`crate::AgentError::ThreadBusy`]).
    pub thread_id: Option<ThreadId>,
    /// The user or tenant owning the run: the namespace of its run id and thread id.
    pub resource_id: Option<ResourceId>,
    /// Who sends the run's input, for the audit of the waiting calls a new message to the
    /// thread resolves (a resource id, a key's name, `cli`); the actor's id, else the resource
    /// id, when `None`.
    pub by: Option<String>,
    /// Who starts the run ([`Actor`]): recorded with it (`startedBy`), so that a policy
    /// forbidding self-approval ([`crate::ApproverPolicy::self_approval`]) knows whom to refuse.
    /// When `None`, the starter is `by` (acting for the resource), else the resource itself,
    /// else unknown.
    pub actor: Option<Actor>,
    /// The new run's id, chosen by the caller (the reference framework's clients may pick it);
    /// a generated one when `None`. An id its resource already uses fails the run's insert
    /// with [`crate::StoreError::AlreadyExists`] (the stream's first item, see
    /// [`crate::AgentStream::started`]); another resource's run with that id is another run.
    ///
    /// Every id given must pass [`crate::IdKind::check`] (not blank, no control characters, at
    /// most 256 bytes), else the stream ends with [`crate::AgentError::InvalidId`].
    pub run_id: Option<RunId>,
    /// The run and call that start this run as a sub-agent's child run (set by the sub-agent's
    /// tool only).
    pub(crate) parent: Option<ParentRun>,
}

impl RunOptions {
    /// A new thread, no owner.
    pub fn new() -> Self {
        Self::default()
    }

    /// Continues this thread.
    pub fn thread(mut self, thread_id: impl Into<ThreadId>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Who sends the run's input, for the audit of the waiting calls a new message resolves,
    /// and — without [`RunOptions::actor`] — who starts the run (an actor with only this id,
    /// acting for the run's resource).
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = Some(by.into());
        self
    }

    /// Who starts the run ([`Actor`]), recorded with it and in the audit of the waiting calls
    /// its message resolves.
    pub fn actor(mut self, actor: Actor) -> Self {
        self.actor = Some(actor);
        self
    }

    /// The run's starter as recorded: the actor, else `by` acting for the resource, else the
    /// resource itself, else `None` (unknown).
    pub(crate) fn starter(&self) -> Option<Actor> {
        if let Some(actor) = &self.actor {
            return Some(actor.clone());
        }
        let id = self
            .by
            .clone()
            .or_else(|| self.resource_id.as_ref().map(ToString::to_string))?;
        let actor = Actor::new(id);
        Some(match &self.resource_id {
            Some(resource) => actor.resource(resource.clone()),
            None => actor,
        })
    }

    /// Gives the new run this id instead of a generated one.
    pub fn run_id(mut self, run_id: impl Into<RunId>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }

    /// Records this owner.
    pub fn resource(mut self, resource_id: impl Into<ResourceId>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }
}
