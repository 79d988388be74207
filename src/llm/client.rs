//! One chat-completions call, with bounded retries. A 429 (its `Retry-After`
//! honoured), a 5xx, a timeout or a dropped connection is retried with
//! exponential backoff (backon); when the retries are spent the call is an
//! environmental failure. A reply without usable content, or whose JSON does
//! not parse, gets one repair re-ask ([`Client::json`]); then it is a logical
//! failure.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::{Endpoint, Role, clean};
use crate::model::FailureClass;
use crate::model::secret;

/// How often and how patiently a call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The first backoff.
    pub min_delay: Duration,
    /// The longest backoff.
    pub max_delay: Duration,
    /// The longest `Retry-After` obeyed; a longer one ends the retries.
    pub max_retry_after: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: 4,
            min_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (a tool's result, for `tool`).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub content: String,
    /// The tools an assistant message calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `tool`: the call this is the result of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?.unwrap_or_default())
}

/// A function the model may call (native function calling).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The function.
    pub function: ToolSpec,
}

/// A function's name, what it does, and its parameters as a JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    /// The name the model calls.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its parameters (a JSON Schema object).
    pub parameters: serde_json::Value,
}

impl Tool {
    /// A function tool.
    pub fn function(name: &str, description: &str, parameters: serde_json::Value) -> Self {
        Self {
            kind: "function",
            function: ToolSpec {
                name: name.into(),
                description: description.into(),
                parameters,
            },
        }
    }
}

/// A call of a tool in an assistant message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, echoed by the tool message with its result.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// The function and its arguments.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

/// A function called, with its arguments as the model wrote them (JSON text:
/// untrusted, parsed and checked by whoever runs the tool).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, a JSON object as text.
    #[serde(default)]
    pub arguments: String,
}

impl Message {
    fn text(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::text("system", content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::text("user", content)
    }

    /// An assistant message (a reply sent back, e.g. before a repair re-ask).
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::text("assistant", content)
    }

    /// The assistant's turn as it came: its text and the tools it called.
    pub fn assistant_calls(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            tool_calls,
            ..Self::text("assistant", content)
        }
    }

    /// A tool's result, answering the call `id`.
    pub fn tool_result(id: &str, content: impl Into<String>) -> Self {
        Self {
            tool_call_id: Some(id.into()),
            ..Self::text("tool", content)
        }
    }
}

/// Tokens a call used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt: u64,
    /// Reply tokens.
    pub completion: u64,
    /// Whether these are aot's estimate (the reply reported none).
    pub estimated: bool,
}

impl Usage {
    /// Prompt and reply tokens together.
    pub fn total(&self) -> u64 {
        self.prompt + self.completion
    }
}

/// A model's answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// The message text.
    pub content: String,
    /// The tools the model called (native function calling), in order.
    pub tool_calls: Vec<ToolCall>,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered (as the reply names it).
    pub model: String,
    /// From the first request to the answer, retries included.
    pub latency: Duration,
    /// HTTP attempts made.
    pub attempts: u32,
}

/// A call that failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    /// Environmental: the provider or the network (retries spent, refused
    /// key); logical: the request or the answer.
    pub class: FailureClass,
    /// What went wrong, key redacted.
    pub message: String,
    /// HTTP attempts made.
    pub attempts: u32,
    /// From the first request to the failure.
    pub latency: Duration,
    /// Tokens the failed call still used (a reply that did not parse).
    pub usage: Usage,
}

/// An OpenAI-compatible chat-completions client for one endpoint.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    endpoint: Arc<Endpoint>,
    retry: Retry,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("endpoint", &self.endpoint).finish()
    }
}

/// One failed HTTP attempt, and whether another may succeed.
#[derive(Debug)]
struct Attempt {
    transient: bool,
    class: FailureClass,
    message: String,
    retry_after: Option<Duration>,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    max_tokens: u32,
    #[serde(skip_serializing_if = "<[Tool]>::is_empty")]
    tools: &'a [Tool],
}

#[derive(Deserialize)]
struct ChatResponse {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
    model: Option<String>,
}

#[derive(Deserialize)]
struct Choice {
    message: Option<ChoiceMessage>,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
}

#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// aot's estimate of the tokens in `text` when a reply reports none: about
/// four bytes a token for English and code.
pub fn estimate_tokens(text: &str) -> u64 {
    (text.len() as u64).div_ceil(4)
}

impl Client {
    /// A client for `endpoint`; each HTTP attempt may take up to `timeout`.
    pub fn new(endpoint: Endpoint, timeout: Duration, retry: Retry) -> Result<Self, String> {
        // reqwest is built without a default crypto provider; ring is ours.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("aot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("cannot set up the HTTP client: {e}"))?;
        Ok(Self {
            http,
            endpoint: Arc::new(endpoint),
            retry,
        })
    }

