//! The built-in worker's tools and the rules they run under. A model's tool
//! call is untrusted input: its arguments are parsed here, its paths kept
//! inside the attempt's workspace, and its shell commands refused when they
//! run a tool GGS blocked or destroy what cannot be put back (Law 1) without
//! the user's `--yes`. What is refused never runs; the refusal is the tool's
//! result, so the model can take another way.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;
use serde_json::json;

use crate::llm::Tool;

/// The most a tool's result sends back to the model: its head and tail.
pub const RESULT_MAX: usize = 4096;

/// The largest file `write_file` writes.
pub const WRITE_MAX: usize = 1 << 20;

/// Entries `list_files` lists at most.
const LIST_MAX: usize = 400;

/// A tool call, its arguments parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// Runs a command with `bash -c` in the atom's folder.
    Shell {
        /// The command.
        command: String,
    },
    /// Reads a file (a range of its lines, when asked).
    ReadFile {
        /// The path, relative to the atom's folder.
        path: String,
        /// The first line to read, from 1.
        from_line: Option<usize>,
        /// The last line to read.
        to_line: Option<usize>,
    },
    /// Writes a whole file.
    WriteFile {
        /// The path, relative to the atom's folder.
        path: String,
        /// The new content.
        content: String,
    },
    /// Lists a folder's files, recursively.
    ListFiles {
        /// The folder, relative to the atom's folder (default: it).
        path: String,
    },
}

impl Call {
    /// The tool's name.
    pub fn tool(&self) -> &'static str {
        match self {
            Call::Shell { .. } => "shell",
            Call::ReadFile { .. } => "read_file",
            Call::WriteFile { .. } => "write_file",
            Call::ListFiles { .. } => "list_files",
        }
    }

    /// What it asks for, in one line (the command or the path).
    pub fn input(&self) -> String {
        let text = match self {
            Call::Shell { command } => command.as_str(),
            Call::ReadFile { path, .. } | Call::WriteFile { path, .. } | Call::ListFiles { path } => path.as_str(),
        };
        let line = text.lines().next().unwrap_or("");
        let more = if text.lines().nth(1).is_some() { " …" } else { "" };
        crate::model::text::cut(&format!("{line}{more}"), 200)
    }

    /// Whether it changes nothing (a read-only worker may make it).
    pub fn reads_only(&self) -> bool {
        matches!(self, Call::ReadFile { .. } | Call::ListFiles { .. })
    }
}

/// The tools offered: every one, or the read-only ones.
pub fn offered(read_only: bool) -> Vec<Tool> {
    let mut tools = vec![
        Tool::function(
            "read_file",
            "Read a text file (a range of its lines when from_line/to_line are given). Paths are relative to your working folder and must stay inside the workspace.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "from_line": {"type": "integer", "minimum": 1},
                "to_line": {"type": "integer", "minimum": 1}
            }, "required": ["path"], "additionalProperties": false}),
        ),
        Tool::function(
            "list_files",
            "List the files under a folder (recursively, .git left out). Default: your working folder.",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
        ),
    ];
    if !read_only {
        tools.insert(
            0,
            Tool::function(
                "shell",
                "Run a command with bash in your working folder; the answer is its exit code and output (head and tail). Commands that run a blocked tool, or that delete or overwrite what cannot be put back, are refused unless the user confirmed them.",
                json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"], "additionalProperties": false}),
            ),
        );
        tools.insert(
            2,
            Tool::function(
                "write_file",
                "Write a whole text file (created with its folders if missing, replaced if present). Paths are relative to your working folder and must stay inside the workspace.",
                json!({"type": "object", "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"}
                }, "required": ["path", "content"], "additionalProperties": false}),
            ),
        );
    }
    tools
}

