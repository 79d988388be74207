//! Agent CLI templates (`workers.agent.template`): each known CLI's headless
//! command line (prompt on stdin), its environmental exit codes, and a
//! parser of what it prints — the final message, tokens, cost and turns —
//! so its spend counts in the task's accounting and budgets like the
//! built-in roles'. Pure: the output shapes are those the CLIs print
//! (recorded in `tests/fixtures/agents/`).
//!
//! What a CLI reports is read as it is: a field it does not print (codex and
//! gemini report no cost) is absent, never guessed.

use serde_json::Value;

use crate::state::AgentTemplate;

/// What a CLI's output says about its run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Parsed {
    /// The agent's final message.
    pub message: Option<String>,
    /// Prompt tokens (cached reads included) and reply tokens, when reported.
    pub tokens: Option<(u64, u64)>,
    /// US dollars, when reported.
    pub cost: Option<f64>,
    /// Model turns, when reported or countable.
    pub turns: Option<u32>,
    /// The model, when named.
    pub model: Option<String>,
    /// An error the CLI reported, even with exit 0 (claude's `is_error`).
    pub error: Option<String>,
}

/// The headless command line of `template`, prompt on stdin.
pub fn command(template: AgentTemplate) -> &'static str {
    match template {
        AgentTemplate::Claude => "claude -p --output-format json --permission-mode acceptEdits",
        AgentTemplate::Codex => "codex exec --json --skip-git-repo-check --sandbox workspace-write -",
        AgentTemplate::Aider => {
            // Headless, and nothing beside the attempt's edits: no commits, no
            // `.gitignore` entry, no history files in the tree.
            "BROWSER=true aider --message-file /dev/stdin --yes-always --no-pretty --no-stream --no-fancy-input --no-check-update --no-show-release-notes --no-show-model-warnings --analytics-disable --no-suggest-shell-commands --no-auto-commits --no-gitignore --chat-history-file /dev/null --input-history-file /dev/null"
        }
        AgentTemplate::Goose => "goose run --instructions - --output-format json --no-session --quiet",
        AgentTemplate::Gemini => "gemini --output-format json --approval-mode auto_edit --skip-trust",
        AgentTemplate::Opencode => "opencode run --format json",
    }
}

/// Environment variables the template sets (goose prompts for tool
/// approvals unless it runs autonomously).
pub fn env(template: AgentTemplate) -> &'static [(&'static str, &'static str)] {
    match template {
        AgentTemplate::Goose => &[("GOOSE_MODE", "auto")],
        _ => &[],
    }
}

/// Exit codes that mean the environment failed (auth, sandbox, config,
/// a trust prompt, an interrupt), beyond aot's defaults.
pub fn environmental_exit_codes(template: AgentTemplate) -> &'static [i32] {
    match template {
        // SIGTERM from outside.
        AgentTemplate::Claude => &[143],
        // Auth, sandbox, config, tool execution, untrusted folder, SIGINT.
        AgentTemplate::Gemini => &[41, 44, 52, 54, 55, 130],
        AgentTemplate::Codex | AgentTemplate::Aider | AgentTemplate::Goose | AgentTemplate::Opencode => &[],
    }
}

/// Whether an error text a CLI printed says the environment failed: the
/// provider refused the key, rate-limited, was down or unreachable.
pub fn environmental_error(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    // Status codes as words (`429`, not `1429 items`).
    let status = t
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "401" | "403" | "429" | "500" | "502" | "503" | "504" | "529"));
    status
        || [
            "unauthorized",
            "forbidden",
            "authenticat",
            "api key",
            "not logged in",
            "rate limit",
            "rate-limit",
            "quota",
            "usage limit",
            "hit your limit",
            "overloaded",
            "request timed out",
            "connection refused",
            "connection reset",
            "connection error",
            "network error",
            "unreachable",
            "servers are down",
        ]
        .iter()
        .any(|needle| t.contains(needle))
}

/// Reads what `template`'s CLI printed on stdout (and, for CLIs that report
/// errors there, stderr's tail in `output`).
pub fn parse(template: AgentTemplate, stdout: &str) -> Parsed {
    match template {
        AgentTemplate::Claude => claude(stdout),
        AgentTemplate::Codex => codex(stdout),
        AgentTemplate::Aider => aider(stdout),
        AgentTemplate::Goose => goose(stdout),
        AgentTemplate::Gemini => gemini(stdout),
        AgentTemplate::Opencode => opencode(stdout),
    }
}

