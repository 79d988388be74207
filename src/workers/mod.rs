//! Workers and validators: the implementations of the engine's roles that run
//! commands. [`CommandWorker`] runs an atom's `run` command, or an agent CLI
//! with the rendered prompt on stdin; [`CommandValidator`] runs its `check`
//! commands and the base case. [`command`] is the process runner under both:
//! `bash -c` in its own process group, output capture, cancellation.

pub mod command;
pub mod judge;
pub mod llm;
mod prompt;
pub mod template;
pub mod tools;
mod validator;
mod worker;

pub use judge::LlmValidator;
pub use llm::LlmWorker;
pub use prompt::{AGENT_PROMPT, WORKER_PROMPT, agent_prompt};
pub use validator::CommandValidator;
pub use worker::CommandWorker;