    /// The endpoint this client calls.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Sends `messages` for `role` and returns the reply's text, retrying
    /// provider faults. `max_tokens` bounds the reply.
    pub async fn chat(&self, role: Role, messages: &[Message], max_tokens: u32) -> Result<Reply, CallError> {
        self.chat_with_tools(role, messages, &[], max_tokens).await
    }

    /// Like [`Client::chat`], offering `tools` for the model to call: the
    /// reply's `tool_calls` say which, with their arguments as written.
    pub async fn chat_with_tools(
        &self,
        role: Role,
        messages: &[Message],
        tools: &[Tool],
        max_tokens: u32,
    ) -> Result<Reply, CallError> {
        let started = Instant::now();
        let attempts = AtomicU32::new(0);
        let backoff = ExponentialBuilder::default()
            .with_min_delay(self.retry.min_delay)
            .with_max_delay(self.retry.max_delay)
            .with_max_times(self.retry.attempts.saturating_sub(1) as usize)
            .with_jitter();
        let max_retry_after = self.retry.max_retry_after;
        let result = (|| async {
            attempts.fetch_add(1, Ordering::Relaxed);
            self.attempt(role, messages, tools, max_tokens).await
        })
        .retry(backoff)
        .when(|e: &Attempt| e.transient)
        .adjust(|e: &Attempt, next: Option<Duration>| match (e.retry_after, next) {
            (_, None) => None,
            (Some(after), Some(_)) if after > max_retry_after => None,
            (Some(after), Some(_)) => Some(after),
            (None, next) => next,
        })
        .await;
        let attempts = attempts.load(Ordering::Relaxed);
        let latency = started.elapsed();
        let secrets = self.endpoint.secrets();
        match result {
            Ok(mut reply) => {
                reply.latency = latency;
                reply.attempts = attempts;
                if reply.usage.prompt == 0 && reply.usage.completion == 0 {
                    reply.usage = Usage {
                        prompt: messages.iter().map(|m| estimate_tokens(&m.content) + 4).sum(),
                        completion: estimate_tokens(&reply.content)
                            + reply
                                .tool_calls
                                .iter()
                                .map(|c| estimate_tokens(&c.function.arguments) + 4)
                                .sum::<u64>(),
                        estimated: true,
                    };
                }
                Ok(reply)
            }
            Err(e) => {
                let retried = if e.transient && attempts > 1 {
                    format!(" (after {attempts} attempts)")
                } else {
                    String::new()
                };
                Err(CallError {
                    class: e.class,
                    message: secret::redact(&format!("{}{retried}", e.message), &secrets),
                    attempts,
                    latency,
                    usage: Usage::default(),
                })
            }
        }
    }

    async fn attempt(
        &self,
        role: Role,
        messages: &[Message],
        tools: &[Tool],
        max_tokens: u32,
    ) -> Result<Reply, Attempt> {
        let url = self.endpoint.url();
        let mut request = self
            .http
            .post(&url)
            .header("X-Aot-Role", role.name())
            .json(&ChatRequest {
                model: &self.endpoint.model,
                messages,
                max_tokens,
                tools,
            });
        if let Some(key) = self.endpoint.key() {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| transport(&url, &e))?;
        let status = response.status();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let body = response.bytes().await.map_err(|e| transport(&url, &e))?;
        if !status.is_success() {
            let detail = error_detail(&body);
            let code = status.as_u16();
            let (transient, class) = match code {
                429 | 408 => (true, FailureClass::Environmental),
                500..=599 => (true, FailureClass::Environmental),
                400 | 413 | 422 => (false, FailureClass::Logical),
                _ => (false, FailureClass::Environmental),
            };
            return Err(Attempt {
                transient,
                class,
                message: format!("{url} answered {status}{detail}"),
                retry_after,
            });
        }
        let parsed: ChatResponse = serde_json::from_slice(&body).map_err(|e| Attempt {
            transient: false,
            class: FailureClass::Logical,
            message: format!("{url} answered something that is not a chat completion: {e}"),
            retry_after: None,
        })?;
        let message = parsed.choices.into_iter().next().and_then(|c| c.message);
        let (content, tool_calls) =
            message.map_or_else(Default::default, |m| (m.content.unwrap_or_default(), m.tool_calls));
        let usage = parsed.usage.map_or_else(Usage::default, |u| Usage {
            prompt: u.prompt_tokens.unwrap_or(0),
            completion: u.completion_tokens.unwrap_or(0),
            estimated: false,
        });
        Ok(Reply {
            content,
            tool_calls,
            usage,
            model: parsed.model.unwrap_or_else(|| self.endpoint.model.clone()),
            latency: Duration::ZERO,
            attempts: 0,
        })
    }