/// The JSON values of a stream of lines (JSONL), skipping what is not JSON.
fn lines(stdout: &str) -> impl Iterator<Item = Value> + '_ {
    stdout
        .lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
}

/// The last JSON object printed whole: the output itself, else its last
/// line that is one.
fn last_object(stdout: &str) -> Option<Value> {
    serde_json::from_str::<Value>(stdout.trim())
        .ok()
        .filter(Value::is_object)
        .or_else(|| lines(stdout).last())
}

/// A count as reported; an implausible one (negative, over 10^12) is not read.
fn u(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
        .filter(|n| *n <= 1_000_000_000_000)
}

fn text(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string).filter(|s| !s.is_empty())
}

/// `claude -p --output-format json`: one `result` object (or, with
/// stream-json, the last line): `result`, `usage`, `total_cost_usd`,
/// `num_turns`, `is_error`.
fn claude(stdout: &str) -> Parsed {
    let Some(r) = last_object(stdout) else {
        return Parsed::default();
    };
    let usage = &r["usage"];
    let prompt = ["input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"]
        .iter()
        .filter_map(|k| u(&usage[*k]))
        .fold(0u64, u64::saturating_add);
    let tokens = u(&usage["output_tokens"]).map(|out| (prompt, out));
    let is_error =
        r["is_error"].as_bool().unwrap_or(false) || r["subtype"].as_str().is_some_and(|s| s.starts_with("error"));
    let error = is_error.then(|| {
        r["errors"]
            .as_array()
            .and_then(|e| e.iter().filter_map(Value::as_str).next().map(str::to_string))
            .or_else(|| text(&r["result"]))
            .or_else(|| text(&r["subtype"]))
            .unwrap_or_else(|| "the agent reported an error".into())
    });
    Parsed {
        message: text(&r["result"]).filter(|_| !is_error),
        tokens,
        cost: r["total_cost_usd"].as_f64().or_else(|| r["cost_usd"].as_f64()),
        turns: u(&r["num_turns"]).map(|n| n as u32),
        model: r["modelUsage"].as_object().and_then(|m| m.keys().next().cloned()),
        error,
    }
}

/// `codex exec --json`: JSONL; the final message is the last
/// `agent_message` item, usage is on `turn.completed` (summed), a
/// `turn.failed` or a fatal `error` is the error.
fn codex(stdout: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let (mut prompt, mut out, mut turns, mut seen) = (0, 0, 0, false);
    for event in lines(stdout) {
        match event["type"].as_str() {
            Some("turn.completed") => {
                let usage = &event["usage"];
                prompt = u64::saturating_add(prompt, u(&usage["input_tokens"]).unwrap_or(0));
                out = u64::saturating_add(out, u(&usage["output_tokens"]).unwrap_or(0));
                turns += 1;
                seen = true;
            }
            Some("item.completed") if event["item"]["type"] == "agent_message" => {
                parsed.message = text(&event["item"]["text"]);
            }
            Some("turn.failed") => {
                parsed.error = text(&event["error"]["message"]);
            }
            Some("error") => {
                // "Reconnecting... n/m" is a retry, not the end.
                let message = text(&event["message"]).unwrap_or_default();
                if !message.starts_with("Reconnecting") {
                    parsed.error = Some(message);
                }
            }
            _ => {}
        }
    }
    if seen {
        parsed.tokens = Some((prompt, out));
        parsed.turns = Some(turns);
    }
    parsed
}

/// A token count as aider prints it: `788`, `2.3k`, `14k`.
fn aider_tokens(word: &str) -> Option<u64> {
    let word = word.trim().trim_end_matches(',');
    let n = match word.strip_suffix('k') {
        Some(k) => k
            .parse::<f64>()
            .ok()
            .filter(|k| k.is_finite() && *k >= 0.0)
            .map(|k| (k * 1000.0).round() as u64),
        None => word.parse().ok(),
    };
    n.filter(|n| *n <= 1_000_000_000_000)
}

