//! What a call to a model leaves behind: its `llm_called` record (tokens,
//! cost, latency, the error if it failed) and, when kept, the conversation
//! as a JSON file under the state file's `.aot/llm/` for `aot log --llm`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{CallError, Reply, Role};
use crate::journal::event::Event;
use crate::model::AtomId;
use crate::state::LlmSettings;

/// The `llm_called` record of one call by `role`. `asked` is the model the
/// request named (a failed call has no answering model); the price is the
/// answering model's from `llm.prices`, else the asked one's.
pub fn called(
    role: Role,
    call: &Result<Reply, CallError>,
    asked: &str,
    atom: Option<&AtomId>,
    llm: Option<&LlmSettings>,
    kept: Option<String>,
) -> Event {
    let price = |model: &str| {
        llm.and_then(|l| l.prices.get(model).or_else(|| l.prices.get(asked)))
            .copied()
    };
    let (model, usage, latency, attempts, error) = match call {
        Ok(reply) => (&reply.model, reply.usage, reply.latency, reply.attempts, None),
        Err(e) => (
            &asked.to_string(),
            e.usage,
            e.latency,
            e.attempts,
            Some(e.message.clone()),
        ),
    };
    Event::LlmCalled {
        role: role.name().into(),
        model: model.clone(),
        prompt_tokens: usage.prompt,
        completion_tokens: usage.completion,
        estimated: usage.estimated,
        latency_ms: latency.as_millis() as u64,
        attempts,
        error,
        atom: atom.cloned(),
        cost: price(model).map(|p| p.cost(usage.prompt, usage.completion)),
        kept,
    }
}

/// Where conversations are kept: a folder, and the folder the journal
/// names their paths from (the state file's).
#[derive(Debug)]
pub struct Keeper {
    folder: PathBuf,
    base: PathBuf,
    counter: AtomicU64,
}

impl Keeper {
    /// Keeps conversations in `folder`, named relative to `base`.
    pub fn new(folder: PathBuf, base: &Path) -> Self {
        Self {
            folder,
            base: base.to_path_buf(),
            counter: AtomicU64::new(0),
        }
    }

    /// A new file name for a conversation started at `millis`.
    pub fn name(&self, millis: u64) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        self.folder.join(format!("{millis}-{}-{n}.json", std::process::id()))
    }

    /// Keeps one conversation of `role` that started at `millis`: its
    /// messages and each call's answer (or error). Returns its path as
    /// journaled, `None` when it could not be written.
    pub async fn conversation(
        &self,
        millis: u64,
        role: crate::llm::Role,
        messages: &[crate::llm::Message],
        calls: &[Result<Reply, CallError>],
    ) -> Option<String> {
        let answers: Vec<serde_json::Value> = calls
            .iter()
            .map(|c| match c {
                Ok(reply) => serde_json::json!({"model": reply.model, "answer": reply.content}),
                Err(e) => serde_json::json!({"error": e.message}),
            })
            .collect();
        let body = serde_json::json!({"role": role.name(), "messages": messages, "answers": answers});
        self.write(&self.name(millis), &body).await
    }

    /// Writes `body` at `path` (from [`Keeper::name`]); the path as
    /// journaled, or `None` when it could not be written.
    pub async fn write(&self, path: &Path, body: &serde_json::Value) -> Option<String> {
        tokio::fs::create_dir_all(&self.folder).await.ok()?;
        tokio::fs::write(path, serde_json::to_vec_pretty(body).ok()?)
            .await
            .ok()?;
        // Named from the state file's folder whether the path came relative
        // (`--state aot.yaml`) or absolute.
        let full = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let shown = full.strip_prefix(&self.base).unwrap_or(&full);
        Some(shown.display().to_string())
    }
}
