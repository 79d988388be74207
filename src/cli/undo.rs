//! `aot undo`: put back what landings changed in your files, from the
//! before images git keeps, merged with what you changed since.

use aot::engine::roles::Workspace;
use aot::journal::event::{Event, Record};
use aot::model::{AtomId, Changes};
use aot::store::{self, Store};
use aot::workspace::GitWorkspace;
use serde_json::json;

use super::{CliError, Context, EXIT_OK};

/// Arguments of `aot undo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only this atom's landings (in any run), newest first; without it,
    /// every landing of the last run, newest first
    #[arg(long, value_name = "ID")]
    atom: Option<String>,
}

/// One landing to undo: whose, which attempt, what it changed.
#[derive(Debug, Clone, PartialEq)]
pub struct Owed {
    pub atom: AtomId,
    pub attempt: u32,
    pub changes: Changes,
}

/// The landings `aot undo` puts back, newest first: those of the last run
/// (`atom: None`), or every landing of `atom`; a landing already undone (by
/// a backtrack or an earlier `aot undo`) is not undone again. Pure.
pub fn owed(records: &[Record], atom: Option<&str>) -> Vec<Owed> {
    let start = match atom {
        Some(_) => 0,
        None => records
            .iter()
            .rposition(|r| matches!(r.event, Event::RunStarted { .. }))
            .unwrap_or(0),
    };
    let mut landed: Vec<Owed> = Vec::new();
    for record in &records[start..] {
        match &record.event {
            Event::ChangesLanded {
                atom: who,
                attempt,
                changes,
                ..
            } if atom.is_none_or(|a| a == who.as_str()) => landed.push(Owed {
                atom: who.clone(),
                attempt: *attempt,
                changes: changes.clone(),
            }),
            Event::ChangesUndone { atom: who, .. } => {
                if let Some(at) = landed.iter().rposition(|o| o.atom == *who) {
                    landed.remove(at);
                }
            }
            _ => {}
        }
    }
    landed.reverse();
    landed
}