/// Reads a call the model made: its tool by name, its arguments as JSON.
pub fn parse(name: &str, arguments: &str) -> Result<Call, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Shell {
        command: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Read {
        path: String,
        from_line: Option<usize>,
        to_line: Option<usize>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Write {
        path: String,
        content: String,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct List {
        #[serde(default)]
        path: Option<String>,
    }
    let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
    let bad = |e: serde_json::Error| format!("the arguments of `{name}` do not read: {e}; send a JSON object");
    Ok(match name {
        "shell" => {
            let Shell { command } = serde_json::from_str(arguments).map_err(bad)?;
            if command.trim().is_empty() {
                return Err("`shell` needs a command".into());
            }
            Call::Shell { command }
        }
        "read_file" => {
            let Read {
                path,
                from_line,
                to_line,
            } = serde_json::from_str(arguments).map_err(bad)?;
            Call::ReadFile {
                path,
                from_line,
                to_line,
            }
        }
        "write_file" => {
            let Write { path, content } = serde_json::from_str(arguments).map_err(bad)?;
            Call::WriteFile { path, content }
        }
        "list_files" => {
            let List { path } = serde_json::from_str(arguments).map_err(bad)?;
            Call::ListFiles {
                path: path.unwrap_or_else(|| ".".into()),
            }
        }
        other => {
            return Err(format!(
                "there is no tool `{other}`: use shell, read_file, write_file or list_files"
            ));
        }
    })
}

/// The rules a call runs under.
pub struct Rules<'a> {
    /// The workspace's top folder (absolute, as the attempt sees it).
    pub root: &'a Path,
    /// The atom's folder inside it (absolute): relative paths start here.
    pub cwd: &'a Path,
    /// Files no tool writes: the state file, its journal, aot's folder, git's.
    pub protected: &'a [PathBuf],
    /// GGS's blocked tools: no shell command may run them.
    pub blocked_tools: &'a [String],
    /// Destructive commands may run (`--yes`).
    pub confirmed: bool,
    /// Only reading tools may run (a probe).
    pub read_only: bool,
    /// Whether a path names an existing file (for Law 1's overwrites).
    pub exists: &'a (dyn Fn(&Path) -> bool + Sync),
}

/// Why `call` may not run, if it may not. Pure: paths are judged as written
/// (symbolic links are checked where the file is opened, [`inside`]).
pub fn refusal(call: &Call, rules: &Rules<'_>) -> Option<String> {
    if rules.read_only && !call.reads_only() {
        return Some(format!(
            "`{}` changes files, and this atom only reads (a probe)",
            call.tool()
        ));
    }
    match call {
        Call::Shell { command } => {
            let relative = rules.cwd.strip_prefix(rules.root).ok().and_then(|c| c.to_str());
            let law = crate::law::Context {
                workspace: rules.root,
                exists: rules.exists,
                cwd: relative.filter(|c| !c.is_empty()),
            };
            let programs = crate::law::programs(command, &law);
            // Renaming programs hides from every check what would run.
            if let Some(renames) = programs
                .iter()
                .find(|p| matches!(p.as_str(), "hash" | "alias" | "enable"))
            {
                return Some(format!(
                    "it uses `{renames}`, which runs programs under other names: aot could not tell what would run; call them by their names"
                ));
            }
            let blocked: Vec<&String> = rules
                .blocked_tools
                .iter()
                .filter(|t| programs.iter().any(|p| p == *t))
                .collect();
            if !blocked.is_empty() {
                return Some(format!(
                    "it runs {}, which GGS blocked after failures (MUST NOT): take another tool",
                    blocked.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ")
                ));
            }
            let gates = crate::law::classify(command, &law);
            if !gates.is_empty() && !rules.confirmed {
                return Some(format!(
                    "destructive without the user's confirmation (Law 1): {}; do it another way, or the user runs aot with --yes",
                    gates
                        .iter()
                        .map(|g| format!("`{}` {}", g.command, g.why))
                        .collect::<Vec<_>>()
                        .join("; ")
                ));
            }
            None
        }
        Call::ReadFile { path, .. } | Call::ListFiles { path } => resolve(rules.root, rules.cwd, path).err(),
        Call::WriteFile { path, content } => {
            let full = match resolve(rules.root, rules.cwd, path) {
                Ok(full) => full,
                Err(why) => return Some(why),
            };
            if let Some(p) = rules.protected.iter().find(|p| full.starts_with(p)) {
                let name = p.strip_prefix(rules.root).unwrap_or(p);
                return Some(format!("`{}` is aot's or git's own, not the work's", name.display()));
            }
            (content.len() > WRITE_MAX).then(|| format!("the content is over {WRITE_MAX} bytes"))
        }
    }
}

/// `path` as the tools open it: relative to `cwd`, inside `root`, `..` and
/// `.` resolved as written. `Err` says why it is outside.
pub fn resolve(root: &Path, cwd: &Path, path: &str) -> Result<PathBuf, String> {
    if path.is_empty() {
        return Err("the path is empty".into());
    }
    if path.contains('\0') {
        return Err("the path holds a NUL byte".into());
    }
    let joined = cwd.join(path);
    let mut full = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                if !full.pop() {
                    return Err(format!("`{path}` is outside the workspace"));
                }
            }
            Component::CurDir => {}
            other => full.push(other),
        }
    }
    if !full.starts_with(root) {
        return Err(format!(
            "`{path}` is outside the workspace ({}): the tools work only inside it",
            root.display()
        ));
    }
    Ok(full)
}

