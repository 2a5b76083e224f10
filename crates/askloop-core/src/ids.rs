//! Identifier newtypes: runs, threads, resources, agents and tool calls; the keys that name a
//! run or a thread within its resource ([`RunKey`], [`ThreadKey`], [`RunRef`]); and the rule
//! every run, thread and resource id from outside must follow ([`IdKind::check`]).
//!
//! Every id is a string on the wire and in the store. Newtypes keep them from being mixed up:
//! a [`ToolCallId`] can never be passed where a [`RunId`] is expected.
//!
//! **Resources are namespaces.** A run is named by its resource and its id ([`RunKey`]), a
//! thread likewise ([`ThreadKey`]): the same run id or thread id used by two resources is two
//! runs or two threads, and `None` is the namespace of runs without a resource.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! string_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps an existing id string as-is.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// Identifies one run: one call of `stream`, with every suspension and resume that follows it.
    ///
    /// New run ids are UUID v7 strings (time-ordered), e.g. `0193a4c2-…`.
    RunId
);
string_id!(
    /// Identifies one tool call inside a run, as chosen by the model (`call_abc…` for OpenAI,
    /// `toolu_…` for Anthropic, whatever a scripted model says).
    ToolCallId
);
string_id!(
    /// Identifies a thread: a conversation whose later runs see the messages of the earlier ones.
    ThreadId
);
string_id!(
    /// Identifies the user or tenant that owns a run and its thread.
    ResourceId
);
string_id!(
    /// Identifies an agent definition (`"assistant"` for the default agent).
    AgentId
);
string_id!(
    /// Identifies who drives a run: one per [`crate::Agent`] value (a UUID v4 string made by
    /// `AgentBuilder::build`), recorded with the run's [`crate::store::Lease`].
    LeaseHolder
);

impl LeaseHolder {
    /// A fresh holder id (UUID v4).
    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

impl RunId {
    /// A fresh, time-ordered run id (UUID v7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

impl ThreadId {
    /// A fresh thread id (UUID v7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }
}

/// The longest run, thread or resource id accepted, in bytes (UTF-8).
pub const MAX_ID_BYTES: usize = 256;

/// Which id a check is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdKind {
    /// A run id.
    Run,
    /// A thread id.
    Thread,
    /// A resource id.
    Resource,
}

impl IdKind {
    /// `"run"`, `"thread"` or `"resource"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Thread => "thread",
            Self::Resource => "resource",
        }
    }

    /// Checks an id of this kind from outside: not blank ([`crate::is_blank`]), no control
    /// characters, at most [`MAX_ID_BYTES`] bytes. Every entry point of the core checks the
    /// ids it is given with it, so a stored id always passes (and `""` is never a resource id:
    /// stores may use it for "no resource").
    ///
    /// ```
    /// use askloop_core::{IdKind, IdProblem};
    ///
    /// assert!(IdKind::Thread.check("t-42").is_ok());
    /// let error = IdKind::Resource.check(" \u{200b}").unwrap_err();
    /// assert_eq!(error.problem, IdProblem::Blank);
    /// assert_eq!(error.to_string(), "the resource id must not be blank");
    /// ```
    ///
    /// # Errors
    /// [`InvalidId`] naming this kind and the [`IdProblem`].
    pub fn check(self, id: &str) -> Result<(), InvalidId> {
        match IdProblem::of(id) {
            None => Ok(()),
            Some(problem) => Err(InvalidId {
                kind: self,
                problem,
            }),
        }
    }
}

impl fmt::Display for IdKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.as_str())
    }
}

/// What is wrong with an id ([`IdProblem::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdProblem {
    /// Empty, or only whitespace, control or invisible characters.
    Blank,
    /// A control character (NUL, newline, ESC, …) or an invisible one (zero-width space,
    /// bidirectional override, soft hyphen, …: Unicode's format characters) inside, which would
    /// make two different ids print alike.
    ControlCharacter,
    /// Longer than [`MAX_ID_BYTES`].
    TooLong {
        /// Its length in bytes.
        bytes: usize,
    },
}

