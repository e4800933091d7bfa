//! Warm contexts kept ready in each engine, and the engines themselves: several threads, a
//! body sent to the least busy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use actix::prelude::*;

use super::runtime::Warm;
use super::{JsEngine, Outcome, Run};

/// Warm contexts kept ready per engine: creating a runtime, a context and the `gm` prelude
/// costs ~0.25 ms, so it is done ahead of time, off the path of the next body. Bodies rotate
/// over the engines, so each has time to warm its next context.
const POOL: usize = 1;
pub(super) const WARM_UP_DELAY: Duration = Duration::from_millis(20);

impl JsEngine {
    /// Drops used contexts and warms new ones, in the background of the engine's thread.
    pub(super) fn refill(&mut self, ctx: &mut Context<Self>) {
        if self.refilling {
            return;
        }
        self.refilling = true;
        let retired = std::mem::take(&mut self.retired);
        let need = POOL.saturating_sub(self.pool.len());
        let work = async move {
            drop(retired);
            let mut warmed = Vec::new();
            for _ in 0..need {
                match Warm::new().await {
                    Ok(w) => warmed.push(w),
                    Err(e) => crate::stderr_line!("gm: cannot prepare a JS context: {e}"),
                }
            }
            warmed
        };
        ctx.spawn(work.into_actor(self).map(|warmed, act, ctx| {
            act.pool.extend(warmed);
            act.refilling = false;
            if !act.retired.is_empty() {
                act.refill(ctx);
            }
        }));
    }
}

/// Several engines, each on a thread of its own: a body busy in a tight loop (in the
/// background, say) holds one thread while the others keep serving.
#[derive(Clone)]
pub struct JsEngines {
    /// Started on first use (or by [`JsEngines::start`]), so they cost nothing at gm's start.
    engines: Arc<OnceLock<Vec<Engine>>>,
    count: usize,
    next: Arc<AtomicUsize>,
}

/// An engine and the number of bodies running on it.
type Engine = (Addr<JsEngine>, Arc<AtomicUsize>);

/// Engines running at least one body, in this process (what gm's telemetry reports).
static ENGINES_BUSY: AtomicUsize = AtomicUsize::new(0);

/// How many engines are running a body now.
pub fn engines_busy() -> usize {
    ENGINES_BUSY.load(Ordering::Relaxed)
}

/// Counts a body against its engine until it ends, however its caller goes away.
struct Busy(Arc<AtomicUsize>);

impl Busy {
    fn count(on: Arc<AtomicUsize>) -> Self {
        // An engine's first body makes it busy; its last one, idle.
        if on.fetch_add(1, Ordering::SeqCst) == 0 {
            ENGINES_BUSY.fetch_add(1, Ordering::Relaxed);
        }
        Busy(on)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        if self.0.fetch_sub(1, Ordering::SeqCst) == 1 {
            ENGINES_BUSY.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl JsEngines {
    pub fn new(n: usize) -> Self {
        Self { engines: Arc::default(), count: n.max(1), next: Arc::default() }
    }

    /// Starts the engine threads now rather than at the first body. Call it inside an actix
    /// system.
    pub fn start(&self) {
        self.engines();
    }

    fn engines(&self) -> &[Engine] {
        self.engines.get_or_init(|| (0..self.count).map(|_| (JsEngine::spawn(), Arc::default())).collect())
    }

    /// Runs a body on the engine with the fewest bodies running, taking turns among equals.
    pub async fn run(&self, run: Run) -> Result<Outcome, MailboxError> {
        let engines = self.engines();
        let n = engines.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let (addr, busy) = (0..n)
            .map(|i| &engines[(start + i) % n])
            .min_by_key(|(_, busy)| busy.load(Ordering::SeqCst))
            .map(|(a, b)| (a.clone(), b.clone()))
            .ok_or(MailboxError::Closed)?;
        let _busy = Busy::count(busy);
        addr.send(run).await
    }
}
