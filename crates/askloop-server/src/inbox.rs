//! The inbox's live events (`GET /api/inbox/events`): questions raised and resolved.
use std::sync::Arc;

use askloop_core::RunStore;

/// The event source of the inbox.
pub(crate) struct Inbox {
    #[allow(dead_code)]
    store: Arc<dyn RunStore>,
}

impl Inbox {
    pub(crate) fn new(store: Arc<dyn RunStore>) -> Self {
        Self { store }
    }
}
