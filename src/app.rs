//! What every call of a `gm serve` can use, fixed for the life of the server.

use std::time::Duration;

use actix::Addr;
use gm_actors::js_engine::JsEngines;
use gm_actors::transport::StdoutWriter;

use crate::run_state::RunStateFile;
use crate::server::surface::Surface;
use crate::verbs::Ctx;

pub struct App {
    pub ctx: Ctx,
    pub surface: Surface,
    /// Where the run's state is kept between gm processes.
    pub run_file: RunStateFile,
    /// The step budget of a new run, unless its first step sets one.
    pub step_budget: u64,
    pub js: JsEngines,
    pub out: Addr<StdoutWriter>,
    pub max_line_bytes: usize,
    pub page_size: usize,
    /// How often a long call with a progressToken reports progress.
    pub progress_every: Duration,
}
