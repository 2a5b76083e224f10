//! Ctrl-C (SIGINT), SIGTERM and SIGHUP, for every command: while something cancellable is
//! watched (a run's stream, a model download), the first one cancels it cleanly (a run is
//! recorded as failed with code `cancelled` and `askloop runs continue` retries it) and the
//! command then exits with 128 + the signal's number (130, 143, 129, see [`Signals::next`],
//! the one mapping); at any other moment (a prompt, a read from stdin), or on a second signal,
//! the process restores the terminal (an inquire prompt leaves it in raw mode), prints the
//! farewell line if one is set, and exits at once with that status.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use askloop_core::CancelHandle;

use crate::exit::{HUNG_UP, INTERRUPTED, TERMINATED};

/// The handler installed by the first [`Interrupt::get`].
static INSTALLED: OnceLock<Interrupt> = OnceLock::new();

/// What a signal would cancel now, and what it says when it does.
struct Watched {
    handle: CancelHandle,
    /// What is cancelled, e.g. "the run's model call".
    what: &'static str,
}

/// The signal handler, the work it would cancel now, and the signal that cancelled it.
#[derive(Clone)]
pub(crate) struct Interrupt {
    current: Arc<Mutex<Option<Watched>>>,
    /// The exit status of the signal that cancelled the watched work; 0 before any.
    received: Arc<AtomicU8>,
    /// A line printed on stderr when a signal ends the process at once.
    farewell: Arc<Mutex<Option<String>>>,
}

impl Interrupt {
    /// The process's handler, installed (a task on the current runtime) by the first call. On
    /// Unix the handler is in place when this returns.
    pub(crate) fn get() -> Self {
        INSTALLED.get_or_init(Self::install).clone()
    }

    fn install() -> Self {
        let current: Arc<Mutex<Option<Watched>>> = Arc::new(Mutex::new(None));
        let received = Arc::new(AtomicU8::new(0));
        let farewell: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let watched = current.clone();
        let recorded = received.clone();
        let last_words = farewell.clone();
        let mut signals = Signals::register();
        tokio::spawn(async move {
            while let Some(status) = signals.next().await {
                let cancellable = watched.lock().ok().and_then(|slot| {
                    slot.as_ref()
                        .filter(|watched| !watched.handle.is_cancelled())
                        .map(|watched| (watched.handle.clone(), watched.what))
                });
                match cancellable {
                    Some((handle, what)) => {
                        recorded.store(status, Ordering::SeqCst);
                        handle.cancel();
                        let line = match status {
                            INTERRUPTED => format!("cancelling {what} (Ctrl-C again to quit)"),
                            TERMINATED => format!("terminated: cancelling {what}"),
                            _ => format!("hung up: cancelling {what}"),
                        };
                        crate::status::hide();
                        let _ = writeln!(std::io::stderr(), "\n{line}");
                    }
                    None => {
                        crate::status::stop();
                        restore_terminal();
                        if let Some(line) = last_words.lock().ok().and_then(|line| line.clone()) {
                            let _ = writeln!(std::io::stderr(), "{line}");
                        }
                        std::process::exit(i32::from(status));
                    }
                }
            }
        });
        Self {
            current,
            received,
            farewell,
        }
    }

    /// Makes a signal cancel a run's stream until the guard is dropped.
    pub(crate) fn watch(&self, handle: CancelHandle) -> Watching {
        self.watch_as(handle, "the run's model call")
    }

    /// Makes a signal cancel `handle` until the guard is dropped; `what` names the work in
    /// the line printed then.
    pub(crate) fn watch_as(&self, handle: CancelHandle, what: &'static str) -> Watching {
        if let Ok(mut slot) = self.current.lock() {
            *slot = Some(Watched { handle, what });
        }
        Watching {
            current: self.current.clone(),
        }
    }

    /// The exit status of the signal that cancelled watched work (130, 143 or 129), if one
    /// did.
    pub(crate) fn received(&self) -> Option<u8> {
        match self.received.load(Ordering::SeqCst) {
            0 => None,
            status => Some(status),
        }
    }

    /// Sets the line printed when a signal ends the process at once (e.g. how to continue a
    /// chat); `None` for none.
    pub(crate) fn set_farewell(&self, line: Option<String>) {
        if let Ok(mut slot) = self.farewell.lock() {
            *slot = line;
        }
    }
}

/// Leaves the terminal as a shell expects it: out of raw mode (an inquire prompt turns it on,
/// and exiting skips the prompt's own cleanup), with the cursor shown, on a new line. Does
/// nothing when raw mode is off. inquire's crossterm (0.29) is this crate's, so its record of
/// the terminal's original mode is the one restored.
pub(crate) fn restore_terminal() {
    if !crossterm::terminal::is_raw_mode_enabled().unwrap_or(false) {
        return;
    }
    let _ = crossterm::terminal::disable_raw_mode();
    let mut stderr = std::io::stderr();
    let _ = crossterm::execute!(stderr, crossterm::cursor::Show);
    let _ = writeln!(stderr);
}

/// While alive, a signal cancels the watched work.
pub(crate) struct Watching {
    current: Arc<Mutex<Option<Watched>>>,
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

    /// Waits for the next signal and returns its exit status, the one mapping of signals to
    /// statuses: SIGINT 130, SIGTERM 143, SIGHUP 129; `None` when no more can come.
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