/// aider prints no JSON: after each call a line `Tokens: 2.3k sent, 440
/// received. Cost: $0.00061 message, $0.05 session.` (the cost may be on the
/// next line). Tokens are summed over the lines (they are rounded as aider
/// prints them); the cost is the last session total.
fn aider(stdout: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let (mut prompt, mut out, mut turns) = (0, 0, 0);
    for line in stdout.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Tokens: ") {
            let mut sent = None;
            let mut received = None;
            for part in rest.split(',') {
                let part = part.trim().trim_end_matches('.');
                let part = part.split(". Cost:").next().unwrap_or(part);
                let mut words = part.split_whitespace();
                let (Some(n), Some(what)) = (words.next(), words.next()) else {
                    continue;
                };
                match what {
                    "sent" => sent = aider_tokens(n),
                    "received" | "received." => received = aider_tokens(n),
                    _ => {}
                }
            }
            if let (Some(s), Some(r)) = (sent, received) {
                prompt = u64::saturating_add(prompt, s);
                out = u64::saturating_add(out, r);
                turns += 1;
            }
        }
        if let Some(at) = line.find("Cost: $") {
            let rest = &line[at..];
            if let Some(session) = rest.split(", $").nth(1) {
                let amount: String = session
                    .chars()
                    .take_while(|c| c.is_ascii_digit() || *c == '.')
                    .collect();
                parsed.cost = amount.trim_end_matches('.').parse().ok().or(parsed.cost);
            }
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("the api provider") || lower.contains("litellm.") && lower.contains("error") {
            parsed.error = Some(line.to_string());
        }
    }
    if turns > 0 {
        parsed.tokens = Some((prompt, out));
        parsed.turns = Some(turns);
    }
    parsed
}

