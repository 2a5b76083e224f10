//! What a store remembers of the runs this process drives: the version it last committed or
//! loaded, its status then, and the run's stored messages, decoded.
//!
//! Stored messages never change (a run's messages are append-only, and a message row is
//! written once, by the commit that appends it), so the first `n` messages a store once
//! committed or read stay the first `n` stored messages forever, whichever process commits
//! next. A load then reads the run's head and only the messages past those remembered, and
//! decodes only those: a resume of a long run costs what changed since the process last saw
//! it, not the whole conversation. The store stays the source of truth: the version and the
//! message count always come from the row read, and a remembered version only saves the read
//! of the message count before an update, whose compare-and-swap checks it anyway.
//!
//! The memory is bounded: at most [`MAX_RUNS`] runs and [`MAX_MESSAGES`] messages; past
//! either, it starts over (a miss costs one full load). Ended runs (completed, cancelled) are
//! forgotten. Runs are remembered by key (resource and id): the same id in another resource
//! is another run.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use askloop_core::model::Message;
use askloop_core::store::RunState;
use askloop_core::{RunKey, RunStatus};

/// Runs remembered at most.
const MAX_RUNS: usize = 4096;

/// Messages remembered at most, over all runs.
const MAX_MESSAGES: usize = 32_768;

/// One run as the store last committed or read it.
#[derive(Debug)]
struct Known {
    /// The version of that commit or read.
    version: u64,
    /// The run's status at `version`.
    status: RunStatus,
    /// The run's first stored messages (all of them at `version`).
    messages: Vec<Message>,
}

#[derive(Debug, Default)]
struct Runs {
    runs: HashMap<RunKey, Known>,
    /// Messages held, over all runs.
    messages: usize,
}

/// The runs a store remembers (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct KnownRuns {
    inner: Mutex<Runs>,
}

impl KnownRuns {
    fn lock(&self) -> MutexGuard<'_, Runs> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many messages the store holds of `run` at `version`, if remembered.
    pub(crate) fn count_at(&self, run: &RunKey, version: u64) -> Option<usize> {
        let runs = self.lock();
        runs.runs
            .get(run)
            .filter(|known| known.version == version)
            .map(|known| known.messages.len())
    }

    /// The run's status at `version`, if remembered (the PostgreSQL store's notifications ask).
    #[cfg(feature = "postgres")]
    pub(crate) fn status_at(&self, run: &RunKey, version: u64) -> Option<RunStatus> {
        let runs = self.lock();
        runs.runs
            .get(run)
            .filter(|known| known.version == version)
            .map(|known| known.status)
    }

    /// A copy of the run's first stored messages, as remembered (empty when unknown).
    pub(crate) fn messages(&self, run: &RunKey) -> Vec<Message> {
        let runs = self.lock();
        runs.runs
            .get(run)
            .map(|known| known.messages.clone())
            .unwrap_or_default()
    }

    /// Notes that the store holds `state` at `version`, where it held its first `before`
    /// messages already (as remembered, or as read): the new ones are copied, the rest kept.
    /// An ended run (completed, cancelled), or one whose remembered messages do not match, is
    /// forgotten (then remembered anew unless ended).
    pub(crate) fn stored(&self, state: &RunState, before: usize, version: u64) {
        let key = state.key();
        let mut runs = self.lock();
        let held = runs.runs.get(&key).map(|known| known.messages.len());
        if matches!(state.status(), RunStatus::Completed | RunStatus::Cancelled) {
            if let Some(held) = held {
                runs.runs.remove(&key);
                runs.messages -= held;
            }
            return;
        }
        let all = state.messages();
        if held == Some(before) && before <= all.len() {
            let new = &all[before..];
            if runs.messages + new.len() <= MAX_MESSAGES {
                runs.messages += new.len();
                if let Some(known) = runs.runs.get_mut(&key) {
                    known.version = version;
                    known.status = state.status();
                    known.messages.extend_from_slice(new);
                }
                return;
            }
        }
        if let Some(held) = held {
            runs.runs.remove(&key);
            runs.messages -= held;
        }
        if runs.runs.len() >= MAX_RUNS || runs.messages + all.len() > MAX_MESSAGES {
            runs.runs.clear();
            runs.messages = 0;
        }
        if all.len() <= MAX_MESSAGES {
            runs.messages += all.len();
            runs.runs.insert(
                key.clone(),
                Known {
                    version,
                    status: state.status(),
                    messages: all.to_vec(),
                },
            );
        }
    }

    /// Forgets `run` (its stored messages no longer match what is remembered).
    pub(crate) fn forget(&self, run: &RunKey) {
        let mut runs = self.lock();
        if let Some(known) = runs.runs.remove(run) {
            runs.messages -= known.messages.len();
        }
    }
}