pub fn run(ctx: &Context, args: Args) -> Result<i32, CliError> {
    if !ctx.state.exists() {
        return Err(aot::state::document::ReadError::NotFound(ctx.state.clone()).into());
    }
    let clock = super::clock_from_env();
    let mut store = Store::new(&ctx.state, clock.clone());
    // No loop may land while landings are undone.
    let _runner = store::acquire_runner(store.paths(), std::process::id())?;
    let (state, _) = store.open()?;
    let contents = aot::journal::read(&store.paths().journal)
        .map_err(|e| CliError::new(format!("{}: {e}", store.paths().journal.display())))?;
    let owed = owed(&contents.records, args.atom.as_deref());
    if owed.is_empty() {
        let what = match &args.atom {
            Some(atom) => format!("`{atom}` has no landing left to undo"),
            None => "the last run landed nothing left to undo".to_string(),
        };
        if ctx.json {
            outln!("{}", json!({"file": ctx.label(), "undone": [], "note": what}));
        } else {
            outln!("{what}");
        }
        return Ok(EXIT_OK);
    }
    let absolute = std::path::absolute(&ctx.state).unwrap_or_else(|_| ctx.state.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::new(format!("cannot start the runtime: {e}")))?;
    let memory = ctx.memory_path();
    let workspace = runtime
        .block_on(GitWorkspace::discover(&absolute, std::slice::from_ref(&memory)))
        .map_err(|e| CliError::new(format!("git cannot work here: {e}")))?
        .ok_or_else(|| {
            CliError::new(format!(
                "{} is not in a git work tree: there, landings are not recorded, so there is nothing aot can put back",
                ctx.label()
            ))
        })?
        // The copies the runs keep stay for the next one.
        .pooling(state.objective.constraints.max_parallel_agents() as usize);
    let landed = state.bound_attempts();
    runtime
        .block_on(workspace.open(&landed))
        .map_err(|e| CliError::new(format!("cannot open the work tree: {e}")))?;
    let mut undone = Vec::new();
    let mut failure = None;
    for landing in &owed {
        let message = format!("aot: undo {} (attempt {})", landing.atom, landing.attempt);
        match runtime.block_on(workspace.undo(&landing.changes, &message)) {
            Ok((put_back, kept)) => {
                let atom = landing.atom.clone();
                let event = Event::ChangesUndone {
                    atom: atom.clone(),
                    changes: put_back.changes.clone(),
                    kept: kept.clone(),
                    commit: put_back.commit.clone(),
                };
                // The atom's work is gone: it (and what depends on it) runs again.
                let why = "its landing was undone (`aot undo`)";
                store
                    .transact(|s| -> Result<(Vec<Event>, ()), ()> {
                        let mut events = vec![event.clone()];
                        if s.graph.atoms.contains_key(&atom) {
                            let reset = aot::correct::Change::Reset(atom.clone());
                            if let Ok(more) = aot::correct::plan(s, &[reset], Some(why), clock.now()) {
                                events.extend(more);
                            }
                        }
                        Ok((events, ()))
                    })?
                    .map_err(|()| CliError::new("the undo could not be recorded"))?;
                undone.push((landing.clone(), put_back.changes, kept));
            }
            Err(error) => {
                failure = Some(format!("could not undo `{}`'s landing: {error}", landing.atom));
                break;
            }
        }
    }
    let _ = runtime.block_on(workspace.close(&landed));
    if ctx.json {
        let list: Vec<_> = undone
            .iter()
            .map(|(o, changes, kept)| json!({"atom": o.atom, "attempt": o.attempt, "changes": changes, "kept": kept}))
            .collect();
        outln!("{}", json!({"file": ctx.label(), "undone": list, "error": failure}));
    } else {
        for (o, changes, kept) in &undone {
            outln!("undid `{}` (attempt {}): {changes}", o.atom, o.attempt);
            if !kept.is_empty() {
                outln!(
                    "  left as you have them (changed since by you or later work): {}",
                    kept.join(", ")
                );
            }
        }
        if !undone.is_empty() {
            outln!("the undone atoms run again at the next `aot start`");
        }
    }
    match failure {
        Some(message) => Err(CliError::new(message)),
        None => Ok(EXIT_OK),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aot::journal::event::RECORD_VERSION;
    use aot::model::time::Timestamp;

    fn records(events: Vec<Event>) -> Vec<Record> {
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Record {
                v: RECORD_VERSION,
                seq: i as u64 + 1,
                at: Timestamp::from_millis(i as u64),
                event,
            })
            .collect()
    }

    fn landed(atom: &str, after: &str) -> Event {
        Event::ChangesLanded {
            atom: atom.into(),
            attempt: 1,
            changes: Changes {
                after: after.into(),
                ..Changes::default()
            },
            commit: None,
        }
    }

    fn undone(atom: &str) -> Event {
        Event::ChangesUndone {
            atom: atom.into(),
            changes: Changes::default(),
            kept: Vec::new(),
            commit: None,
        }
    }

    fn started() -> Event {
        Event::RunStarted { pid: 1, yes: false }
    }

    fn afters(owed: Vec<Owed>) -> Vec<String> {
        owed.into_iter().map(|o| o.changes.after).collect()
    }

    #[test]
    fn the_last_runs_landings_newest_first_and_none_undone_twice() {
        let journal = records(vec![
            started(),
            landed("a", "t1"),
            started(),
            landed("b", "t2"),
            landed("c", "t3"),
            undone("b"),
            landed("d", "t4"),
        ]);
        assert_eq!(afters(owed(&journal, None)), ["t4", "t3"]);
        // One atom's, in any run.
        assert_eq!(afters(owed(&journal, Some("a"))), ["t1"]);
        assert!(owed(&journal, Some("b")).is_empty());
        // After an undo of everything, nothing is owed.
        let mut all = journal.clone();
        all.extend(records(vec![undone("d"), undone("c")]));
        assert!(owed(&all, None).is_empty());
    }
}
