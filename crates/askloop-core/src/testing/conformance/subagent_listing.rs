//! Store scenarios of sub-agents' child runs (issue 35): a listing's summaries carry each run's
//! link to its parent, [`RunFilter::children_of`] lists exactly a run's children (in the
//! resource asked for) and [`RunFilter::top_level`] only the runs that are no child, with the
//! other filters and a cursor. Listed in `store.rs`'s `SCENARIOS`, so they run on every store.

use std::sync::Arc;

use serde_json::json;

use crate::ids::{RunId, ToolCallId};
use crate::message::{Suspension, ToolArgs, ToolCall};
use crate::run::{CallSlot, CallState, ParentRun, PendingStep, RunState, RunStatus};
use crate::store::{RunFilter, RunPage, RunStore};
use crate::testing::conformance::support::*;

/// The resource of the runs of another tenant that reuse the scenario's run ids.
const OTHER_TENANT: &str = "tenant-35";

/// A child run `run_id` (resource [`TENANT`]) started by call `call` of run `parent`, in the
/// tree of `root`, at `depth`.
fn child(
    run_id: &str,
    status: RunStatus,
    created: u64,
    parent: &str,
    call: &str,
    root: &str,
    depth: u32,
) -> RunState {
    let mut run = state(run_id, &format!("thread-{run_id}"), status, created);
    run.agent_id = "researcher".into();
    run.parent = Some(ParentRun {
        run_id: RunId::new(parent),
        tool_call_id: ToolCallId::new(call),
        root_run_id: RunId::new(root),
        depth,
    });
    run
}

/// A run that is no child but whose head holds the text `"parent":` all the same: a question
/// whose payload has a `parent` field naming `parent` (what a text test alone would take for a
/// link).
fn decoy(run_id: &str, created: u64, parent: &str) -> RunState {
    let mut run = state(run_id, "thread-decoy", RunStatus::Suspended, created);
    let call = ToolCall {
        id: ToolCallId::new("q1"),
        name: "ask_user".into(),
        args: ToolArgs::Json(json!({"question": "Which?", "parent": {"runId": parent}})),
    };
    run.pending_step = Some(PendingStep {
        calls: vec![CallSlot {
            call,
            state: CallState::Suspended {
                suspension: Suspension::new(json!({
                    "question": "Which?",
                    "parent": {"runId": parent, "toolCallId": "c1", "rootRunId": parent, "depth": 1}
                })),
                subagent: None,
            },
            audit: Vec::new(),
        }],
    });
    run
}

fn ids(page: &RunPage) -> Vec<String> {
    page.runs
        .iter()
        .map(|run| run.run_id().to_string())
        .collect()
}

async fn listed(store: &Arc<dyn RunStore>, filter: RunFilter) -> Vec<String> {
    ids(&store.list_runs(&filter).await.unwrap())
}

/// Every run `filter` lists, page by page of `per_page` (each next page after the last's
/// cursor), and how many pages that took.
async fn paged(
    store: &Arc<dyn RunStore>,
    filter: RunFilter,
    per_page: usize,
) -> (Vec<String>, usize) {
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut next = filter.clone().limit(per_page);
    loop {
        let page = store.list_runs(&next).await.unwrap();
        pages += 1;
        assert!(
            page.runs.len() <= per_page,
            "a page holds at most its limit"
        );
        seen.extend(ids(&page));
        let Some(cursor) = page.next_cursor else {
            return (seen, pages);
        };
        next = filter
            .clone()
            .limit(per_page)
            .after(cursor.to_string().parse().unwrap());
    }
}

