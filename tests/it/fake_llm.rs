//! A scripted OpenAI-compatible server on 127.0.0.1: each request to
//! `/v1/chat/completions` gets the next step of its script — a reply, an
//! HTTP error with headers, a stall (the connection held open without an
//! answer until the client gives up), or a dropped connection. Every request
//! is kept (headers and JSON body) for the test to inspect.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the server does with one request.
#[derive(Debug, Clone)]
pub enum Step {
    /// Answers with this status, headers and body.
    Reply {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Holds the connection open without answering until the client closes it.
    Stall,
    /// Closes the connection without answering.
    Drop,
    /// Waits, then does the step (a model's thinking time).
    #[allow(dead_code)]
    After(Duration, Box<Step>),
}

impl Step {
    /// A chat completion whose message is `content`.
    pub fn chat(content: &str) -> Step {
        Step::chat_with_usage(content, Some((100, 20)))
    }

    /// A chat completion with the given usage (`None`: no usage reported).
    pub fn chat_with_usage(content: &str, usage: Option<(u64, u64)>) -> Step {
        let mut body = serde_json::json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        });
        if let Some((prompt, completion)) = usage {
            body["usage"] = serde_json::json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
        }
        Step::Reply {
            status: 200,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    /// A reply that calls tools: each `(name, arguments)` in order, with
    /// ids `call_1`, `call_2`, … and the given text beside them.
    #[allow(dead_code)]
    pub fn tools(text: &str, calls: &[(&str, serde_json::Value)]) -> Step {
        let calls: Vec<serde_json::Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                serde_json::json!({"id": format!("call_{}", i + 1), "type": "function",
                    "function": {"name": name, "arguments": args.to_string()}})
            })
            .collect();
        let body = serde_json::json!({
            "id": "chatcmpl-fake",
            "model": "fake-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        });
        Step::Reply {
            status: 200,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    /// A server-sent event stream of `(event name, data)` pairs (a name of
    /// `None` writes only `data:` lines), as streaming APIs answer; `done`
    /// ends it with `data: [DONE]` as chat completions do.
    #[allow(dead_code)]
    pub fn sse(events: &[(Option<&str>, serde_json::Value)], done: bool) -> Step {
        let mut body = String::new();
        for (name, data) in events {
            if let Some(name) = name {
                body.push_str(&format!("event: {name}\n"));
            }
            body.push_str(&format!("data: {data}\n\n"));
        }
        if done {
            body.push_str("data: [DONE]\n\n");
        }
        Step::Reply {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            body,
        }
    }

    /// An HTTP error.
    pub fn status(status: u16, headers: &[(&str, &str)]) -> Step {
        Step::Reply {
            status,
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: format!(r#"{{"error": {{"message": "scripted {status}"}}}}"#),
        }
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The request line's method.
    pub method: String,
    /// The request line's path.
    pub path: String,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: serde_json::Value,
    /// When it arrived.
    pub at: Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The text of every message, joined.
    pub fn prompt(&self) -> String {
        self.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .filter_map(|m| m["content"].as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }
}

pub struct FakeLlm {
    /// The base URL, `/v1` included.
    pub base: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl FakeLlm {
    /// Starts the server with a script; requests past its end get a 500.
    pub fn start(script: Vec<Step>) -> FakeLlm {
        let script = Mutex::new(std::collections::VecDeque::from(script));
        FakeLlm::serve(move |_: &Seen| {
            script.lock().expect("script").pop_front().unwrap_or(Step::Reply {
                status: 500,
                headers: Vec::new(),
                body: r#"{"error": {"message": "the test's script has no more steps"}}"#.into(),
            })
        })
    }

    /// Starts the server answering each request with what `respond` makes
    /// of it (for clients that send side requests, such as a title, in any
    /// order beside the conversation).
    pub fn serve(respond: impl Fn(&Seen) -> Step + Send + Sync + 'static) -> FakeLlm {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let base = format!("http://{}/v1", listener.local_addr().expect("address"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let respond: Arc<dyn Fn(&Seen) -> Step + Send + Sync> = Arc::new(respond);
        let seen2 = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (seen, respond) = (seen2.clone(), respond.clone());
                std::thread::spawn(move || serve(stream, &seen, respond.as_ref()));
            }
        });
        FakeLlm { base, seen }
    }

    /// The requests received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("requests").clone()
    }
}

fn serve(stream: TcpStream, seen: &Mutex<Vec<Seen>>, respond_to: &(dyn Fn(&Seen) -> Step + Send + Sync)) {
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let length: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let mut words = line.split_whitespace();
        let method = words.next().unwrap_or_default().to_string();
        let path = words.next().unwrap_or_default().to_string();
        let request = Seen {
            method,
            path,
            headers,
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            at: Instant::now(),
        };
        seen.lock().expect("requests").push(request.clone());
        let step = respond_to(&request);
        if !respond(&mut stream, &mut reader, step) {
            return;
        }
    }
}

/// Does one step; false when the connection is done.
fn respond(stream: &mut TcpStream, reader: &mut BufReader<TcpStream>, step: Step) -> bool {
    match step {
        Step::After(wait, step) => {
            std::thread::sleep(wait);
            respond(stream, reader, *step)
        }
        Step::Drop => {
            let _ = stream.shutdown(std::net::Shutdown::Both);
            false
        }
        Step::Stall => {
            // Until the client closes its end (it gives up on its timeout).
            let mut sink = Vec::new();
            let _ = reader.read_to_end(&mut sink);
            false
        }
        Step::Reply { status, headers, body } => {
            let mut head = format!("HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\n", body.len());
            if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type")) {
                head.push_str("content-type: application/json\r\n");
            }
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            stream.write_all(head.as_bytes()).is_ok() && stream.write_all(body.as_bytes()).is_ok()
        }
    }
}
