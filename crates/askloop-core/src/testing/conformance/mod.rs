//! The conformance suite every [`RunStore`] must pass: store semantics (versions,
//! compare-and-swap, listing, threads) and the agent's suspension guarantees on top of that
//! store. The loop's own behaviour (ask_user, parallel calls, argument checks) is tested once,
//! in the core, not per store.
//!
//! Run it on a store with [`crate::store_conformance_tests!`], which expands to one
//! `#[tokio::test]` per scenario and one test that fails if the macro's list and the suite's
//! scenarios differ:
//!
//! ```text
//! askloop_core::store_conformance_tests!(async { std::sync::Arc::new(MyStore::new()) as _ });
//! ```
//!
//! Every scenario runs on the store wrapped in a [`YieldingStore`], so the concurrent races in
//! the scenarios interleave at every store call even on a store that never waits. Every
//! scenario panics (fails the test) on a broken promise; none is skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod cancel;
mod changes;
mod fork;
mod hitl;
mod links;
mod outbox;
mod policy;
mod store;
mod subagent_listing;
mod subagents;
pub mod support;
mod tenancy;
mod waits;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;

use crate::event::RunEvent;
use crate::ids::{RunId, RunKey, ThreadKey};
use crate::store::{
    Lease, Outbox, RunFilter, RunPage, RunState, RunStore, StoreError, StoredRun, ThreadHistory,
};

/// Expands to one `#[tokio::test]` per store scenario, each on a fresh store made by `$make`
/// (an expression of type `impl Future<Output = Arc<dyn RunStore>>`), and a test that the list
/// is complete.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@all $make;
            issue34_commits_write_exactly_their_events,
            issue34_cancel_and_decline_events,
            issue34_deliveries_are_claimed_once_and_recorded,
            issue34_prune_keeps_pending_and_deletes_old_finished,
            issue34_answer_links_are_used_once_and_given_back_by_their_user,
            issue34_racing_link_uses_have_one_winner,
            issue34_links_keep_their_issuer,
            issue34_links_are_revoked_per_call_within_their_tenant,
            issue34_old_links_are_pruned_in_batches,
            insert_then_load_round_trips,
            load_of_unknown_run_is_not_found,
            insert_of_existing_id_is_refused,
            stale_update_conflicts_and_changes_nothing,
            update_of_unknown_run_is_not_found,
            list_filters_and_orders_newest_first,
            list_pages_with_a_cursor,
            run_counts_count_each_status,
            thread_gets_messages_of_completed_runs_once,
            concurrent_updates_have_one_winner,
            commit_happens_before_suspended_chunk,
            concurrent_resumes_have_exactly_one_winner,
            repeated_answers_by_id_never_land_on_a_later_question,
            resume_errors_change_nothing,
            later_runs_of_a_thread_see_its_history,
            failed_model_call_after_resume_keeps_the_answer,
            cancelled_model_call_fails_the_run_and_can_continue,
            crash_after_resume_never_reruns_a_side_effecting_resume,
            thread_history_follows_completion_order,
            thread_history_stops_at_through,
            commits_append_only_new_messages,
            leases_are_kept_renewed_and_cleared,
            newer_format_rows_are_refused_and_untouched,
            listing_summaries_carry_pending_questions,
            issue33_listing_summaries_carry_the_first_message,
            live_lease_refuses_claims_until_it_expires,
            concurrent_takeovers_have_one_winner,
            unfinished_side_effect_is_never_repeated,
            heartbeat_keeps_a_long_run_leased,
            approvals_gate_side_effects,
            issue34_edited_arguments_are_checked_then_run,
            answers_to_several_questions_land_on_their_calls,
            batch_answers_apply_all_or_none,
            expired_questions_are_swept_once,
            issue31_expired_approvals_are_swept_once,
            new_message_supersedes_waiting_questions,
            cancelled_runs_refuse_resumes,
            issue31_run_ids_are_per_resource,
            issue31_one_running_run_per_thread,
            issue31_threads_are_per_resource,
            issue31_first_messages_of_two_resources_race_on_one_thread_id,
            issue31_a_new_message_while_a_turn_runs_is_refused,
            issue31_a_resume_racing_a_new_message_never_runs_beside_it,
            issue31_cancelled_runs_join_the_thread_history,
            issue31_bare_run_ids_resolve_when_unique,
            issue31_a_running_model_call_is_cancelled_from_another_agent,
            issue31_a_running_tool_is_cancelled_from_another_agent,
            issue31_a_tool_result_after_the_cancel_is_not_recorded,
            issue31_changed_runs_are_listed_after_a_cursor,
            issue31_a_watcher_of_the_change_cursor_misses_no_commit,
            issue34_a_fork_goes_on_with_the_new_answer_and_leaves_the_original,
            issue34_a_refused_fork_creates_nothing,
            issue34_self_approval_is_refused,
            issue34_roles_gate_answers_of_a_tool_with_a_policy,
            issue34_a_quorum_of_two,
            issue34_one_decline_declines_a_quorum_call,
            issue34_concurrent_approvals_reach_the_quorum_once,
            issue34_a_fork_carries_no_votes,
            issue34_an_edited_vote_shows_what_it_approved,
            issue35_a_nested_question_is_answered_through_the_root,
            issue35_two_children_waiting_are_answered_in_reverse_order,
            issue35_a_childs_approval_waits_at_the_root,
            issue35_cancel_of_the_root_cancels_its_waiting_child,
            issue35_a_crash_in_the_childs_model_call_is_recovered_at_the_root,
            issue35_a_refused_nested_decision_changes_nothing_in_the_tree,
            issue35_a_childs_deadline_is_swept_through_the_root,
            issue35_a_message_to_a_childs_thread_leaves_the_tree_answerable,
            issue35_a_cancel_cut_short_is_finished_by_cancelling_again,
            issue35_summaries_carry_the_parent_link,
            issue35_children_are_listed_by_parent_within_their_resource,
            issue35_top_level_and_children_page_with_status_and_cursor,
        );
    };
    (@all $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store: ::std::sync::Arc<dyn $crate::store::RunStore> = $make.await;
                $crate::testing::conformance::run_store_scenario(stringify!($name), store).await;
            }
        )*

        #[test]
        fn conformance_suite_lists_every_scenario() {
            $crate::testing::conformance::assert_lists_every_scenario(&[$(stringify!($name)),*]);
        }
    };
}