pub(super) async fn issue35_summaries_carry_the_parent_link(store: Arc<dyn RunStore>) {
    let root = state("root", "thread-root", RunStatus::Suspended, 10);
    let researcher = child("kid", RunStatus::Suspended, 20, "root", "call-1", "root", 1);
    let grandchild = child(
        "grandkid",
        RunStatus::Suspended,
        30,
        "kid",
        "call-2",
        "root",
        2,
    );
    for run in [&root, &researcher, &grandchild] {
        store.insert_run(run, None).await.unwrap();
    }
    // The link is kept as it was written, and a load reads it back.
    let loaded = store.load_run(&owned("grandkid")).await.unwrap();
    assert_eq!(loaded.state, grandchild);
    assert_eq!(loaded.state.parent(), grandchild.parent());

    let page = store.list_runs(&RunFilter::new()).await.unwrap();
    assert_eq!(ids(&page), ["grandkid", "kid", "root"]);
    let link = |index: usize| {
        page.runs[index]
            .summary()
            .unwrap()
            .parent
            .as_ref()
            .map(|parent| {
                (
                    parent.run_id.to_string(),
                    parent.tool_call_id.to_string(),
                    parent.root_run_id.to_string(),
                    parent.depth,
                )
            })
    };
    assert_eq!(
        link(0),
        Some(("kid".into(), "call-2".into(), "root".into(), 2)),
        "a grandchild names its parent, the call, the root and its depth"
    );
    assert_eq!(
        link(1),
        Some(("root".into(), "call-1".into(), "root".into(), 1))
    );
    assert_eq!(link(2), None, "a root has no parent");
    assert_eq!(
        page.runs[0].summary().unwrap().parent.as_ref(),
        grandchild.parent(),
        "the listed link is the stored one"
    );

    // Updates keep the link (it is set at the insert, never changed).
    let mut moved = loaded.state;
    moved.status = RunStatus::Completed;
    store
        .update_run(&moved, loaded.version, None)
        .await
        .unwrap();
    let page = store
        .list_runs(&RunFilter::new().status(RunStatus::Completed))
        .await
        .unwrap();
    assert_eq!(ids(&page), ["grandkid"]);
    assert_eq!(
        page.runs[0].summary().unwrap().parent.as_ref(),
        grandchild.parent()
    );
}

pub(super) async fn issue35_children_are_listed_by_parent_within_their_resource(
    store: Arc<dyn RunStore>,
) {
    store
        .insert_run(
            &state("root", "thread-root", RunStatus::Suspended, 10),
            None,
        )
        .await
        .unwrap();
    for run in [
        child(
            "kid-a",
            RunStatus::Suspended,
            20,
            "root",
            "call-1",
            "root",
            1,
        ),
        child(
            "kid-b",
            RunStatus::Completed,
            30,
            "root",
            "call-2",
            "root",
            1,
        ),
        child(
            "grandkid",
            RunStatus::Suspended,
            40,
            "kid-a",
            "call-3",
            "root",
            2,
        ),
        // Not a child although its head holds `"parent":` naming the root.
        decoy("decoy", 50, "root"),
    ] {
        store.insert_run(&run, None).await.unwrap();
    }
    // Another tenant's run `root` has a child too: the same parent id, another resource.
    let mut foreign = child(
        "kid-x",
        RunStatus::Suspended,
        60,
        "root",
        "call-1",
        "root",
        1,
    );
    foreign.resource_id = Some(OTHER_TENANT.into());
    store.insert_run(&foreign, None).await.unwrap();

    let in_tenant = || RunFilter::new().resource(TENANT);
    assert_eq!(
        listed(&store, in_tenant().children_of("root")).await,
        ["kid-b", "kid-a"],
        "exactly the root's children of its resource, newest first"
    );
    assert_eq!(
        listed(&store, RunFilter::new().children_of("root")).await,
        ["kid-x", "kid-b", "kid-a"],
        "without a resource, every resource's runs named `root`"
    );
    assert_eq!(
        listed(
            &store,
            RunFilter::new().resource(OTHER_TENANT).children_of("root")
        )
        .await,
        ["kid-x"]
    );
    assert_eq!(
        listed(&store, in_tenant().children_of("kid-a")).await,
        ["grandkid"],
        "a grandchild is its parent's child, not the root's"
    );
    assert!(
        listed(&store, in_tenant().children_of("grandkid"))
            .await
            .is_empty()
    );
    assert!(
        listed(&store, in_tenant().children_of("unknown"))
            .await
            .is_empty()
    );
    assert_eq!(
        listed(
            &store,
            in_tenant().children_of("root").status(RunStatus::Suspended)
        )
        .await,
        ["kid-a"]
    );

    // The decoy is a run of its own: listed as a root, its question's payload intact.
    assert_eq!(
        listed(&store, in_tenant().top_level()).await,
        ["decoy", "root"]
    );
    let decoy = store
        .list_runs(&RunFilter::new().run("decoy"))
        .await
        .unwrap();
    let summary = decoy.runs[0].summary().unwrap();
    assert!(summary.parent.is_none());
    assert_eq!(
        summary.pending[0].suspend_payload["parent"]["runId"],
        "root"
    );
}