/// `goose run --output-format json`: `{messages, metadata}`; the final
/// message is the last assistant message's text; tokens and cost in
/// `metadata` (newer builds), `status: "error"` is an error. With
/// stream-json, the `complete` event carries the same and an `error`
/// event is an error.
fn goose(stdout: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let usage = |m: &Value, parsed: &mut Parsed| {
        let input = u(&m["input_tokens"]);
        let output = u(&m["output_tokens"]);
        parsed.tokens = match (input, output, u(&m["total_tokens"])) {
            (Some(i), Some(o), _) => Some((i.saturating_add(u(&m["cache_read_input_tokens"]).unwrap_or(0)), o)),
            (_, _, Some(total)) => Some((total, 0)),
            _ => None,
        };
        parsed.cost = m["cost_usd"].as_f64();
    };
    let assistant_text = |m: &Value| -> Option<String> {
        let parts: Vec<&str> = m["content"]
            .as_array()?
            .iter()
            .filter(|c| c["type"] == "text")
            .filter_map(|c| c["text"].as_str())
            .collect();
        (!parts.is_empty()).then(|| parts.concat())
    };
    if let Ok(whole) = serde_json::from_str::<Value>(stdout.trim())
        && whole.get("messages").is_some()
    {
        let assistant: Vec<&Value> = whole["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "assistant").collect())
            .unwrap_or_default();
        parsed.message = assistant.last().and_then(|m| assistant_text(m));
        parsed.turns = Some(assistant.len() as u32).filter(|n| *n > 0);
        usage(&whole["metadata"], &mut parsed);
        if whole["metadata"]["status"] == "error" {
            parsed.error = Some("goose reported status `error`".into());
        }
        return parsed;
    }
    let mut text_since_tool = String::new();
    let mut turns = 0;
    for event in lines(stdout) {
        match event["type"].as_str() {
            Some("message") if event["message"]["role"] == "assistant" => {
                turns += 1;
                match assistant_text(&event["message"]) {
                    Some(t) => text_since_tool.push_str(&t),
                    None => text_since_tool.clear(),
                }
            }
            Some("complete") => usage(&event, &mut parsed),
            Some("error") => parsed.error = text(&event["error"]).or(Some("goose reported an error".into())),
            _ => {}
        }
    }
    parsed.message = Some(text_since_tool).filter(|t| !t.is_empty());
    parsed.turns = Some(turns).filter(|n| *n > 0);
    parsed
}

/// `gemini --output-format json`: `{response, stats: {models: {m: {api,
/// tokens}}}, error?}`; tokens summed over the models (`prompt` includes
/// cached reads; `candidates` and `thoughts` are the reply); no cost.
fn gemini(stdout: &str) -> Parsed {
    let Some(r) = last_object(stdout) else {
        return Parsed::default();
    };
    let mut parsed = Parsed {
        message: text(&r["response"]),
        ..Parsed::default()
    };
    if let Some(models) = r["stats"]["models"].as_object() {
        let (mut prompt, mut out, mut requests) = (0u64, 0u64, 0u64);
        for stats in models.values() {
            let t = &stats["tokens"];
            prompt = u64::saturating_add(prompt, u(&t["prompt"]).unwrap_or(0));
            out = out
                .saturating_add(u(&t["candidates"]).unwrap_or(0))
                .saturating_add(u(&t["thoughts"]).unwrap_or(0));
            requests = requests.saturating_add(u(&stats["api"]["totalRequests"]).unwrap_or(0));
        }
        parsed.tokens = Some((prompt, out));
        parsed.turns = Some(u32::try_from(requests).unwrap_or(u32::MAX)).filter(|n| *n > 0);
        parsed.model = models.keys().next().cloned();
    } else if r["type"] == "result" {
        // stream-json's last line.
        let s = &r["stats"];
        parsed.tokens = u(&s["input_tokens"]).map(|i| (i, u(&s["output_tokens"]).unwrap_or(0)));
        if r["status"] == "error" {
            parsed.error = text(&r["error"]["message"]).or(Some("gemini reported an error".into()));
        }
    }
    if r["error"].is_object() && parsed.error.is_none() {
        parsed.error = text(&r["error"]["message"]).or(Some("gemini reported an error".into()));
    }
    parsed
}

/// `opencode run --format json`: JSONL; `text` events make the message
/// (those after the last step start), `step_finish` events carry each
/// step's tokens and cost (summed; a step is a turn), an `error` event is
/// an error.
fn opencode(stdout: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let (mut prompt, mut out, mut cost, mut steps) = (0u64, 0u64, 0.0, 0u32);
    let mut message = String::new();
    for event in lines(stdout) {
        let part = &event["part"];
        match event["type"].as_str() {
            Some("step_start") => message.clear(),
            Some("text") => {
                if let Some(t) = part["text"].as_str() {
                    message.push_str(t);
                }
            }
            Some("step_finish") => {
                let t = &part["tokens"];
                prompt = prompt
                    .saturating_add(u(&t["input"]).unwrap_or(0))
                    .saturating_add(u(&t["cache"]["read"]).unwrap_or(0));
                out = out
                    .saturating_add(u(&t["output"]).unwrap_or(0))
                    .saturating_add(u(&t["reasoning"]).unwrap_or(0));
                cost += part["cost"].as_f64().unwrap_or(0.0);
                steps += 1;
            }
            Some("error") => {
                parsed.error = text(&event["error"]["data"]["message"])
                    .or_else(|| text(&event["error"]["name"]))
                    .or(Some("opencode reported an error".into()));
            }
            _ => {}
        }
    }
    if steps > 0 {
        parsed.tokens = Some((prompt, out));
        parsed.cost = Some(cost);
        parsed.turns = Some(steps);
    }
    parsed.message = Some(message).filter(|m| !m.is_empty());
    parsed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/agents")
            .join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    const SUMMARY: &str = "wrote Hello to out.txt";

    #[test]
    fn claude_result_objects() {
        let p = parse(AgentTemplate::Claude, &fixture("claude.json"));
        assert_eq!(p.tokens, Some((18 + 169_817 + 14_760, 2577)));
        assert_eq!(p.cost, Some(0.2416735));
        assert_eq!(p.turns, Some(15));
        assert_eq!(p.model.as_deref(), Some("us.anthropic.claude-opus-4-6-v1"));
        assert_eq!(p.error, None);
        assert!(p.message.unwrap().ends_with(SUMMARY));
        // Exit 0 and `subtype: success`, but `is_error`: an error, the provider's.
        let p = parse(AgentTemplate::Claude, &fixture("claude-rate-limited.json"));
        let error = p.error.unwrap();
        assert_eq!(error, "API Error: Rate limit reached");
        assert!(environmental_error(&error));
        assert_eq!(p.message, None);
    }

    #[test]
    fn codex_event_streams() {
        let p = parse(AgentTemplate::Codex, &fixture("codex.jsonl"));
        assert_eq!(p.tokens, Some((24_763, 122)));
        assert_eq!((p.cost, p.turns, p.error), (None, Some(1), None));
        assert!(p.message.unwrap().ends_with(SUMMARY));
        let p = parse(AgentTemplate::Codex, &fixture("codex-unauthorized.jsonl"));
        assert!(
            p.error
                .as_deref()
                .is_some_and(|e| e.contains("401") && !e.starts_with("Reconnecting"))
        );
        assert_eq!(p.tokens, None);
    }

    #[test]
    fn aider_usage_lines() {
        let p = parse(AgentTemplate::Aider, &fixture("aider.txt"));
        assert_eq!(p.tokens, Some((2300 + 12_000, 440 + 300)));
        assert_eq!(p.cost, Some(0.05), "the last session total");
        assert_eq!(p.turns, Some(2));
        assert_eq!(p.error, None);
        let p = parse(
            AgentTemplate::Aider,
            "The API provider has rate limited you. Try again later or check your quotas.\n",
        );
        assert!(p.error.is_some_and(|e| environmental_error(&e)));
    }

    #[test]
    fn goose_json_and_streams() {
        let p = parse(AgentTemplate::Goose, &fixture("goose.json"));
        assert_eq!(p.tokens, Some((1234 + 1000, 56)));
        assert_eq!(p.cost, Some(0.0012));
        assert_eq!(p.turns, Some(2));
        assert!(p.message.unwrap().ends_with(SUMMARY));
        let stream = "{\"type\":\"message\",\"message\":{\"role\":\"assistant\",\"created\":0,\"content\":[{\"type\":\"text\",\"text\":\"Hello \"}]}}\n{\"type\":\"message\",\"message\":{\"role\":\"assistant\",\"created\":0,\"content\":[{\"type\":\"text\",\"text\":\"there\"}]}}\n{\"type\":\"complete\",\"total_tokens\":1290,\"input_tokens\":1234,\"output_tokens\":56,\"cache_read_input_tokens\":1000,\"cache_write_input_tokens\":0}\n";
        let p = parse(AgentTemplate::Goose, stream);
        assert_eq!(p.message.as_deref(), Some("Hello there"));
        assert_eq!(p.tokens, Some((2234, 56)));
        let p = parse(
            AgentTemplate::Goose,
            "{\"type\":\"error\",\"error\":\"provider 429\"}\n",
        );
        assert_eq!(p.error.as_deref(), Some("provider 429"));
    }

    #[test]
    fn gemini_stats_summed_over_models() {
        let p = parse(AgentTemplate::Gemini, &fixture("gemini.json"));
        assert_eq!(p.tokens, Some((24_939 + 8965, 20 + 154 + 10 + 30)));
        assert_eq!((p.cost, p.turns), (None, Some(3)));
        assert!(p.message.unwrap().ends_with(SUMMARY));
        let p = parse(
            AgentTemplate::Gemini,
            r#"{"error": {"type": "FatalAuthenticationError", "message": "no credentials", "code": 41}}"#,
        );
        assert_eq!(p.error.as_deref(), Some("no credentials"));
    }

    #[test]
    fn opencode_steps_summed() {
        let p = parse(AgentTemplate::Opencode, &fixture("opencode.jsonl"));
        assert_eq!(p.tokens, Some((237 + 7936 + 609 + 7936, 39 + 67 + 1 + 9)));
        assert!((p.cost.unwrap() - 0.003).abs() < 1e-9);
        assert_eq!(p.turns, Some(2));
        // The message is the last step's text, not the first step's musing.
        assert_eq!(p.message.as_deref(), Some("Done.\nsummary: wrote Hello to out.txt"));
    }

    #[test]
    fn aider_counts_read_as_printed() {
        assert_eq!(aider_tokens("788"), Some(788));
        assert_eq!(aider_tokens("2.3k"), Some(2300));
        assert_eq!(aider_tokens("14k"), Some(14000));
        assert_eq!(aider_tokens("x"), None);
    }

    #[test]
    fn environmental_errors_are_the_providers() {
        assert!(environmental_error("API Error: Rate limit reached"));
        assert!(environmental_error(
            "unexpected status 401 Unauthorized: Incorrect API key"
        ));
        assert!(environmental_error("Not logged in · Please run /login"));
        assert!(!environmental_error("the tests still fail"));
        assert!(!environmental_error(
            "processed 1429 items, 500ms per batch; timeout handling is wrong"
        ));
        assert!(environmental_error("Error: 503 Service Unavailable"));
    }

    #[test]
    fn nothing_parsable_is_nothing_reported() {
        for t in [
            AgentTemplate::Claude,
            AgentTemplate::Codex,
            AgentTemplate::Aider,
            AgentTemplate::Goose,
            AgentTemplate::Gemini,
            AgentTemplate::Opencode,
        ] {
            assert_eq!(parse(t, "plain text\nno json here\n"), Parsed::default(), "{t:?}");
        }
    }
}
