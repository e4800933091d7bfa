//! What the host functions of a warm context share with the body it serves: filled in when a
//! body starts, read by the runtime's host functions, its interrupt handler and the module
//! resolver.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{CancelToken, ConsoleLine, JsHost};

/// What the host functions of a warm context need from the body they serve, filled in when
/// the body starts.
pub(super) struct RunSlot {
    pub(super) host: Mutex<Option<Arc<dyn JsHost>>>,
    pub(super) console: Mutex<Vec<ConsoleLine>>,
    pub(super) deadline: Mutex<Option<Instant>>,
    pub(super) cancel: Mutex<CancelToken>,
}

impl RunSlot {
    pub(super) fn host(&self) -> Option<Arc<dyn JsHost>> {
        self.host.lock().ok().and_then(|h| h.clone())
    }

    pub(super) fn interrupted(&self) -> bool {
        let cancelled = self.cancel.lock().map(|c| c.is_cancelled()).unwrap_or(false);
        let late = self.deadline.lock().ok().and_then(|d| *d).is_some_and(|d| Instant::now() >= d);
        cancelled || late
    }
}