pub(super) async fn issue35_top_level_and_children_page_with_status_and_cursor(
    store: Arc<dyn RunStore>,
) {
    // Roots r0..r5 (suspended when even), each with children of both statuses; creation times
    // interleave roots and children, two runs share each time (the id breaks the tie).
    let mut runs = Vec::new();
    for index in 0..6u64 {
        let root = format!("r{index}");
        let status = if index % 2 == 0 {
            RunStatus::Suspended
        } else {
            RunStatus::Completed
        };
        runs.push(state(&root, &format!("thread-{root}"), status, index * 10));
        for (kid, status) in [("s", RunStatus::Suspended), ("c", RunStatus::Completed)] {
            let id = format!("{root}-{kid}");
            runs.push(child(&id, status, index * 10 + 5, &root, "call", &root, 1));
        }
    }
    runs.push(child(
        "r0-s-deep",
        RunStatus::Suspended,
        5,
        "r0-s",
        "call",
        "r0",
        2,
    ));
    for run in &runs {
        store.insert_run(run, None).await.unwrap();
    }
    let expected = |filter: &RunFilter| {
        let mut matching: Vec<_> = runs
            .iter()
            .map(RunState::summary)
            .filter(|summary| filter.matches(summary))
            .collect();
        matching.sort_by(|a, b| {
            (b.created_at_ms, b.run_id.as_str()).cmp(&(a.created_at_ms, a.run_id.as_str()))
        });
        matching
            .iter()
            .map(|summary| summary.run_id.to_string())
            .collect::<Vec<_>>()
    };

    let top = RunFilter::new().top_level();
    assert_eq!(expected(&top), ["r5", "r4", "r3", "r2", "r1", "r0"]);
    let inbox = RunFilter::new().top_level().status(RunStatus::Suspended);
    assert_eq!(expected(&inbox), ["r4", "r2", "r0"]);
    let kids = RunFilter::new().resource(TENANT).children_of("r0");
    let waiting_kids = kids.clone().status(RunStatus::Suspended);
    assert_eq!(expected(&waiting_kids), ["r0-s"]);
    for filter in [top, inbox, kids, waiting_kids] {
        let all = expected(&filter);
        assert_eq!(listed(&store, filter.clone()).await, all, "{filter:?}");
        for per_page in [1, 2, 4] {
            let (seen, pages) = paged(&store, filter.clone(), per_page).await;
            assert_eq!(seen, all, "{filter:?} in pages of {per_page}");
            assert_eq!(pages, all.len().div_ceil(per_page).max(1), "{filter:?}");
        }
    }

    // A watcher of the change order sees the roots' changes only.
    let horizon = store
        .list_runs(&RunFilter::new().limit(1))
        .await
        .unwrap()
        .change_cursor;
    for id in ["r2", "r2-s"] {
        let mut loaded = store.load_run(&owned(id)).await.unwrap();
        loaded.state.status = RunStatus::Completed;
        loaded.state.touch();
        store
            .update_run(&loaded.state, loaded.version, None)
            .await
            .unwrap();
    }
    if let Some(horizon) = horizon {
        let changed = store
            .list_runs(&RunFilter::new().top_level().changed_after(horizon))
            .await
            .unwrap();
        assert_eq!(ids(&changed), ["r2"], "a child's change is not a root's");
    }
}