/// One scenario: runs on the given store and panics on a broken promise.
pub type Scenario = fn(Arc<dyn RunStore>) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// The names of every store scenario.
pub fn scenario_names() -> Vec<&'static str> {
    store::SCENARIOS.iter().map(|(name, _)| *name).collect()
}

/// Runs the named store scenario on `store` (wrapped in a [`YieldingStore`]).
///
/// # Panics
/// If no scenario has that name, or the store breaks a promise of the scenario.
pub async fn run_store_scenario(name: &str, store: Arc<dyn RunStore>) {
    let Some((_, scenario)) = store::SCENARIOS.iter().find(|(known, _)| *known == name) else {
        panic!(
            "no store scenario named {name}; known: {:?}",
            scenario_names()
        );
    };
    scenario(Arc::new(YieldingStore::new(store))).await;
}

/// The change-notification scenario: commits through `writer` are seen through `watcher`,
/// another handle of the same store (the same value for the memory store; another pool on the
/// same database for PostgreSQL). A store that does not notify (`watch_changes` is `None` on
/// both handles) passes trivially.
///
/// Checks: a run inserted and committed as running is not notified; its suspension and then
/// its completion are, in order, within 5 s each ([`crate::store::RunChange::Resync`] is
/// skipped, as a watcher would re-list).
///
/// # Panics
/// On a change not seen, or seen out of order, or on one handle notifying and not the other.
pub async fn run_change_scenario(writer: Arc<dyn RunStore>, watcher: Arc<dyn RunStore>) {
    use crate::run::RunStatus;
    use crate::store::RunChange;

    let Some(mut changes) = watcher.watch_changes().await else {
        assert!(
            writer.watch_changes().await.is_none(),
            "one handle notifies, the other not"
        );
        return;
    };
    let id = RunId::new("watched");
    let mut run = support::state("watched", "t", RunStatus::Running, 1);
    writer.insert_run(&run, None).await.unwrap();
    writer.update_run(&run, 1, None).await.unwrap();
    run.status = RunStatus::Suspended;
    writer.update_run(&run, 2, None).await.unwrap();
    run.status = RunStatus::Completed;
    writer.update_run(&run, 3, None).await.unwrap();
    for expected in [RunStatus::Suspended, RunStatus::Completed] {
        let seen = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                match changes.next().await {
                    Some(RunChange::Run {
                        resource_id,
                        run_id,
                        status,
                    }) if run_id == id => {
                        assert_eq!(
                            resource_id.as_ref().map(|id| id.as_str()),
                            Some(support::TENANT),
                            "a change names the run's resource"
                        );
                        return status;
                    }
                    Some(_) => {}
                    None => panic!("the store stopped notifying"),
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no change to {expected:?} seen within 5 s"));
        assert_eq!(
            seen, expected,
            "changes out of order or a running commit notified"
        );
    }
}

/// Checks that `listed` (the names a test macro expands to) is exactly the suite's scenarios.
///
/// # Panics
/// Naming what is missing or unknown.
pub fn assert_lists_every_scenario(listed: &[&str]) {
    let known = scenario_names();
    let missing: Vec<_> = known.iter().filter(|name| !listed.contains(name)).collect();
    let unknown: Vec<_> = listed.iter().filter(|name| !known.contains(name)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "conformance list out of date: missing {missing:?}, unknown {unknown:?}"
    );
}

/// A store that yields to the scheduler before and after every call of the store it wraps, so
/// that futures racing in one `join!` interleave at every store call (an in-memory store would
/// otherwise run each call to completion in one poll).
pub struct YieldingStore {
    inner: Arc<dyn RunStore>,
}

impl YieldingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn RunStore>) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl RunStore for YieldingStore {
    async fn insert_run_with_events(
        &self,
        state: &RunState,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        tokio::task::yield_now().await;
        let result = self
            .inner
            .insert_run_with_events(state, lease, events)
            .await;
        tokio::task::yield_now().await;
        result
    }
    async fn update_run_with_events(
        &self,
        state: &RunState,
        expected_version: u64,
        lease: Option<&Lease>,
        events: &[RunEvent],
    ) -> Result<u64, StoreError> {
        tokio::task::yield_now().await;
        let result = self
            .inner
            .update_run_with_events(state, expected_version, lease, events)
            .await;
        tokio::task::yield_now().await;
        result
    }
    async fn renew_lease(
        &self,
        run: &RunKey,
        expected_version: u64,
        lease: &Lease,
    ) -> Result<(), StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.renew_lease(run, expected_version, lease).await;
        tokio::task::yield_now().await;
        result
    }
    async fn load_run(&self, run: &RunKey) -> Result<StoredRun, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.load_run(run).await;
        tokio::task::yield_now().await;
        result
    }
    async fn keys_of_run(&self, run_id: &RunId) -> Result<Vec<RunKey>, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.keys_of_run(run_id).await;
        tokio::task::yield_now().await;
        result
    }
    async fn list_runs(&self, filter: &RunFilter) -> Result<RunPage, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.list_runs(filter).await;
        tokio::task::yield_now().await;
        result
    }
    async fn run_counts(&self) -> Result<crate::store::RunCounts, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.run_counts().await;
        tokio::task::yield_now().await;
        result
    }
    async fn thread_history(
        &self,
        thread: &ThreadKey,
        through: Option<u64>,
    ) -> Result<ThreadHistory, StoreError> {
        tokio::task::yield_now().await;
        let result = self.inner.thread_history(thread, through).await;
        tokio::task::yield_now().await;
        result
    }
    async fn watch_changes(&self) -> Option<crate::store::RunChanges> {
        self.inner.watch_changes().await
    }
    async fn close(&self) {
        self.inner.close().await;
    }
    fn answer_links(&self) -> Option<&dyn crate::store::AnswerLinks> {
        self.inner.answer_links()
    }
    fn outbox(&self) -> Option<&dyn Outbox> {
        self.inner.outbox()
    }
}
