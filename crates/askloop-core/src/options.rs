//! [`RunOptions`]: where a new run goes (its thread and owner).

use crate::ids::{ResourceId, RunId, ThreadId};

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
    /// The thread to continue; a new thread when `None`. A run of an existing thread sees the
    /// messages of its completed runs.
    pub thread_id: Option<ThreadId>,
    /// The user or tenant owning the run.
    pub resource_id: Option<ResourceId>,
    /// Who sends the run's input, for the audit of the waiting calls a new message to the
    /// thread resolves (a resource id, a key's name, `cli`); the resource id when `None`.
    pub by: Option<String>,
    /// The new run's id, chosen by the caller (the reference framework's clients may pick it);
    /// a generated one when `None`. An id that is taken fails the run's insert with
    /// [`crate::StoreError::AlreadyExists`] (the stream's first item): check first with
    /// [`crate::RunStore::load_run`] when the id comes from outside.
    pub run_id: Option<RunId>,
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

    /// Who sends the run's input, for the audit of the waiting calls a new message resolves.
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = Some(by.into());
        self
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