    /// Asks for a JSON answer and parses it into `T`: reasoning, fences and
    /// prose around the object are stripped; an answer that still does not
    /// parse is re-asked once with the parser's complaint; then the call is
    /// a logical failure. Every call made is returned for the record, in order.
    pub async fn json<T: DeserializeOwned>(
        &self,
        role: Role,
        messages: &[Message],
        max_tokens: u32,
    ) -> (Result<T, CallError>, Vec<Result<Reply, CallError>>) {
        let mut calls = Vec::new();
        let mut conversation = messages.to_vec();
        for round in 0..2 {
            let reply = match self.chat(role, &conversation, max_tokens).await {
                Ok(reply) => reply,
                Err(e) => {
                    calls.push(Err(e.clone()));
                    return (Err(e), calls);
                }
            };
            let parsed = parse_json::<T>(&reply.content);
            calls.push(Ok(reply.clone()));
            match parsed {
                Ok(value) => return (Ok(value), calls),
                Err(problem) if round == 0 => {
                    conversation.push(Message::assistant(reply.content.clone()));
                    conversation.push(Message::user(format!(
                        "Your answer could not be used: {problem}. Answer again with only the JSON object, nothing before or after it."
                    )));
                }
                Err(problem) => {
                    let error = CallError {
                        class: FailureClass::Logical,
                        message: format!("the model's answer could not be used, also after a repair re-ask: {problem}"),
                        attempts: reply.attempts,
                        latency: reply.latency,
                        usage: reply.usage,
                    };
                    return (Err(error), calls);
                }
            }
        }
        unreachable!("the loop returns in its second round")
    }
}

/// Parses a model's reply as the JSON object `T`, after cleaning.
pub fn parse_json<T: DeserializeOwned>(content: &str) -> Result<T, String> {
    if content.trim().is_empty() {
        return Err("the answer was empty".into());
    }
    let Some(text) = clean::json_text(content) else {
        return Err("the answer holds no JSON object".into());
    };
    serde_json::from_str(text).map_err(|e| format!("its JSON is not valid: {e}"))
}

/// A transport failure: timeouts and dropped connections are worth a retry.
fn transport(url: &str, error: &reqwest::Error) -> Attempt {
    let what = if error.is_timeout() {
        "did not answer in time".to_string()
    } else if error.is_connect() {
        "could not be reached".to_string()
    } else {
        "dropped the connection".to_string()
    };
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(error);
    let mut cause = String::new();
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    Attempt {
        transient: true,
        class: FailureClass::Environmental,
        message: if cause.is_empty() {
            format!("{url} {what}")
        } else {
            format!("{url} {what}: {cause}")
        },
        retry_after: None,
    }
}

/// `Retry-After` as seconds or an HTTP date.
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<f64>() {
        return (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds));
    }
    let at = humantime::parse_rfc3339_weak(value).ok().or_else(|| httpdate(value))?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// An IMF-fixdate (`Wed, 21 Oct 2015 07:28:00 GMT`), the form `Retry-After` uses.
fn httpdate(value: &str) -> Option<std::time::SystemTime> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| m == month)? + 1;
    humantime::parse_rfc3339(&format!("{year}-{month:02}-{day:0>2}T{time}Z")).ok()
}

/// A short reason from an error body (`{"error": {"message": …}}`), if any.
fn error_detail(body: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error")
                .and_then(|e| e.get("message").or(Some(e)))
                .and_then(|m| m.as_str().map(str::to_string))
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).trim().to_string());
    let message: String = message.chars().take(300).collect();
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn error_bodies_give_their_message() {
        assert_eq!(error_detail(br#"{"error": {"message": "slow down"}}"#), ": slow down");
        assert_eq!(error_detail(b"upstream busy"), ": upstream busy");
        assert_eq!(error_detail(b""), "");
    }

    #[test]
    fn replies_parse_after_cleaning_or_say_why_not() {
        #[derive(Deserialize, Debug, PartialEq)]
        struct A {
            a: u32,
        }
        assert_eq!(
            parse_json::<A>("<think>x</think>```json\n{\"a\": 1}\n```"),
            Ok(A { a: 1 })
        );
        assert!(parse_json::<A>("").unwrap_err().contains("empty"));
        assert!(parse_json::<A>("no").unwrap_err().contains("no JSON"));
        assert!(parse_json::<A>("{\"a\": ").unwrap_err().contains("not valid"));
    }
}
