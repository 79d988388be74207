//! GGS hyper-parameters: as written in `constraints.ggs`, and resolved with the
//! defaults of the paper's Appendix B.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// GGS hyper-parameters as written; unset ones take the Appendix B defaults.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GgsParams {
    /// Weight of the distance D in the loss (default 0.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Weight of the process term P (default 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub beta: Option<f64>,
    /// Weight of the budget term Omega (default 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
    /// Weight of replans in Omega (default 0.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w1: Option<f64>,
    /// Weight of elapsed time in Omega (default 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w2: Option<f64>,
    /// Weight of LLM spend in Omega, against `max_tokens`/`max_cost` (default 0.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w3: Option<f64>,
    /// Plateau threshold on |gradient| (default 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    /// Success threshold on D (default 0.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<f64>,
    /// Logical-failure threshold on P (default 0.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rho: Option<f64>,
    /// Abandon threshold on Omega (default 0.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theta: Option<f64>,
}

/// GGS hyper-parameters with every value present.
#[derive(Debug, Clone, Copy, PartialEq)]
#[allow(missing_docs)]
pub struct GgsConfig {
    pub alpha: f64,
    pub beta: f64,
    pub lambda: f64,
    pub w1: f64,
    pub w2: f64,
    pub w3: f64,
    pub epsilon: f64,
    pub delta: f64,
    pub rho: f64,
    pub theta: f64,
}

impl Default for GgsConfig {
    fn default() -> Self {
        Self {
            alpha: 0.6,
            beta: 0.3,
            lambda: 0.4,
            w1: 0.6,
            w2: 0.4,
            w3: 0.4,
            epsilon: 0.1,
            delta: 0.3,
            rho: 0.5,
            theta: 0.8,
        }
    }
}

impl GgsParams {
    /// Returns each parameter as written, by name.
    pub fn written(&self) -> [(&'static str, Option<f64>); 10] {
        [
            ("alpha", self.alpha),
            ("beta", self.beta),
            ("lambda", self.lambda),
            ("w1", self.w1),
            ("w2", self.w2),
            ("w3", self.w3),
            ("epsilon", self.epsilon),
            ("delta", self.delta),
            ("rho", self.rho),
            ("theta", self.theta),
        ]
    }

    /// Returns the parameters with every unset one defaulted.
    pub fn resolve(self) -> GgsConfig {
        let d = GgsConfig::default();
        GgsConfig {
            alpha: self.alpha.unwrap_or(d.alpha),
            beta: self.beta.unwrap_or(d.beta),
            lambda: self.lambda.unwrap_or(d.lambda),
            w1: self.w1.unwrap_or(d.w1),
            w2: self.w2.unwrap_or(d.w2),
            w3: self.w3.unwrap_or(d.w3),
            epsilon: self.epsilon.unwrap_or(d.epsilon),
            delta: self.delta.unwrap_or(d.delta),
            rho: self.rho.unwrap_or(d.rho),
            theta: self.theta.unwrap_or(d.theta),
        }
    }
}
