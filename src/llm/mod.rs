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

/// One tier's configuration as the environment (and the state file's
/// `llm:` section) leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Setting {
    /// A model is named and an endpoint is known.
    Ready(Endpoint),
    /// Nothing names this tier.
    Unset,
    /// A base URL or key is set (the variables named), but no model.
    NoModel(Vec<String>),
    /// The state file names a model, but nothing in the environment says where it is.
    NoEndpoint(String),
}

/// Both tiers as configured. Reading them never fails: a tier that is not
/// (or half) configured says what to set only when a role calls it
/// ([`Tiers::endpoint`]), so a plan that needs no model never stops for
/// model settings it does not use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiers {
    brain: Setting,
    tool: Setting,
}

impl Default for Tiers {
    fn default() -> Self {
        Self {
            brain: Setting::Unset,
            tool: Setting::Unset,
        }
    }
}

impl Tiers {
    /// Reads both tiers through `var` (the environment, in the binary):
    /// `{BRAIN,TOOL}_{BASE_URL,API_KEY,MODEL}`, each falling back to its
    /// `OPENAI_*` variable.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Self {
        Self::resolve(var, None, None)
    }

    /// As [`Tiers::from_env`], with the models the state file's `llm:`
    /// section names for each tier over the environment's.
    pub fn resolve(var: impl Fn(&str) -> Option<String>, brain: Option<&str>, tool: Option<&str>) -> Self {
        let tier = |tier: Tier, declared: Option<&str>| -> Setting {
            let get = |name: &str| -> Option<(String, String)> {
                [format!("{}_{name}", tier.prefix()), format!("OPENAI_{name}")]
                    .into_iter()
                    .find_map(|var_name| {
                        let value = var(&var_name).filter(|v| !v.trim().is_empty())?;
                        Some((var_name, value))
                    })
            };
            let (base, key, model) = (get("BASE_URL"), get("API_KEY"), get("MODEL"));
            let declared = declared.map(str::trim).filter(|m| !m.is_empty());
            if base.is_none() && key.is_none() && model.is_none() {
                return match declared {
                    Some(model) => Setting::NoEndpoint(model.to_string()),
                    None => Setting::Unset,
                };
            }
            match declared
                .map(str::to_string)
                .or_else(|| model.map(|(_, m)| m.trim().to_string()))
            {
                Some(model) => Setting::Ready(Endpoint::new(
                    base.as_ref().map_or(OPENAI_BASE, |(_, b)| b.as_str()),
                    &model,
                    key.map(|(_, k)| k),
                )),
                None => Setting::NoModel(base.into_iter().chain(key).map(|(name, _)| name).collect()),
            }
        };
        Self {
            brain: tier(Tier::Brain, brain),
            tool: tier(Tier::Tool, tool),
        }
    }

    fn setting(&self, tier: Tier) -> &Setting {
        match tier {
            Tier::Brain => &self.brain,
            Tier::Tool => &self.tool,
        }
    }

    /// The endpoint `role` calls, if its tier is configured.
    pub fn for_role(&self, role: Role) -> Option<&Endpoint> {
        self.endpoint(role).ok()
    }

    /// The endpoint `role` calls, or what to set so that it has one (no
    /// value of any variable, only names).
    pub fn endpoint(&self, role: Role) -> Result<&Endpoint, String> {
        let tier = role.tier();
        let p = tier.prefix();
        let t = p.to_lowercase();
        match self.setting(tier) {
            Setting::Ready(endpoint) => Ok(endpoint),
            Setting::Unset => Err(format!(
                "no model is configured for the {t} tier, which the {role} calls: set {p}_MODEL or OPENAI_MODEL (with {p}_API_KEY or OPENAI_API_KEY, and {p}_BASE_URL or OPENAI_BASE_URL for a server other than OpenAI's; docs/llm.md)"
            )),
            Setting::NoModel(set) => Err(format!(
                "{} {} set, but no model is named for the {t} tier, which the {role} calls: set {p}_MODEL or OPENAI_MODEL, or llm.{t} in the state file (docs/llm.md)",
                set.join(" and "),
                if set.len() == 1 { "is" } else { "are" },
            )),
            Setting::NoEndpoint(model) => Err(format!(
                "the state file names `{model}` for the {t} tier, which the {role} calls, but no endpoint is configured: set {p}_API_KEY or OPENAI_API_KEY, or {p}_BASE_URL or OPENAI_BASE_URL (docs/llm.md)"
            )),
        }
    }

    /// Whether nothing at all configures `role`'s tier (as opposed to a
    /// tier half configured, which is worth an error where a model is wanted).
    pub fn untouched(&self, role: Role) -> bool {
        *self.setting(role.tier()) == Setting::Unset
    }

    /// How `role`'s tier stands, in a few words: its model and host, or
    /// what is missing (for `aot start`'s line of the models a plan may call).
    pub fn shown(&self, role: Role) -> String {
        let p = role.tier().prefix();
        match self.setting(role.tier()) {
            Setting::Ready(endpoint) => {
                let host = endpoint
                    .base_url
                    .split("://")
                    .nth(1)
                    .and_then(|rest| rest.split('/').next())
                    .unwrap_or(&endpoint.base_url);
                // Credentials in the URL (`https://user:pass@host`) are not shown.
                let host = host.rsplit('@').next().unwrap_or(host);
                format!("`{}` at {host}", endpoint.model)
            }
            Setting::Unset => format!("not configured ({p}_MODEL or OPENAI_MODEL)"),
            Setting::NoModel(set) => format!("no model named ({} set; {p}_MODEL or OPENAI_MODEL)", set.join(", ")),
            Setting::NoEndpoint(model) => format!("`{model}` has no endpoint ({p}_API_KEY or OPENAI_API_KEY)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiers(vars: &[(&str, &str)]) -> Tiers {
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
        ]);
        let brain = t.for_role(Role::Planner).unwrap();
        assert_eq!(brain.url(), "http://127.0.0.1:9/v1/chat/completions");
        assert_eq!((brain.model.as_str(), brain.key()), ("big", Some("sk-brain")));
        let tool = t.for_role(Role::Worker).unwrap();
        assert_eq!((tool.model.as_str(), tool.key()), ("small", Some("sk-shared")));
        assert_eq!(t.shown(Role::Planner), "`big` at 127.0.0.1:9");
    }

    #[test]
    fn reading_the_settings_never_fails_and_a_role_learns_what_to_set_when_it_calls() {
        // Nothing set: no model, and no error until a role calls one.
        let none = tiers(&[]);
        assert_eq!(none, Tiers::default());
        let error = none.endpoint(Role::Worker).unwrap_err();
        assert!(error.contains("TOOL_MODEL or OPENAI_MODEL"), "{error}");
        // A key exported for other tools, and no model: still no error on reading.
        let half = tiers(&[("OPENAI_API_KEY", "sk-x")]);
        let error = half.endpoint(Role::Planner).unwrap_err();
        assert!(error.contains("OPENAI_API_KEY is set"), "{error}");
        assert!(error.contains("BRAIN_MODEL or OPENAI_MODEL"), "{error}");
        assert!(!error.contains("sk-x"), "{error}");
        assert!(!half.shown(Role::Validator).contains("sk-x"));
        let t = tiers(&[("OPENAI_API_KEY", "sk-x"), ("OPENAI_MODEL", "m")]);
        assert_eq!(t.for_role(Role::Planner).unwrap().base_url, OPENAI_BASE);
    }

    #[test]
    fn the_state_file_names_the_model_and_the_environment_the_endpoint() {
        let var = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-x".to_string());
        let t = Tiers::resolve(var, Some("big"), None);
        assert_eq!(t.for_role(Role::Planner).unwrap().model, "big");
        assert!(t.endpoint(Role::Worker).unwrap_err().contains("no model is named"));
        // A model in the file and nothing in the environment: no endpoint to call.
        let t = Tiers::resolve(|_: &str| None, Some("big"), None);
        let error = t.endpoint(Role::MetaValidator).unwrap_err();
        assert!(error.contains("`big`") && error.contains("no endpoint"), "{error}");
    }

    #[test]
    fn the_shown_host_carries_no_credentials() {
        let t = tiers(&[
            ("OPENAI_BASE_URL", "https://user:pw@llm.example/v1"),
            ("OPENAI_MODEL", "m"),
        ]);
        assert_eq!(t.shown(Role::Worker), "`m` at llm.example");
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
