//! Ctrl-C (SIGINT), SIGTERM and SIGHUP: while a run streams, the first one cancels the run's
//! model call cleanly (the run is recorded as failed with code `cancelled` and `askloop runs
//! continue` retries it) and the command then exits with 128 + the signal's number (130, 143,
//! 129); at any other moment, or on a second signal, the process exits at once with that
//! status, as a program without a handler would.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use askloop_core::CancelHandle;

use crate::exit::{HUNG_UP, INTERRUPTED, TERMINATED};

/// The signal handler, the stream it would cancel now, and the signal that cancelled it.
#[derive(Clone)]
pub(crate) struct Interrupt {
    current: Arc<Mutex<Option<CancelHandle>>>,
    /// The exit status of the signal that cancelled a stream; 0 before any.
    received: Arc<AtomicU8>,
}

impl Interrupt {
    /// Installs the handler (a task on the current runtime). On Unix the handler is in place
    /// when this returns.
    pub(crate) fn install() -> Self {
        let current: Arc<Mutex<Option<CancelHandle>>> = Arc::new(Mutex::new(None));
        let received = Arc::new(AtomicU8::new(0));
        let watched = current.clone();
        let recorded = received.clone();
        let mut signals = Signals::register();
        tokio::spawn(async move {
            while let Some(status) = signals.next().await {
                let handle = watched.lock().ok().and_then(|slot| slot.clone());
                match handle {
                    Some(handle) if !handle.is_cancelled() => {
                        recorded.store(status, Ordering::SeqCst);
                        handle.cancel();
                        let what = match status {
                            INTERRUPTED => "cancelling (Ctrl-C again to quit)",
                            TERMINATED => "terminated: cancelling the run's model call",
                            _ => "hung up: cancelling the run's model call",
                        };
                        let _ = writeln!(std::io::stderr(), "\n{what}");
                    }
                    _ => std::process::exit(i32::from(status)),
                }
            }
        });
        Self { current, received }
    }

    /// Makes a signal cancel this stream until the guard is dropped.
    pub(crate) fn watch(&self, handle: CancelHandle) -> Watching {
        if let Ok(mut slot) = self.current.lock() {
            *slot = Some(handle);
        }
        Watching {
            current: self.current.clone(),
        }
    }

    /// The exit status of the signal that cancelled a stream (130, 143 or 129), if one did.
    pub(crate) fn received(&self) -> Option<u8> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            status => Some(status),
        }
    }
}

/// While alive, a signal cancels the watched stream.
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

/// The signals that end a command, registered at once where the platform allows.
enum Signals {
    /// SIGINT, SIGTERM and SIGHUP, registered.
    #[cfg(unix)]
    Unix {
        interrupt: tokio::signal::unix::Signal,
        terminate: tokio::signal::unix::Signal,
        hang_up: tokio::signal::unix::Signal,
    },
    /// `tokio::signal::ctrl_c`, registered when first awaited.
    Portable,
}

impl Signals {
    fn register() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(interrupt), Ok(terminate), Ok(hang_up)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
                signal(SignalKind::hangup()),
            ) {
                return Self::Unix {
                    interrupt,
                    terminate,
                    hang_up,
                };
            }
        }
        Self::Portable
    }

    /// Waits for the next signal and returns its exit status; `None` when no more can come.
    async fn next(&mut self) -> Option<u8> {
        match self {
            #[cfg(unix)]
            Self::Unix {
                interrupt,
                terminate,
                hang_up,
            } => tokio::select! {
                Some(()) = interrupt.recv() => Some(INTERRUPTED),
                Some(()) = terminate.recv() => Some(TERMINATED),
                Some(()) = hang_up.recv() => Some(HUNG_UP),
                else => None,
            },
            Self::Portable => tokio::signal::ctrl_c().await.ok().map(|()| INTERRUPTED),
        }
    }
}
