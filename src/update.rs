//! Auto-update for `gm serve`: starts the Updater actor (crate `gm-actors`) with the settings
//! the environment gives, and writes what it reports into the run log as `update` events.
//! The one-shot CLI does not update.

use actix::prelude::*;
use gm_actors::log_writer::{Event, LogWriter};
use gm_actors::updater::{Config, UpdateEvent, Updater};

/// Starts the Updater. With updates off it logs one `update` event saying why and makes no
/// request; with them on it checks at once, on its own thread, and every 15 minutes.
pub fn start(log: Addr<LogWriter>) -> Addr<Updater> {
    let sink = UpdateLog { log }.start();
    Updater::spawn(Config::from_env(), sink.recipient())
}

/// Hands the Updater's events to the run log (a small actor, so the Updater needs no handle
/// on the log's event shape).
struct UpdateLog {
    log: Addr<LogWriter>,
}

impl Actor for UpdateLog {
    type Context = Context<Self>;
}

impl Handler<UpdateEvent> for UpdateLog {
    type Result = ();
    fn handle(&mut self, event: UpdateEvent, _: &mut Context<Self>) {
        self.log.do_send(Event::serialized("update", &event));
    }
}
