//! Cancellation as a value: a token that any thread can trip, checked where work can stop.
//!
//! A body in a tight JS loop or a shell blocked in a syscall holds its thread, so cancel cannot
//! be a message to the actor doing the work: the token is checked by QuickJS's interrupt
//! handler and wakes every `cancelled().await`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

#[derive(Clone, Default)]
pub struct CancelToken(Arc<Control>);

#[derive(Default)]
struct Control {
    cancelled: AtomicBool,
    wake: Notify,
}

impl std::fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CancelToken({})", self.is_cancelled())
    }
}

impl CancelToken {
    pub fn cancel(&self) {
        self.0.cancelled.store(true, Ordering::SeqCst);
        self.0.wake.notify_waiters();
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.cancelled.load(Ordering::SeqCst)
    }

    /// Resolves once the token is cancelled (at once if it already is).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.0.wake.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_on_cancel_and_late_waiters_return_at_once() {
        let t = CancelToken::default();
        let waiter = tokio::spawn({
            let t = t.clone();
            async move { t.cancelled().await }
        });
        tokio::task::yield_now().await;
        t.cancel();
        waiter.await.expect("woken");
        t.cancelled().await;
        assert!(t.is_cancelled());
    }
}
