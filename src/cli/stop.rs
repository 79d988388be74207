//! `aot stop`: ask a running loop to stop; it cancels in-flight work, saves,
//! and exits with reason `manual`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use aot::journal::event::Event;
use aot::model::time::SystemClock;
use aot::state::Control;
use aot::store::{self, Store};
use serde_json::json;

use super::{CliError, Context, EXIT_OK};

/// Arguments of `aot stop`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Why (recorded as control.stop_reason and in the stop record)
    #[arg(long)]
    reason: Option<String>,
    /// Return only when the runner has exited (at most 60 s)
    #[arg(long)]
    wait: bool,
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    if !ctx.state.exists() {
        return Err(aot::state::document::ReadError::NotFound(ctx.state.clone()).into());
    }
    let mut store = Store::new(&ctx.state, Arc::new(SystemClock));
    let paths = store.paths().clone();
    let reason = args.reason.clone();
    let done = store.transact(|s| {
        let control = Control {
            stop_requested: true,
            stop_reason: reason,
            ..s.control.clone()
        };
        Ok::<_, CliError>((vec![Event::ControlSet { control }], ()))
    })??;
    super::report_set_aside(&done.set_aside, ctx.json);
    let runner = store::running_pid(&paths);
    let mut exited = false;
    if let (Some(_), true) = (runner, args.wait) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while store::running_pid(&paths).is_some() {
            if Instant::now() > deadline {
                return Err(
                    CliError::new("the runner did not exit within 60 s").hint("`aot status` shows what it is doing")
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        exited = true;
    }
    if ctx.json {
        outln!(
            "{}",
            json!({"file": ctx.label(), "runner_pid": runner, "exited": exited, "set_aside": done.set_aside})
        );
    } else {
        match runner {
            Some(pid) if exited => outln!("{}: aot (pid {pid}) stopped", ctx.label()),
            Some(pid) => outln!("{}: stop requested; aot (pid {pid}) is stopping", ctx.label()),
            None => outln!("{}: nothing is running; the request is recorded", ctx.label()),
        }
    }
    Ok(EXIT_OK)
}
