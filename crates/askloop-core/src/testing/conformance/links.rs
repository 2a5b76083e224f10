//! The answer-link scenarios (issue 34): a link is stored once per hash, found by its hash,
//! taken by exactly one of racing uses, given back only by the use that took it, revoked per
//! call within its tenant, and pruned once expired, used or revoked long enough ago.

use std::sync::Arc;

use crate::actor::Actor;
use crate::ids::{ResourceId, RunId, RunKey, ToolCallId};
use crate::store::{AnswerLinks, LinkHash, NewAnswerLink, RunStore};
use crate::testing::conformance::support::*;

fn links(store: &Arc<dyn RunStore>) -> &dyn AnswerLinks {
    store
        .answer_links()
        .expect("every store of the suite keeps answer links")
}

fn hash(byte: u8) -> LinkHash {
    LinkHash([byte; 32])
}

fn link(byte: u8, run: &RunKey, call: &str, expires_at_ms: u64) -> NewAnswerLink {
    NewAnswerLink::new(
        hash(byte),
        run.clone(),
        ToolCallId::new(call),
        1_000,
        expires_at_ms,
    )
}

/// Stored once per hash (with its role), found by hash; used once; given back only by the
/// use that took it; an expired link is never used; a released link works again.
pub(super) async fn issue34_answer_links_are_used_once_and_given_back_by_their_user(
    store: Arc<dyn RunStore>,
) {
    let links = links(&store);
    let run = owned("linked");
    let first = links
        .create_link(&link(1, &run, "c1", 10_000).role(Some("ops".into())))
        .await
        .unwrap();
    assert_eq!(first.run, run);
    assert_eq!(first.tool_call_id.as_str(), "c1");
    assert_eq!(first.role.as_deref(), Some("ops"));
    assert_eq!((first.created_at_ms, first.expires_at_ms), (1_000, 10_000));
    assert!(first.is_live(5_000));
    let again = links
        .create_link(&link(1, &run, "other", 99_000))
        .await
        .unwrap();
    assert_eq!(again, first, "the same hash is stored once, unchanged");
    assert_eq!(
        links.find_link(&hash(1)).await.unwrap(),
        Some(first.clone())
    );
    assert_eq!(links.find_link(&hash(9)).await.unwrap(), None);
    assert_eq!(links.use_link(&hash(9), 5_000).await.unwrap(), None);

    let used = links.use_link(&hash(1), 5_000).await.unwrap().unwrap();
    assert_eq!(used.id, first.id);
    assert_eq!(used.used_at_ms, Some(5_000));
    assert_eq!(links.use_link(&hash(1), 5_001).await.unwrap(), None);
    assert!(
        !links.release_link(first.id, 4_999).await.unwrap(),
        "only the use that took it gives it back"
    );
    assert!(links.release_link(first.id, 5_000).await.unwrap());
    assert!(!links.release_link(first.id, 5_000).await.unwrap());
    let found = links.find_link(&hash(1)).await.unwrap().unwrap();
    assert!(found.is_live(6_000), "given back: live again");
    assert!(links.use_link(&hash(1), 6_000).await.unwrap().is_some());

    links
        .create_link(&link(2, &run, "c2", 7_000))
        .await
        .unwrap();
    assert_eq!(
        links.use_link(&hash(2), 7_000).await.unwrap(),
        None,
        "expired at its expiry"
    );
    assert!(links.use_link(&hash(2), 6_999).await.unwrap().is_some());
}

/// A link keeps who issued it, whole (id, resource, roles, route), through create, find and
/// use; a link without an issuer reads back without one.
pub(super) async fn issue34_links_keep_their_issuer(store: Arc<dyn RunStore>) {
    let links = links(&store);
    let run = owned("issued");
    let bob = Actor::new("bob")
        .resource("tenant-1")
        .roles(["ops", "admin"])
        .route("POST /api/runs/{runId}/calls/{toolCallId}/link");
    let issued = links
        .create_link(
            &link(30, &run, "c1", u64::MAX / 2)
                .role(Some("ops".into()))
                .issuer(Some(bob.clone())),
        )
        .await
        .unwrap();
    assert_eq!(issued.issuer.as_ref(), Some(&bob));
    let found = links.find_link(&hash(30)).await.unwrap().unwrap();
    assert_eq!(found.issuer.as_ref(), Some(&bob));
    assert_eq!(found.role.as_deref(), Some("ops"));
    let used = links.use_link(&hash(30), 2_000).await.unwrap().unwrap();
    assert_eq!(used.issuer, Some(bob), "the use returns the issuer too");

    let anonymous = links
        .create_link(&link(31, &run, "c1", u64::MAX / 2))
        .await
        .unwrap();
    assert_eq!(anonymous.issuer, None);
    assert_eq!(
        links.find_link(&hash(31)).await.unwrap().unwrap().issuer,
        None
    );
}