impl IdProblem {
    /// What is wrong with `id` as a run, thread or resource id, if anything (the one rule of
    /// [`IdKind::check`], for front ends that name the field themselves).
    pub fn of(id: &str) -> Option<Self> {
        if crate::text::is_blank(id) {
            Some(Self::Blank)
        } else if id
            .chars()
            .any(|character| character.is_control() || crate::text::is_invisible(character))
        {
            Some(Self::ControlCharacter)
        } else if id.len() > MAX_ID_BYTES {
            Some(Self::TooLong { bytes: id.len() })
        } else {
            None
        }
    }
}

impl fmt::Display for IdProblem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Blank => formatter.write_str("must not be blank"),
            Self::ControlCharacter => {
                formatter.write_str("must not contain control or invisible characters")
            }
            Self::TooLong { bytes } => {
                write!(
                    formatter,
                    "is {bytes} bytes; at most {MAX_ID_BYTES} are accepted"
                )
            }
        }
    }
}

/// An id refused by [`IdKind::check`]. The id itself is not repeated (it may be long, or hold
/// control characters).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the {kind} id {problem}")]
#[non_exhaustive]
pub struct InvalidId {
    /// Which id.
    pub kind: IdKind,
    /// What is wrong with it.
    pub problem: IdProblem,
}

/// A run's identity: its resource (`None`: the namespace of runs without one) and its id.
/// The same run id in two resources names two runs.
///
/// ```
/// use askloop_core::{RunId, RunKey};
///
/// let key = RunKey::new(Some("tenant-a".into()), RunId::new("r1"));
/// assert_eq!(key.to_string(), "r1 (resource tenant-a)");
/// assert_eq!(RunKey::new(None, RunId::new("r1")).to_string(), "r1");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunKey {
    /// The resource owning the run, if any.
    pub resource_id: Option<ResourceId>,
    /// The run's id within it.
    pub run_id: RunId,
}

impl RunKey {
    /// The run `run_id` of `resource_id`.
    pub fn new(resource_id: Option<ResourceId>, run_id: RunId) -> Self {
        Self {
            resource_id,
            run_id,
        }
    }

    /// The resource, as stores keep it in a key column: the resource id, or `""` for none
    /// (never a resource id: [`IdKind::check`] refuses blank ids).
    pub fn scope(&self) -> &str {
        scope_of(self.resource_id.as_ref())
    }
}

impl fmt::Display for RunKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.resource_id {
            Some(resource) => write!(formatter, "{} (resource {resource})", self.run_id),
            None => write!(formatter, "{}", self.run_id),
        }
    }
}

/// A thread's identity: its resource (`None`: the namespace of runs without one) and its id.
/// The same thread id in two resources names two threads, each with its own history.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ThreadKey {
    /// The resource owning the thread, if any.
    pub resource_id: Option<ResourceId>,
    /// The thread's id within it.
    pub thread_id: ThreadId,
}

impl ThreadKey {
    /// The thread `thread_id` of `resource_id`.
    pub fn new(resource_id: Option<ResourceId>, thread_id: ThreadId) -> Self {
        Self {
            resource_id,
            thread_id,
        }
    }

    /// The resource as a key column holds it: the id, or `""` for none (see [`RunKey::scope`]).
    pub fn scope(&self) -> &str {
        scope_of(self.resource_id.as_ref())
    }
}

impl fmt::Display for ThreadKey {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.resource_id {
            Some(resource) => write!(formatter, "{} (resource {resource})", self.thread_id),
            None => write!(formatter, "{}", self.thread_id),
        }
    }
}

/// The key column value of a resource: its id, or `""` for none.
fn scope_of(resource_id: Option<&ResourceId>) -> &str {
    resource_id.map_or("", ResourceId::as_str)
}

