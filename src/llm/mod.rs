//! The LLM roles' transport: an OpenAI-compatible chat-completions client,
//! its configuration in two tiers, and the cleaning of what models answer.
//!
//! Two tiers, as the seeds have them: **brain** for the reasoning roles
//! (perceiver, planner, meta-validator) and **tool** for the execution roles
//! (worker, validator). Each is configured from the environment —
//! `BRAIN_BASE_URL`, `BRAIN_API_KEY`, `BRAIN_MODEL` and `TOOL_*` — falling back
//! to `OPENAI_BASE_URL` (with its `/v1`; requests go to
//! `{base}/chat/completions`), `OPENAI_API_KEY` and `OPENAI_MODEL`. Keys live
//! only in the environment and in the request header: [`Endpoint`] never
//! prints its key, and error messages have it redacted.

pub mod clean;
mod client;
pub mod record;

pub use client::{
    CallError, Client, FunctionCall, Message, Reply, Retry, Tool, ToolCall, ToolSpec, Usage, estimate_tokens,
    parse_json,
};

use std::fmt;

/// The default base URL when a key is given without one.
pub const OPENAI_BASE: &str = "https://api.openai.com/v1";

/// Which model tier a role calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Reasoning roles: perceiver, planner, meta-validator.
    Brain,
    /// Execution roles: worker, validator.
    Tool,
}

impl Tier {
    fn prefix(self) -> &'static str {
        match self {
            Tier::Brain => "BRAIN",
            Tier::Tool => "TOOL",
        }
    }
}

/// The role a call is made for; sent as the `X-Aot-Role` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// R1: keeps the user's words (`aot align`).
    Perceiver,
    /// R2: drafts and remakes the plan.
    Planner,
    /// R3: the built-in worker.
    Worker,
    /// R4a: judges one plausible criterion.
    Validator,
    /// R4b: judges the objective's criteria.
    MetaValidator,
}

impl Role {
    /// The header value and journal name (`planner`, `meta_validator`, …).
    pub fn name(self) -> &'static str {
        match self {
            Role::Perceiver => "perceiver",
            Role::Planner => "planner",
            Role::Worker => "worker",
            Role::Validator => "validator",
            Role::MetaValidator => "meta_validator",
        }
    }

    /// The tier this role calls.
    pub fn tier(self) -> Tier {
        match self {
            Role::Perceiver | Role::Planner | Role::MetaValidator => Tier::Brain,
            Role::Worker | Role::Validator => Tier::Tool,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where one tier's requests go.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The base URL, `/v1` included, without a trailing slash.
    pub base_url: String,
    /// The model asked for.
    pub model: String,
    key: Option<String>,
}

impl Endpoint {
    /// An endpoint; `key` goes only into the `Authorization` header.
    pub fn new(base_url: &str, model: &str, key: Option<String>) -> Self {
        Self {
            base_url: base_url.trim_end_matches('/').to_string(),
            model: model.to_string(),
            key: key.filter(|k| !k.is_empty()),
        }
    }

    /// The chat-completions URL.
    pub fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url)
    }

    pub(crate) fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The key, for redacting it from text that could carry it.
    pub(crate) fn secrets(&self) -> Vec<String> {
        self.key.iter().cloned().collect()
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "[set]"))
            .finish()
    }
}

/// Both tiers as configured (`None`: no model for that tier).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tiers {
    /// The reasoning tier.
    pub brain: Option<Endpoint>,
    /// The execution tier.
    pub tool: Option<Endpoint>,
}

impl Tiers {
    /// Reads both tiers through `var` (the environment, in the binary).
    /// A tier is configured when its model is named; a base URL or key
    /// without a model is an error that names the variable to set.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let tier = |tier: Tier| -> Result<Option<Endpoint>, String> {
            let get = |name: &str| {
                var(&format!("{}_{name}", tier.prefix()))
                    .or_else(|| var(&format!("OPENAI_{name}")))
                    .filter(|v| !v.trim().is_empty())
            };
            let (base, key, model) = (get("BASE_URL"), get("API_KEY"), get("MODEL"));
            match model {
                Some(model) => Ok(Some(Endpoint::new(
                    base.as_deref().unwrap_or(OPENAI_BASE),
                    model.trim(),
                    key,
                ))),
                None if base.is_some() || key.is_some() => Err(format!(
                    "{p}_MODEL (or OPENAI_MODEL) is not set: name the model the {t} tier should call",
                    p = tier.prefix(),
                    t = tier.prefix().to_lowercase()
                )),
                None => Ok(None),
            }
        };
        Ok(Self {
            brain: tier(Tier::Brain)?,
            tool: tier(Tier::Tool)?,
        })
    }

    /// The endpoint `role` calls, if its tier is configured.
    pub fn for_role(&self, role: Role) -> Option<&Endpoint> {
        match role.tier() {
            Tier::Brain => self.brain.as_ref(),
            Tier::Tool => self.tool.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(vars: &[(&str, &str)]) -> Result<Tiers, String> {
        Tiers::from_env(|name| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string()))
    }

    #[test]
    fn each_tier_falls_back_to_the_openai_variables() {
        let t = tiers(&[
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"),
            ("OPENAI_API_KEY", "sk-shared"),
            ("OPENAI_MODEL", "small"),
            ("BRAIN_MODEL", "big"),
            ("BRAIN_API_KEY", "sk-brain"),
        ])
        .unwrap();
        let brain = t.brain.unwrap();
        assert_eq!(brain.url(), "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!((brain.model.as_str(), brain.key()), ("big", Some("sk-brain")));
        let tool = t.tool.unwrap();
        assert_eq!((tool.model.as_str(), tool.key()), ("small", Some("sk-shared")));
    }

    #[test]
    fn nothing_set_is_no_llm_and_a_key_without_a_model_is_an_error() {
        assert_eq!(tiers(&[]).unwrap(), Tiers::default());
        let error = tiers(&[("OPENAI_API_KEY", "sk-x")]).unwrap_err();
        assert!(error.contains("BRAIN_MODEL (or OPENAI_MODEL)"), "{error}");
        assert!(!error.contains("sk-x"));
        let t = tiers(&[("OPENAI_API_KEY", "sk-x"), ("OPENAI_MODEL", "m")]).unwrap();
        assert_eq!(t.brain.unwrap().base_url, OPENAI_BASE);
    }

    #[test]
    fn an_endpoint_never_prints_its_key() {
        let e = Endpoint::new("http://x/v1", "m", Some("sk-very-secret".into()));
        assert!(!format!("{e:?}").contains("sk-very-secret"));
    }

    #[test]
    fn roles_map_to_tiers_and_header_names() {
        assert_eq!(Role::Planner.tier(), Tier::Brain);
        assert_eq!(Role::Validator.tier(), Tier::Tool);
        assert_eq!(Role::MetaValidator.name(), "meta_validator");
    }
}
