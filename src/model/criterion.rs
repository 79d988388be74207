//! Criteria: what an attempt is judged by. An atom's criteria are its action
//! (`run` exits 0, or the agent finishes) followed by each `check` command and
//! each plausible criterion; an OR atom's one criterion is that an alternative
//! succeeds; the task's is its base case.
//!
//! On the wire and in the state file a criterion is its text — `run`,
//! `check[0]: cargo test`, `criteria[1]: the docs explain the flag`, `or`,
//! `base case: cargo test` — so journals written before this type existed read
//! unchanged.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One criterion an attempt or a task is judged by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Criterion {
    /// The atom's action: its `run` command exits 0 (or its agent finishes).
    Run,
    /// The atom's `check[index]` command exits 0.
    Check {
        /// Position in `check`, from 0.
        index: usize,
        /// The command as written.
        command: String,
    },
    /// The atom's plausible criterion `criteria[index]`, judged by an LLM.
    Plausible {
        /// Position in `criteria`, from 0.
        index: usize,
        /// The criterion as written.
        text: String,
    },
    /// An OR atom: one of its alternatives succeeds.
    Or,
    /// The attempt's changes merge with the work that landed before them
    /// (with isolation): a conflict fails the later attempt.
    Merge,
    /// The task's base case: its command exits 0.
    BaseCase {
        /// The command.
        command: String,
    },
}

impl Criterion {
    /// Returns whether a command decides the criterion (exit 0 passes), as
    /// opposed to a judgement.
    pub fn is_verifiable(&self) -> bool {
        !matches!(self, Criterion::Plausible { .. })
    }
}

impl fmt::Display for Criterion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Criterion::Run => f.write_str("run"),
            Criterion::Check { index, command } if command.is_empty() => write!(f, "check[{index}]"),
            Criterion::Check { index, command } => write!(f, "check[{index}]: {command}"),
            Criterion::Plausible { index, text } if text.is_empty() => write!(f, "criteria[{index}]"),
            Criterion::Plausible { index, text } => write!(f, "criteria[{index}]: {text}"),
            Criterion::Or => f.write_str("or"),
            Criterion::Merge => f.write_str("merge"),
            Criterion::BaseCase { command } => write!(f, "base case: {command}"),
        }
    }
}

impl FromStr for Criterion {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        // `check[0]: cargo test`, or `check[0]` alone when the text is empty.
        let indexed = |prefix: &str| -> Option<(usize, String)> {
            let rest = text.strip_prefix(prefix)?;
            let (index, body) = match rest.split_once("]: ") {
                Some((index, body)) => (index, body),
                None => (rest.strip_suffix(']')?, ""),
            };
            Some((index.parse().ok()?, body.to_string()))
        };
        if text == "run" {
            Ok(Criterion::Run)
        } else if text == "or" {
            Ok(Criterion::Or)
        } else if text == "merge" {
            Ok(Criterion::Merge)
        } else if let Some((index, command)) = indexed("check[") {
            Ok(Criterion::Check { index, command })
        } else if let Some((index, text)) = indexed("criteria[") {
            Ok(Criterion::Plausible { index, text })
        } else if let Some(command) = text.strip_prefix("base case: ") {
            Ok(Criterion::BaseCase {
                command: command.to_string(),
            })
        } else {
            Err(format!(
                "unknown criterion {text:?} (expected run, or, merge, check[N]: ..., criteria[N]: ... or base case: ...)"
            ))
        }
    }
}

impl Serialize for Criterion {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Criterion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Criterion {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Criterion".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_text() {
        let all = [
            Criterion::Run,
            Criterion::Or,
            Criterion::Merge,
            Criterion::Check {
                index: 2,
                command: "grep -q ]: x f".into(),
            },
            Criterion::Plausible {
                index: 0,
                text: "the docs explain it".into(),
            },
            Criterion::BaseCase {
                command: "cargo test".into(),
            },
        ];
        for c in all {
            assert_eq!(c.to_string().parse::<Criterion>(), Ok(c.clone()), "{c}");
        }
        let bare = Criterion::Check {
            index: 0,
            command: String::new(),
        };
        assert_eq!(bare.to_string(), "check[0]");
        assert_eq!("check[0]".parse::<Criterion>(), Ok(bare));
        assert!("base_case".parse::<Criterion>().is_err());
        assert!("check[x]: y".parse::<Criterion>().is_err());
    }
}
