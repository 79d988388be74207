//! The LLM client against a scripted OpenAI-compatible server on 127.0.0.1:
//! headers, retries (429 with Retry-After, 5xx, a stall past the timeout, a
//! dropped connection), cleaning of answers, the repair re-ask, and the key
//! kept out of every message.

use std::time::Duration;

use aot::llm::{Client, Endpoint, Message, Retry, Role};
use aot::model::FailureClass;

use crate::fake_llm::{FakeLlm, Step};

const KEY: &str = "sk-test-key-that-must-never-leak-7f3a";

fn client(server: &FakeLlm, attempts: u32) -> Client {
    let retry = Retry {
        attempts,
        min_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(5),
    };
    Client::new(
        Endpoint::new(&server.base, "fake-model", Some(KEY.into())),
        Duration::from_millis(800),
        retry,
    )
    .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Answer {
    answer: u32,
}

#[test]
fn a_call_names_its_role_model_and_key_and_reads_the_reply() {
    let server = FakeLlm::start(vec![Step::chat("hello")]);
    let reply = runtime()
        .block_on(client(&server, 1).chat(Role::Planner, &[Message::system("s"), Message::user("u")], 300))
        .unwrap();
    assert_eq!(reply.content, "hello");
    assert_eq!(
        (reply.usage.prompt, reply.usage.completion, reply.usage.estimated),
        (100, 20, false)
    );
    assert_eq!(reply.attempts, 1);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].header("x-aot-role"), Some("planner"));
    assert_eq!(seen[0].header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(seen[0].body["model"], "fake-model");
    assert_eq!(seen[0].body["max_tokens"], 300);
    assert_eq!(seen[0].body["messages"][1]["content"], "u");
}

#[test]
fn provider_faults_are_retried_until_an_answer_comes() {
    for (fault, name) in [
        (Step::status(500, &[]), "500"),
        (Step::status(503, &[]), "503"),
        (Step::status(429, &[]), "429"),
        (Step::Drop, "a dropped connection"),
        (Step::Stall, "a stall past the timeout"),
    ] {
        let server = FakeLlm::start(vec![fault, Step::chat("{\"answer\": 42}")]);
        let reply = runtime()
            .block_on(client(&server, 3).chat(Role::Worker, &[Message::user("u")], 100))
            .unwrap_or_else(|e| panic!("after {name}: {e}"));
        assert_eq!(reply.content, "{\"answer\": 42}", "after {name}");
        assert_eq!(reply.attempts, 2, "after {name}");
        assert_eq!(server.seen().len(), 2, "after {name}");
    }
}

#[test]
fn a_429_waits_as_long_as_retry_after_says() {
    let server = FakeLlm::start(vec![Step::status(429, &[("Retry-After", "1")]), Step::chat("ok")]);
    runtime()
        .block_on(client(&server, 2).chat(Role::Planner, &[Message::user("u")], 100))
        .unwrap();
    let seen = server.seen();
    let waited = seen[1].at.duration_since(seen[0].at);
    assert!(waited >= Duration::from_secs(1), "waited {waited:?}");
}

#[test]
fn spent_retries_are_an_environmental_failure_that_never_shows_the_key() {
    let server = FakeLlm::start(vec![Step::status(500, &[]), Step::Drop, Step::status(502, &[])]);
    let error = runtime()
        .block_on(client(&server, 3).chat(Role::Planner, &[Message::user("u")], 100))
        .unwrap_err();
    assert_eq!(error.class, FailureClass::Environmental);
    assert_eq!(error.attempts, 3);
    assert!(
        error.message.contains("502") && error.message.contains("after 3 attempts"),
        "{}",
        error.message
    );
    assert!(!format!("{error:?}").contains(KEY));
}

#[test]
fn a_refused_key_is_not_retried() {
    let server = FakeLlm::start(vec![Step::status(401, &[]), Step::chat("never")]);
    let error = runtime()
        .block_on(client(&server, 3).chat(Role::Planner, &[Message::user("u")], 100))
        .unwrap_err();
    assert_eq!((error.class, error.attempts), (FailureClass::Environmental, 1));
    assert!(error.message.contains("401"), "{}", error.message);
}

#[test]
fn reasoning_fences_and_prose_around_the_json_are_stripped() {
    for reply in [
        "<think>the answer is {answer: 41}? no</think>{\"answer\": 42}",
        "<think>unclosed reasoning {",
        "Sure, here you go:\n```json\n{\"answer\": 42}\n```\nAnything else?",
    ] {
        let server = FakeLlm::start(vec![Step::chat(reply), Step::chat("{\"answer\": 42}")]);
        let (answer, calls) =
            runtime().block_on(client(&server, 1).json::<Answer>(Role::Planner, &[Message::user("u")], 100));
        assert_eq!(answer.unwrap(), Answer { answer: 42 }, "{reply}");
        // The unclosed block leaves nothing: that one needs the re-ask.
        let expected = if reply.contains("unclosed") { 2 } else { 1 };
        assert_eq!(calls.len(), expected, "{reply}");
    }
}