/// Of many racing uses of one link exactly one gets it.
pub(super) async fn issue34_racing_link_uses_have_one_winner(store: Arc<dyn RunStore>) {
    let run = owned("raced");
    links(&store)
        .create_link(&link(3, &run, "c1", u64::MAX / 2))
        .await
        .unwrap();
    let uses = (0..8).map(|index| {
        let store = store.clone();
        async move {
            links(&store)
                .use_link(&hash(3), 2_000 + index)
                .await
                .unwrap()
        }
    });
    let won = futures::future::join_all(uses)
        .await
        .into_iter()
        .flatten()
        .count();
    assert_eq!(won, 1, "exactly one use takes the link");
}

/// Revoking names the call by its run's exact key: another tenant's run of the same id, or
/// another call, keeps its links; a revoked link is not used nor given back (one being used
/// when revoked included).
pub(super) async fn issue34_links_are_revoked_per_call_within_their_tenant(
    store: Arc<dyn RunStore>,
) {
    let links = links(&store);
    let run = owned("revoked");
    let other_tenant = RunKey::new(Some(ResourceId::new("tenant-2")), RunId::new("revoked"));
    let far = u64::MAX / 2;
    for (byte, key, call) in [
        (10, &run, "c1"),
        (11, &run, "c1"),
        (12, &run, "c2"),
        (13, &other_tenant, "c1"),
        (14, &run, "c1"),
    ] {
        links
            .create_link(&link(byte, key, call, far))
            .await
            .unwrap();
    }
    let used = links.use_link(&hash(14), 3_000).await.unwrap().unwrap();
    let revoked = links
        .revoke_links(&run, &ToolCallId::new("c1"), 4_000)
        .await
        .unwrap();
    assert_eq!(revoked, 3, "the call's links, the one being used too");
    for byte in [10, 11, 14] {
        let found = links.find_link(&hash(byte)).await.unwrap().unwrap();
        assert_eq!(found.revoked_at_ms, Some(4_000));
        assert!(links.use_link(&hash(byte), 5_000).await.unwrap().is_none());
    }
    assert!(
        !links.release_link(used.id, 3_000).await.unwrap(),
        "a revoked link is not given back"
    );
    for byte in [12, 13] {
        assert!(
            links.use_link(&hash(byte), 5_000).await.unwrap().is_some(),
            "another call's or another tenant's link is untouched"
        );
    }
    assert_eq!(
        links
            .revoke_links(&other_tenant, &ToolCallId::new("none"), 6_000)
            .await
            .unwrap(),
        0
    );
}

/// Pruning deletes, a bounded batch at a time, the links expired, used or revoked before the
/// cutoff, and keeps the rest.
pub(super) async fn issue34_old_links_are_pruned_in_batches(store: Arc<dyn RunStore>) {
    let links = links(&store);
    let run = owned("pruned");
    // 20 and 21 expire early; 22 is used early; 23 revoked early; 24 lives on.
    links
        .create_link(&link(20, &run, "a", 2_000))
        .await
        .unwrap();
    links
        .create_link(&link(21, &run, "b", 2_000))
        .await
        .unwrap();
    links
        .create_link(&link(22, &run, "c", 90_000))
        .await
        .unwrap();
    links
        .create_link(&link(23, &run, "d", 90_000))
        .await
        .unwrap();
    links
        .create_link(&link(24, &run, "e", 90_000))
        .await
        .unwrap();
    links.use_link(&hash(22), 3_000).await.unwrap().unwrap();
    links
        .revoke_links(&run, &ToolCallId::new("d"), 3_000)
        .await
        .unwrap();
    assert_eq!(links.prune_links(1_000, 10).await.unwrap(), 0);
    assert_eq!(links.prune_links(10_000, 3).await.unwrap(), 3, "a batch");
    assert_eq!(links.prune_links(10_000, 3).await.unwrap(), 1);
    assert_eq!(links.prune_links(10_000, 3).await.unwrap(), 0);
    for byte in [20, 21, 22, 23] {
        assert_eq!(links.find_link(&hash(byte)).await.unwrap(), None);
    }
    assert!(links.find_link(&hash(24)).await.unwrap().is_some());
    let again = links
        .create_link(&link(20, &run, "a", 90_000))
        .await
        .unwrap();
    assert!(again.is_live(5_000), "a pruned hash may be stored anew");
}