/// The resource a key column value names: `None` for `""`, else the id (the inverse of
/// [`RunKey::scope`]).
///
/// ```
/// use askloop_core::{ResourceId, resource_of_scope};
/// assert_eq!(resource_of_scope(""), None);
/// assert_eq!(resource_of_scope("tenant-a"), Some(ResourceId::new("tenant-a")));
/// ```
pub fn resource_of_scope(scope: impl Into<String>) -> Option<ResourceId> {
    let scope = scope.into();
    (!scope.is_empty()).then(|| ResourceId::new(scope))
}

/// How an entry point is told which existing run to act on.
///
/// - [`RunRef::Key`]: exactly this run (what a caller that knows the resource passes: a
///   server with keys, [`crate::AgentStream::run_key`]).
/// - [`RunRef::Id`]: the run with this id in whichever resource holds it, which must be
///   unique: none is [`crate::ResumeError::RunNotFound`], several are
///   [`crate::ResumeError::AmbiguousRun`]. `&RunId` converts into it, so
///   `agent.resume_stream(answer, &run_id, None)` keeps working where ids are unique (the CLI,
///   a program without resources).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RunRef {
    /// This exact run.
    Key(RunKey),
    /// The one run with this id, in any resource.
    Id(RunId),
}

impl RunRef {
    /// The run id named.
    pub fn run_id(&self) -> &RunId {
        match self {
            Self::Key(key) => &key.run_id,
            Self::Id(run_id) => run_id,
        }
    }
}

impl fmt::Display for RunRef {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Key(key) => key.fmt(formatter),
            Self::Id(run_id) => run_id.fmt(formatter),
        }
    }
}

impl From<RunKey> for RunRef {
    fn from(key: RunKey) -> Self {
        Self::Key(key)
    }
}

impl From<&RunKey> for RunRef {
    fn from(key: &RunKey) -> Self {
        Self::Key(key.clone())
    }
}

impl From<RunId> for RunRef {
    fn from(run_id: RunId) -> Self {
        Self::Id(run_id)
    }
}

impl From<&RunId> for RunRef {
    fn from(run_id: &RunId) -> Self {
        Self::Id(run_id.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_from_outside_are_checked_by_one_rule() {
        for (id, problem) in [
            ("", Some(IdProblem::Blank)),
            (" \t", Some(IdProblem::Blank)),
            ("\u{200b}", Some(IdProblem::Blank)),
            ("a\nb", Some(IdProblem::ControlCharacter)),
            ("a\u{0}", Some(IdProblem::ControlCharacter)),
            ("a\u{200B}b", Some(IdProblem::ControlCharacter)),
            ("a\u{202E}b", Some(IdProblem::ControlCharacter)),
            (
                &"x".repeat(MAX_ID_BYTES + 1),
                Some(IdProblem::TooLong { bytes: 257 }),
            ),
            (&"x".repeat(MAX_ID_BYTES), None),
            ("tenant a/é", None),
        ] {
            assert_eq!(IdProblem::of(id), problem, "{id:?}");
        }
        let error = IdKind::Run.check("a\nb").unwrap_err();
        assert_eq!(
            error.to_string(),
            "the run id must not contain control or invisible characters"
        );
    }

    #[test]
    fn keys_order_and_convert() {
        let a = RunKey::new(None, RunId::new("r"));
        let b = RunKey::new(Some("t".into()), RunId::new("r"));
        assert_ne!(a, b);
        assert_eq!((a.scope(), b.scope()), ("", "t"));
        assert_eq!(RunRef::from(&b), RunRef::Key(b.clone()));
        assert_eq!(RunRef::from(&RunId::new("r")), RunRef::Id(RunId::new("r")));
        assert_eq!(RunRef::from(&b).run_id().as_str(), "r");
    }

    #[test]
    fn ids_serialize_as_plain_strings() {
        let id = ToolCallId::new("c1");
        assert_eq!(serde_json::to_string(&id).unwrap(), "\"c1\"");
        let back: ToolCallId = serde_json::from_str("\"c1\"").unwrap();
        assert_eq!(back, id);
    }

    #[test]
    fn generated_run_ids_are_distinct() {
        assert_ne!(RunId::generate(), RunId::generate());
    }
}