#[test]
fn malformed_answers_get_one_repair_re_ask_then_are_a_logical_failure() {
    let server = FakeLlm::start(vec![Step::chat("{\"answer\": 4"), Step::chat("{\"answer\": 42}")]);
    let (answer, calls) =
        runtime().block_on(client(&server, 1).json::<Answer>(Role::Planner, &[Message::user("u")], 100));
    assert_eq!(answer.unwrap(), Answer { answer: 42 });
    assert_eq!(calls.len(), 2);
    let second = &server.seen()[1];
    assert!(second.prompt().contains("could not be used"), "{}", second.prompt());
    assert_eq!(
        second.body["messages"][1]["content"], "{\"answer\": 4",
        "the bad answer is shown back"
    );

    let empty_choices = Step::Reply {
        status: 200,
        headers: Vec::new(),
        body: r#"{"choices": [], "model": "m"}"#.into(),
    };
    let server = FakeLlm::start(vec![empty_choices, Step::chat("no json at all")]);
    let (answer, calls) =
        runtime().block_on(client(&server, 1).json::<Answer>(Role::Planner, &[Message::user("u")], 100));
    let error = answer.unwrap_err();
    assert_eq!(error.class, FailureClass::Logical);
    assert!(error.message.contains("repair re-ask"), "{}", error.message);
    assert_eq!(calls.len(), 2);
}

#[test]
fn usage_is_estimated_and_marked_when_the_reply_has_none() {
    let server = FakeLlm::start(vec![Step::chat_with_usage("a reply of some length", None)]);
    let reply = runtime()
        .block_on(client(&server, 1).chat(Role::Planner, &[Message::user("a prompt of some length")], 100))
        .unwrap();
    assert!(reply.usage.estimated);
    assert!(
        reply.usage.prompt > 0 && reply.usage.completion > 0,
        "{:?}",
        reply.usage
    );
}

#[test]
fn tools_are_offered_called_and_their_results_sent_back() {
    let call = Step::Reply {
        status: 200,
        headers: Vec::new(),
        body: serde_json::json!({
            "model": "fake-model",
            "choices": [{"message": {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "write_file", "arguments": "{\"path\": \"a.txt\", \"content\": \"hi\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 10}
        })
        .to_string(),
    };
    let server = FakeLlm::start(vec![call, Step::chat("done\nsummary: wrote a.txt")]);
    let client = client(&server, 1);
    let tools = [aot::llm::Tool::function(
        "write_file",
        "Write a file",
        serde_json::json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
    )];
    let runtime = runtime();
    let mut messages = vec![Message::system("s"), Message::user("write a.txt")];
    let first = runtime
        .block_on(client.chat_with_tools(Role::Worker, &messages, &tools, 500))
        .unwrap();
    assert_eq!(first.content, "");
    assert_eq!(first.tool_calls.len(), 1);
    assert_eq!(first.tool_calls[0].function.name, "write_file");
    let args: serde_json::Value = serde_json::from_str(&first.tool_calls[0].function.arguments).unwrap();
    assert_eq!(args["path"], "a.txt");
    messages.push(Message::assistant_calls(
        first.content.clone(),
        first.tool_calls.clone(),
    ));
    messages.push(Message::tool_result(&first.tool_calls[0].id, "wrote 2 bytes"));
    let second = runtime
        .block_on(client.chat_with_tools(Role::Worker, &messages, &tools, 500))
        .unwrap();
    assert!(second.tool_calls.is_empty());
    let seen = server.seen();
    assert_eq!(seen[0].body["tools"][0]["function"]["name"], "write_file");
    assert_eq!(seen[0].header("x-aot-role"), Some("worker"));
    let sent = &seen[1].body["messages"];
    assert_eq!(sent[2]["tool_calls"][0]["id"], "call_1");
    assert_eq!(sent[3]["role"], "tool");
    assert_eq!(sent[3]["tool_call_id"], "call_1");
    assert_eq!(sent[3]["content"], "wrote 2 bytes");
    // A plain chat offers no tools at all.
    let server = FakeLlm::start(vec![Step::chat("x")]);
    runtime
        .block_on(self::client(&server, 1).chat(Role::Planner, &[Message::user("u")], 10))
        .unwrap();
    assert!(server.seen()[0].body.get("tools").is_none());
}
