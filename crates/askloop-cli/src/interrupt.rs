//! Ctrl-C: while a run streams, it cancels the run's model call cleanly (the run is recorded as
//! failed with code `cancelled` and `askloop runs continue` retries it); at any other moment, or
//! pressed twice, it exits at once with status 130, as a program without a handler would.

use std::io::Write;
use std::sync::{Arc, Mutex};

use askloop_core::CancelHandle;

use crate::exit::INTERRUPTED;

/// The Ctrl-C handler and the stream it would cancel now.
#[derive(Clone)]
pub(crate) struct Interrupt {
    current: Arc<Mutex<Option<CancelHandle>>>,
}

impl Interrupt {
    /// Installs the handler (a task on the current runtime). On Unix the handler is in place
    /// when this returns.
    pub(crate) fn install() -> Self {
        let current: Arc<Mutex<Option<CancelHandle>>> = Arc::new(Mutex::new(None));
        let watched = current.clone();
        let mut signals = Signals::register();
        tokio::spawn(async move {
            while signals.next().await {
                let handle = watched.lock().ok().and_then(|slot| slot.clone());
                match handle {
                    Some(handle) if !handle.is_cancelled() => {
                        handle.cancel();
                        let _ = writeln!(std::io::stderr(), "\ncancelling (Ctrl-C again to quit)");
                    }
                    _ => std::process::exit(i32::from(INTERRUPTED)),
                }
            }
        });
        Self { current }
    }

    /// Makes Ctrl-C cancel this stream until the guard is dropped.
    pub(crate) fn watch(&self, handle: CancelHandle) -> Watching {
        if let Ok(mut slot) = self.current.lock() {
            *slot = Some(handle);
        }
        Watching {
            current: self.current.clone(),
        }
    }
}

/// While alive, Ctrl-C cancels the watched stream.
pub(crate) struct Watching {
    current: Arc<Mutex<Option<CancelHandle>>>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.current.lock() {
            *slot = None;
        }
    }
}

/// Ctrl-C presses, registered at once where the platform allows.
enum Signals {
    /// SIGINT, registered.
    #[cfg(unix)]
    Unix(tokio::signal::unix::Signal),
    /// `tokio::signal::ctrl_c`, registered when first awaited.
    Portable,
}

impl Signals {
    fn register() -> Self {
        #[cfg(unix)]
        {
            if let Ok(signal) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            {
                return Self::Unix(signal);
            }
        }
        Self::Portable
    }

    /// Waits for the next press; false when no more can come.
    async fn next(&mut self) -> bool {
        match self {
            #[cfg(unix)]
            Self::Unix(signal) => signal.recv().await.is_some(),
            Self::Portable => tokio::signal::ctrl_c().await.is_ok(),
        }
    }
}