/// Lines `from`..=`to` of `text` (1-based), numbered, for `read_file`.
pub fn lines(text: &str, from: Option<usize>, to: Option<usize>) -> String {
    if from.is_none() && to.is_none() {
        return crate::model::text::head_tail(text, RESULT_MAX);
    }
    let from = from.unwrap_or(1).max(1);
    let to = to.unwrap_or(usize::MAX);
    let picked: Vec<String> = text
        .lines()
        .enumerate()
        .skip(from - 1)
        .take_while(|(i, _)| *i < to)
        .map(|(i, line)| format!("{:>5}  {line}", i + 1))
        .collect();
    if picked.is_empty() {
        return format!("(no lines there: the file has {})", text.lines().count());
    }
    crate::model::text::head_tail(&picked.join("\n"), RESULT_MAX)
}

/// The files under `folder` (relative to it), `.git` left out, sorted.
pub fn list(folder: &Path) -> std::io::Result<String> {
    let mut found = Vec::new();
    let mut stack = vec![folder.to_path_buf()];
    let mut more = false;
    while let Some(dir) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(&dir)?.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            let shown = path.strip_prefix(folder).unwrap_or(&path).display().to_string();
            let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if found.len() >= LIST_MAX {
                more = true;
                break;
            }
            if is_dir {
                found.push(format!("{shown}/"));
                stack.push(path);
            } else {
                found.push(shown);
            }
        }
    }
    found.sort();
    if more {
        found.push(format!("… (the first {LIST_MAX} entries)"));
    }
    Ok(if found.is_empty() {
        "(empty)".into()
    } else {
        found.join("\n")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules<'a>(blocked: &'a [String], confirmed: bool, protected: &'a [PathBuf]) -> Rules<'a> {
        Rules {
            root: Path::new("/w"),
            cwd: Path::new("/w/sub"),
            protected,
            blocked_tools: blocked,
            confirmed,
            read_only: false,
            exists: &|_| true,
        }
    }

    #[test]
    fn paths_stay_inside_the_workspace() {
        let (root, cwd) = (Path::new("/w"), Path::new("/w/sub"));
        assert_eq!(resolve(root, cwd, "a.txt").unwrap(), Path::new("/w/sub/a.txt"));
        assert_eq!(resolve(root, cwd, "../b/./c").unwrap(), Path::new("/w/b/c"));
        assert_eq!(resolve(root, cwd, "/w/x").unwrap(), Path::new("/w/x"));
        for outside in ["../../etc/passwd", "/etc/passwd", "../..", "/wx/y", "../../w2/a"] {
            assert!(resolve(root, cwd, outside).is_err(), "{outside}");
        }
        assert!(resolve(root, cwd, "").is_err());
        assert!(resolve(root, cwd, "a\0b").is_err());
    }

    #[test]
    fn shell_refuses_blocked_tools_and_unconfirmed_destruction() {
        let blocked = vec!["git".to_string()];
        let none: Vec<PathBuf> = Vec::new();
        let shell = |c: &str| Call::Shell { command: c.into() };
        let why = refusal(&shell("cd x && git apply p.patch"), &rules(&blocked, true, &none)).unwrap();
        assert!(why.contains("`git`") && why.contains("blocked"), "{why}");
        // A word that is not the program is not the tool.
        assert_eq!(refusal(&shell("echo git"), &rules(&blocked, false, &none)), None);
        let why = refusal(&shell("rm -rf data"), &rules(&[], false, &none)).unwrap();
        assert!(why.contains("Law 1") && why.contains("rm -rf data"), "{why}");
        assert_eq!(refusal(&shell("rm -rf data"), &rules(&[], true, &none)), None);
        assert_eq!(refusal(&shell("cargo test"), &rules(&[], false, &none)), None);
        // Under another name, confirmed or not.
        for renamed in ["hash -p /usr/bin/git g; g status", "alias g=git; g status"] {
            let why = refusal(&shell(renamed), &rules(&blocked, true, &none)).unwrap();
            assert!(why.contains("other names"), "{renamed}: {why}");
        }
    }

    #[test]
    fn files_outside_or_owned_by_aot_are_refused() {
        let protected = vec![
            PathBuf::from("/w/aot.yaml"),
            PathBuf::from("/w/.aot"),
            PathBuf::from("/w/.git"),
        ];
        let r = rules(&[], true, &protected);
        let write = |p: &str| Call::WriteFile {
            path: p.into(),
            content: "x".into(),
        };
        assert_eq!(refusal(&write("src/lib.rs"), &r), None);
        for (path, says) in [
            ("../aot.yaml", "aot.yaml"),
            ("../.aot/llm/x", ".aot"),
            ("../.git/config", ".git"),
            ("/tmp/x", "outside"),
        ] {
            let why = refusal(&write(path), &r).unwrap();
            assert!(why.contains(says), "{path}: {why}");
        }
        let read = Call::ReadFile {
            path: "../../etc/passwd".into(),
            from_line: None,
            to_line: None,
        };
        assert!(refusal(&read, &r).unwrap().contains("outside"));
    }

    #[test]
    fn a_probe_only_reads() {
        let none: Vec<PathBuf> = Vec::new();
        let mut r = rules(&[], true, &none);
        r.read_only = true;
        assert!(refusal(&Call::Shell { command: "ls".into() }, &r).is_some());
        let write = Call::WriteFile {
            path: "a".into(),
            content: String::new(),
        };
        assert!(refusal(&write, &r).unwrap().contains("only reads"));
        assert_eq!(refusal(&Call::ListFiles { path: ".".into() }, &r), None);
        assert_eq!(offered(true).len(), 2);
        assert_eq!(offered(false).len(), 4);
    }

    #[test]
    fn calls_parse_strictly() {
        assert_eq!(
            parse("shell", r#"{"command":"ls"}"#),
            Ok(Call::Shell { command: "ls".into() })
        );
        assert!(parse("shell", r#"{"command":""}"#).is_err());
        assert!(parse("shell", r#"{"cmd":"ls"}"#).unwrap_err().contains("do not read"));
        assert!(parse("shell", "not json").is_err());
        assert!(parse("delete_everything", "{}").unwrap_err().contains("no tool"));
        assert_eq!(parse("list_files", ""), Ok(Call::ListFiles { path: ".".into() }));
    }

    #[test]
    fn line_ranges_are_numbered() {
        let text = "a\nb\nc\nd\n";
        assert_eq!(lines(text, Some(2), Some(3)), "    2  b\n    3  c");
        assert!(lines(text, Some(9), None).contains("has 4"));
        assert_eq!(lines(text, None, None), text);
    }
}
