//! Law 1: a command written by a model that destroys what it cannot put back
//! runs only with a confirmation (`--yes`, or a yes on a terminal). This is
//! the classifier: it reads a shell command as bash would — words unquoted,
//! `bash -c '…'`, `eval`, loops, pipelines, `$(…)`, `xargs`, `find -exec`,
//! `sudo`/`env`/`timeout` wrappers — and names every destructive piece.
//! Matching is on argv, never on prefixes: `rm` is found in
//! `for f in *; do rm "$f"; done`, and `echo rm -rf /` is not destructive.
//!
//! Destructive here means: `rm`/`unlink`/`shred`, `find -delete`,
//! `git reset --hard`, `git clean` (unless a dry run), `git push --force`
//! (or a `+refspec`), `dd`, `mkfs*`, `truncate`, `chmod -R`/`chown -R`/`chgrp -R`
//! reaching outside the workspace, and output redirection (`>`, `>|`, `&>`,
//! `tee` without `-a`) over a file that exists, and inline interpreter code
//! (`python3 -c`, `perl -e`, `ruby -e`, `node -e`, `php -r`, or code on a
//! here-document) that calls what deletes files or runs commands. A command that cannot be read
//! as shell, or whose program is only known when it runs (`$CMD`), is
//! treated as destructive: the classifier never guesses in a model's favour.
//!
//! Pure: whether a file exists is asked through [`Context::exists`].

use std::path::{Component, Path, PathBuf};

use brush_parser::ast;
use brush_parser::word::{WordPiece, WordPieceWithSource};

/// How deep `bash -c`, `eval` and `$(…)` nest before the command is refused
/// as unreadable.
const DEPTH_MAX: usize = 8;

/// What the classifier knows of the world.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The workspace's top folder (absolute): recursive permission changes
    /// inside it are not destructive.
    pub workspace: &'a Path,
    /// Whether a path (absolute) names an existing file.
    pub exists: &'a dyn Fn(&Path) -> bool,
    /// Where the command runs, relative to the workspace (an atom's `cwd`):
    /// relative paths in it resolve from there.
    pub cwd: Option<&'a str>,
}

/// One destructive piece of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// The words of the piece (as written, unquoted), or the redirection.
    pub command: String,
    /// Why it needs a confirmation.
    pub why: String,
}

/// Every destructive piece of `command`, in order (empty: it may run unconfirmed).
pub fn classify(command: &str, ctx: &Context<'_>) -> Vec<Gate> {
    read(command, ctx).0
}

/// The programs `command` runs (their base names), wrappers and what they
/// wrap both included: `env git apply` runs `env` and `git`.
pub fn programs(command: &str, ctx: &Context<'_>) -> Vec<String> {
    read(command, ctx).1
}

fn read(command: &str, ctx: &Context<'_>) -> (Vec<Gate>, Vec<String>) {
    let mut gates = Vec::new();
    let mut programs = Vec::new();
    Walker {
        ctx,
        gates: &mut gates,
        programs: &mut programs,
    }
    .script(command, 0);
    (gates, programs)
}

/// A word after quote removal: its text, and whether part of it is only
/// known at run time (`$VAR`, `$(…)`, a glob is still literal text).
#[derive(Debug, Clone)]
struct Arg {
    text: String,
    dynamic: bool,
}

struct Walker<'c, 'g> {
    ctx: &'c Context<'c>,
    gates: &'g mut Vec<Gate>,
    programs: &'g mut Vec<String>,
}

impl Walker<'_, '_> {
    fn gate(&mut self, command: impl Into<String>, why: impl Into<String>) {
        self.gates.push(Gate {
            command: command.into(),
            why: why.into(),
        });
    }

    /// Classifies a whole script (a command line, a `bash -c` string).
    fn script(&mut self, text: &str, depth: usize) {
        if depth > DEPTH_MAX || too_deep(text) {
            self.gate(cut_for_show(text), "nested too deeply, or too long, to read");
            return;
        }
        let options = brush_parser::ParserOptions::default();
        let parsed = brush_parser::tokenize_str_with_options(text, &options.tokenizer_options())
            .map_err(|e| e.to_string())
            .and_then(|tokens| brush_parser::parse_tokens(&tokens, &options).map_err(|e| e.to_string()));
        match parsed {
            Ok(program) => {
                for command in &program.complete_commands {
                    self.list(command, depth);
                }
            }
            Err(_) => self.gate(text, "cannot be read as a shell command"),
        }
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, depth),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize) {
        for command in &pipeline.seq {
            self.command(command, depth);
        }
    }

    fn command(&mut self, command: &ast::Command, depth: usize) {
        match command {
            ast::Command::Simple(simple) => self.simple(simple, depth),
            ast::Command::Compound(compound, redirects) => {
                self.compound(compound, depth);
                for redirect in redirects.iter().flat_map(|r| &r.0) {
                    self.redirect(redirect, depth);
                }
            }
            ast::Command::Function(function) => {
                let ast::FunctionBody(body, redirects) = &function.body;
                self.compound(body, depth);
                for redirect in redirects.iter().flat_map(|r| &r.0) {
                    self.redirect(redirect, depth);
                }
            }
            ast::Command::ExtendedTest(test, redirects) => {
                self.opaque(&test.to_string());
                for redirect in redirects.iter().flat_map(|r| &r.0) {
                    self.redirect(redirect, depth);
                }
            }
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, depth: usize) {
        match compound {
            ast::CompoundCommand::Arithmetic(a) => self.opaque(&a.to_string()),
            ast::CompoundCommand::ArithmeticForClause(c) => {
                self.opaque(&format!("{:?}{:?}{:?}", c.initializer, c.condition, c.updater));
                self.list(&c.body.list, depth);
            }
            ast::CompoundCommand::BraceGroup(c) => self.list(&c.list, depth),
            ast::CompoundCommand::Subshell(c) => self.list(&c.list, depth),
            ast::CompoundCommand::ForClause(c) => {
                for word in c.values.iter().flatten() {
                    self.word(&word.value, depth);
                }
                self.list(&c.body.list, depth);
            }
            ast::CompoundCommand::CaseClause(c) => {
                self.word(&c.value.value, depth);
                for item in &c.cases {
                    for pattern in &item.patterns {
                        self.opaque(&pattern.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd, depth);
                    }
                }
            }
            ast::CompoundCommand::IfClause(c) => {
                self.list(&c.condition, depth);
                self.list(&c.then, depth);
                for e in c.elses.iter().flatten() {
                    if let Some(condition) = &e.condition {
                        self.list(condition, depth);
                    }
                    self.list(&e.body, depth);
                }
            }
            ast::CompoundCommand::WhileClause(c) | ast::CompoundCommand::UntilClause(c) => {
                self.list(&c.0, depth);
                self.list(&c.1.list, depth);
            }
            ast::CompoundCommand::Coprocess(c) => self.command(&c.body, depth),
        }
    }

    /// Text the walk does not parse further (an arithmetic, a `[[ ]]` test, a
    /// case pattern, a parameter expansion): a command substitution in it is
    /// not read, so it counts as destructive.
    fn opaque(&mut self, text: &str) {
        if text.contains("$(") || text.contains('`') || text.contains("CommandSubstitution") {
            self.gate(cut_for_show(text), "holds a command substitution that is not read here");
        }
    }

    /// Unquotes a word, classifying any command substitution inside it.
    fn word(&mut self, raw: &str, depth: usize) -> Arg {
        let options = brush_parser::ParserOptions::default();
        match brush_parser::word::parse(raw, &options) {
            Ok(pieces) => {
                let mut arg = Arg {
                    text: String::new(),
                    dynamic: false,
                };
                self.pieces(&pieces, &mut arg, depth);
                arg
            }
            Err(_) => Arg {
                text: raw.to_string(),
                dynamic: true,
            },
        }
    }

    fn pieces(&mut self, pieces: &[WordPieceWithSource], arg: &mut Arg, depth: usize) {
        for piece in pieces {
            match &piece.piece {
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => arg.text.push_str(t),
                WordPiece::AnsiCQuotedText(t) => {
                    // `$'\x72m'` is `rm` once bash decodes it: not read here.
                    arg.text.push_str(t);
                    if t.contains('\\') {
                        arg.dynamic = true;
                    }
                }
                WordPiece::EscapeSequence(t) => arg.text.push_str(t.strip_prefix('\\').unwrap_or(t)),
                WordPiece::DoubleQuotedSequence(inner) | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(inner, arg, depth);
                }
                WordPiece::TildeExpansion(_) => {
                    arg.text.push('~');
                    arg.dynamic = true;
                }
                WordPiece::ParameterExpansion(_) | WordPiece::ArithmeticExpression(_) => {
                    // `${X:-$(rm x)}`, `$(( $(rm x) ))`: a command inside
                    // that the walk does not reach is not read as harmless.
                    self.opaque(&raw_of(piece));
                    arg.dynamic = true;
                }
                WordPiece::CommandSubstitution(inner) | WordPiece::BackquotedCommandSubstitution(inner) => {
                    self.script(inner, depth + 1);
                    arg.dynamic = true;
                }
            }
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) {
        let items = simple
            .prefix
            .iter()
            .flat_map(|p| &p.0)
            .chain(simple.suffix.iter().flat_map(|s| &s.0));
        let mut args = Vec::new();
        let mut heredocs = Vec::new();
        let mut name = None;
        if let Some(word) = &simple.word_or_name {
            name = Some(self.word(&word.value, depth));
        }
        for item in items {
            match item {
                ast::CommandPrefixOrSuffixItem::Word(w) => args.push(self.word(&w.value, depth)),
                ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    self.word(&w.value, depth);
                }
                ast::CommandPrefixOrSuffixItem::IoRedirect(r) => {
                    if let ast::IoRedirect::HereDocument(_, doc) = r {
                        heredocs.push(doc.doc.value.clone());
                    }
                    self.redirect(r, depth);
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => self.list(&sub.list, depth),
            }
        }
        let Some(name) = name else {
            return;
        };
        let mut argv = vec![name];
        argv.extend(args);
        self.argv(&argv, &heredocs, depth);
    }

    fn redirect(&mut self, redirect: &ast::IoRedirect, depth: usize) {
        match redirect {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(w) => {
                    let arg = self.word(&w.value, depth);
                    if matches!(kind, ast::IoFileRedirectKind::Write | ast::IoFileRedirectKind::Clobber) {
                        self.overwrite(&arg, &format!("> {}", arg.text));
                    }
                }
                ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => self.list(&sub.list, depth),
                ast::IoFileRedirectTarget::Duplicate(w) => {
                    // `>& file` writes to a file unless it names a descriptor.
                    let arg = self.word(&w.value, depth);
                    if matches!(kind, ast::IoFileRedirectKind::DuplicateOutput)
                        && !arg.text.chars().all(|c| c.is_ascii_digit() || c == '-')
                    {
                        self.overwrite(&arg, &format!(">& {}", arg.text));
                    }
                }
                ast::IoFileRedirectTarget::Fd(_) => {}
            },
            ast::IoRedirect::OutputAndError(w, append) => {
                let arg = self.word(&w.value, depth);
                if !append {
                    self.overwrite(&arg, &format!("&> {}", arg.text));
                }
            }
            ast::IoRedirect::HereString(_, w) => {
                self.word(&w.value, depth);
            }
            ast::IoRedirect::HereDocument(..) => {}
        }
    }

    /// Writing over `target`: destructive when it exists (or cannot be known).
    fn overwrite(&mut self, target: &Arg, shown: &str) {
        if target.dynamic {
            self.gate(shown, "overwrites a file named only when it runs");
            return;
        }
        if matches!(
            target.text.as_str(),
            "/dev/null" | "/dev/stdout" | "/dev/stderr" | "/dev/tty"
        ) {
            return;
        }
        if (self.ctx.exists)(&self.absolute(&target.text)) {
            self.gate(shown, format!("overwrites the existing file {}", target.text));
        }
    }

    fn absolute(&self, path: &str) -> PathBuf {
        let base = match self.ctx.cwd {
            Some(cwd) => self.ctx.workspace.join(cwd),
            None => self.ctx.workspace.to_path_buf(),
        };
        normalize(&base.join(path))
    }

    fn inside_workspace(&self, arg: &Arg) -> bool {
        !arg.dynamic && !arg.text.starts_with('~') && self.absolute(&arg.text).starts_with(self.ctx.workspace)
    }

    /// Classifies one command's argv (the program first).
    fn argv(&mut self, argv: &[Arg], heredocs: &[String], depth: usize) {
        let Some(program) = argv.first() else {
            return;
        };
        let shown = || argv.iter().map(|a| a.text.as_str()).collect::<Vec<_>>().join(" ");
        if program.dynamic || program.text.contains(['*', '?', '[', '{']) {
            self.gate(shown(), "its program is known only when it runs");
            return;
        }
        let name = program.text.rsplit('/').next().unwrap_or(&program.text);
        if !self.programs.iter().any(|p| p == name) {
            self.programs.push(name.to_string());
        }
        let rest = &argv[1..];
        let words: Vec<&str> = rest.iter().map(|a| a.text.as_str()).collect();
        match name {
            "rm" | "unlink" | "shred" => self.gate(shown(), format!("`{name}` deletes files")),
            "dd" => self.gate(shown(), "`dd` writes raw blocks"),
            "truncate" => self.gate(shown(), "`truncate` cuts files"),
            n if n == "mkfs" || n.starts_with("mkfs.") || n == "mke2fs" => {
                self.gate(shown(), "makes a file system, erasing the device")
            }
            "chmod" | "chown" | "chgrp" if words.iter().any(|w| recursive_flag(w)) => {
                // The first operand is the mode or owner (a mode may look like
                // an option: `-w`); the rest are paths. Unless every one is
                // known to be inside the workspace, it may reach outside.
                let paths: Vec<&Arg> = rest.iter().filter(|a| !a.text.starts_with('-')).skip(1).collect();
                let reference = words.iter().any(|w| w.starts_with("--reference"));
                if paths.is_empty() || reference || paths.iter().any(|a| !self.inside_workspace(a)) {
                    self.gate(shown(), format!("`{name} -R` may reach outside the workspace"));
                }
            }
            "cp" | "mv" | "install" => {
                // Onto an existing file: its content is gone.
                let targets: Vec<&Arg> = rest.iter().filter(|a| !a.text.starts_with('-')).collect();
                if targets.len() >= 2
                    && let Some(last) = targets.last()
                    && !words.iter().any(|w| *w == "-n" || *w == "--no-clobber" || *w == "-t")
                {
                    let path = self.absolute(&last.text);
                    if last.dynamic || ((self.ctx.exists)(&path) && !path.is_dir()) {
                        self.gate(shown(), format!("`{name}` overwrites the existing file {}", last.text));
                    }
                }
            }
            "rsync"
                if words
                    .iter()
                    .any(|w| w.starts_with("--delete") || *w == "--remove-source-files") =>
            {
                self.gate(shown(), "`rsync --delete` deletes files")
            }
            "source" | "." if rest.iter().any(|a| a.dynamic) || rest.is_empty() => {
                self.gate(shown(), "runs a script known only when it runs")
            }
            "busybox" | "toybox" => self.argv(rest, heredocs, depth),
            // A program run under another name: what runs is not what is read.
            "hash" if words.iter().any(|w| w.starts_with("-p")) => {
                self.gate(shown(), "`hash -p` runs a program under another name")
            }
            "alias" => self.gate(shown(), "an alias runs commands under another name"),
            "enable" if !words.is_empty() => self.gate(shown(), "`enable` changes which builtins run"),
            "shopt" if words.contains(&"expand_aliases") => {
                self.gate(shown(), "aliases make commands run under other names")
            }
            "find" => self.find(argv, rest, depth),
            "git" => self.git(&shown(), &words),
            "tee"
                if !words
                    .iter()
                    .any(|w| *w == "-a" || *w == "--append" || short_flags(w).contains(&'a')) =>
            {
                for file in rest.iter().filter(|a| !a.text.starts_with('-')) {
                    self.overwrite(file, &format!("tee {}", file.text));
                }
            }
            "bash" | "sh" | "zsh" | "dash" | "ksh" => {
                if let Some(at) = words.iter().position(|w| {
                    *w == "-c" || (w.starts_with('-') && !w.starts_with("--") && short_flags(w).contains(&'c'))
                }) {
                    // The script is the first word after -c that is not an option.
                    match rest[at + 1..].iter().find(|a| !a.text.starts_with('-')) {
                        Some(script) if !script.dynamic => self.script(&script.text, depth + 1),
                        _ => self.gate(shown(), "runs a script known only when it runs"),
                    }
                } else if words.iter().all(|w| w.starts_with('-')) || words.iter().any(|w| w.starts_with("/dev/")) {
                    // The script comes on its input: a here-document is read;
                    // a pipe or a here-string is not known here.
                    if heredocs.is_empty() {
                        self.gate(shown(), "runs a script from its input, which is not read here");
                    }
                    for doc in heredocs {
                        self.script(doc, depth + 1);
                    }
                }
            }
            "eval" => {
                let script: Vec<&str> = words.clone();
                if rest.iter().any(|a| a.dynamic) {
                    self.gate(shown(), "evaluates text known only when it runs");
                } else {
                    self.script(&script.join(" "), depth + 1);
                }
            }
            "env" if words.iter().any(|w| *w == "-S" || w.starts_with("--split-string")) => {
                match rest
                    .iter()
                    .skip_while(|a| a.text != "-S" && !a.text.starts_with("--split-string"))
                    .nth(1)
                {
                    Some(script) if !script.dynamic => self.script(&script.text, depth + 1),
                    _ => self.gate(shown(), "runs a command known only when it runs"),
                }
            }
            "sudo" | "doas" | "env" | "nice" | "nohup" | "time" | "command" | "exec" | "builtin" | "stdbuf"
            | "ionice" | "setsid" => {
                let skip = wrapped_start(name, rest);
                self.argv(&rest[skip.min(rest.len())..], heredocs, depth);
            }
            "timeout" => {
                // timeout [options] DURATION COMMAND…; -s and -k take a value.
                let mut i = 0;
                while let Some(arg) = rest.get(i).filter(|a| a.text.starts_with('-')) {
                    i += if matches!(arg.text.as_str(), "-s" | "-k" | "--signal" | "--kill-after") {
                        2
                    } else {
                        1
                    };
                }
                self.argv(&rest[(i + 1).min(rest.len())..], heredocs, depth);
            }
            "xargs" => {
                let skip = xargs_start(rest);
                self.argv(&rest[skip.min(rest.len())..], heredocs, depth);
            }
            n if let Some(language) = Interpreter::of(n) => {
                // Code given inline (`python3 -c`, `perl -e`, `node -e`) or
                // on a here-document is read for the calls that delete files
                // or run commands; a script file is not read.
                let mut codes: Vec<&Arg> = Vec::new();
                for (i, word) in words.iter().enumerate() {
                    if language.inline_flags().contains(word)
                        && let Some(code) = rest.get(i + 1)
                    {
                        codes.push(code);
                    }
                }
                // Shown as it could be typed again: the code in quotes.
                let typed = argv
                    .iter()
                    .map(|a| crate::model::text::shell_word(&a.text))
                    .collect::<Vec<_>>()
                    .join(" ");
                for code in codes {
                    if code.dynamic {
                        self.gate(shown(), "runs code known only when it runs");
                    } else {
                        self.inline_code(&typed, language, &code.text);
                    }
                }
                for doc in heredocs {
                    self.inline_code(&typed, language, doc);
                }
            }
            _ => {}
        }
    }

    /// Gates inline code that calls what deletes files or runs commands.
    fn inline_code(&mut self, shown: &str, language: Interpreter, code: &str) {
        if let Some((call, why)) = language.destructive().iter().find(|(call, _)| code.contains(call)) {
            self.gate(
                cut_for_show(shown),
                format!("its inline code calls `{call}`, which {why}"),
            );
        }
    }

    fn find(&mut self, argv: &[Arg], rest: &[Arg], depth: usize) {
        let shown = argv.iter().map(|a| a.text.as_str()).collect::<Vec<_>>().join(" ");
        let mut i = 0;
        while i < rest.len() {
            match rest[i].text.as_str() {
                "-delete" => self.gate(shown.clone(), "`find -delete` deletes files"),
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    let end = rest[i + 1..]
                        .iter()
                        .position(|a| a.text == ";" || a.text == "+")
                        .map_or(rest.len(), |p| i + 1 + p);
                    self.argv(&rest[i + 1..end], &[], depth);
                    i = end;
                }
                _ => {}
            }
            i += 1;
        }
    }

    fn git(&mut self, shown: &str, words: &[&str]) {
        // Global options come before the subcommand (`git -C dir reset --hard`).
        let mut i = 0;
        while i < words.len() && words[i].starts_with('-') {
            if matches!(words[i], "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace") {
                i += 1;
            }
            i += 1;
        }
        let Some(sub) = words.get(i) else {
            return;
        };
        let args = &words[i + 1..];
        // `git -c alias.x='!cmd' x` runs a shell command.
        if words[..i].iter().any(|w| w.contains('!') || w.contains("alias.")) {
            self.gate(
                shown,
                "a git alias given on the command line runs commands not read here",
            );
            return;
        }
        // git accepts a long option cut short: `--har` is `--hard`.
        let long = |full: &str, min: usize| {
            args.iter()
                .any(|a| a.len() >= min && full.starts_with(*a) && a.starts_with("--"))
        };
        match *sub {
            "reset" if long("--hard", 4) || long("--merge", 4) || long("--keep", 4) => {
                self.gate(shown, "`git reset --hard` discards uncommitted work")
            }
            "checkout"
                if args
                    .iter()
                    .any(|a| *a == "--" || *a == "." || *a == "-f" || *a == "--force") =>
            {
                self.gate(shown, "`git checkout` over paths discards uncommitted changes")
            }
            "restore" => self.gate(shown, "`git restore` discards uncommitted changes"),
            "stash" if matches!(args.first(), Some(&"clear") | Some(&"drop")) => {
                self.gate(shown, "`git stash clear/drop` deletes stashed work")
            }
            // `git stash` (push, save, -u, -k …) takes the uncommitted work out of the tree.
            "stash"
                if !matches!(
                    args.first(),
                    Some(&"list") | Some(&"show") | Some(&"apply") | Some(&"pop") | Some(&"branch") | Some(&"create")
                ) =>
            {
                self.gate(shown, "`git stash` takes uncommitted work out of the tree")
            }
            "branch"
                if args
                    .iter()
                    .any(|a| *a == "-D" || *a == "-d" || *a == "--delete" || a.contains('D')) =>
            {
                self.gate(shown, "`git branch -D` deletes a branch")
            }
            "clean"
                if !args
                    .iter()
                    .any(|a| *a == "-n" || *a == "--dry-run" || short_flags(a).contains(&'n')) =>
            {
                self.gate(shown, "`git clean` deletes untracked files")
            }
            "push"
                if args.iter().any(|a| {
                    a.starts_with("--force")
                        || *a == "--mirror"
                        || *a == "--delete"
                        || short_flags(a).contains(&'f')
                        || short_flags(a).contains(&'d')
                        || (a.starts_with('+') && a.len() > 1)
                        || (a.starts_with(':') && a.len() > 1)
                }) =>
            {
                self.gate(shown, "a forced push rewrites the remote's history")
            }
            _ => {}
        }
    }
}

/// A language whose interpreter takes code on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Interpreter {
    Python,
    Perl,
    Ruby,
    Node,
    Php,
}

impl Interpreter {
    fn of(program: &str) -> Option<Self> {
        let version = |rest: &str| rest.chars().all(|c| c.is_ascii_digit() || c == '.');
        Some(match program {
            p if p.strip_prefix("python").is_some_and(version) => Self::Python,
            p if p.strip_prefix("perl").is_some_and(version) => Self::Perl,
            p if p.strip_prefix("ruby").is_some_and(version) => Self::Ruby,
            "node" | "nodejs" | "deno" | "bun" => Self::Node,
            p if p.strip_prefix("php").is_some_and(version) => Self::Php,
            _ => return None,
        })
    }

    /// The options whose value is code.
    fn inline_flags(self) -> &'static [&'static str] {
        match self {
            Self::Python => &["-c"],
            Self::Perl => &["-e", "-E"],
            Self::Ruby => &["-e"],
            Self::Node => &["-e", "--eval", "-p", "--print"],
            Self::Php => &["-r"],
        }
    }

    /// Calls that delete files or run commands the classifier cannot read.
    fn destructive(self) -> &'static [(&'static str, &'static str)] {
        const DELETES: &str = "deletes files";
        const RUNS: &str = "runs commands not read here";
        match self {
            Self::Python => &[
                ("rmtree", DELETES),
                ("os.remove", DELETES),
                ("os.unlink", DELETES),
                ("os.rmdir", DELETES),
                ("removedirs", DELETES),
                (".unlink(", DELETES),
                (".rmdir(", DELETES),
                ("truncate(", DELETES),
                ("os.system", RUNS),
                ("subprocess", RUNS),
                ("os.popen", RUNS),
                ("os.exec", RUNS),
                ("pty.spawn", RUNS),
                ("exec(", RUNS),
                ("eval(", RUNS),
                ("__import__", RUNS),
            ],
            Self::Perl => &[
                ("unlink", DELETES),
                ("rmtree", DELETES),
                ("remove_tree", DELETES),
                ("rmdir", DELETES),
                ("truncate", DELETES),
                ("system", RUNS),
                ("exec", RUNS),
                ("qx", RUNS),
                ("`", RUNS),
                ("open(", RUNS),
                ("eval", RUNS),
            ],
            Self::Ruby => &[
                ("rm_rf", DELETES),
                ("rm_r", DELETES),
                ("FileUtils.rm", DELETES),
                ("File.delete", DELETES),
                ("File.unlink", DELETES),
                ("Dir.rmdir", DELETES),
                ("Dir.delete", DELETES),
                ("truncate", DELETES),
                ("system", RUNS),
                ("exec", RUNS),
                ("spawn", RUNS),
                ("%x", RUNS),
                ("`", RUNS),
                ("Open3", RUNS),
                ("IO.popen", RUNS),
                ("eval", RUNS),
            ],
            Self::Node => &[
                ("unlink", DELETES),
                ("rmSync", DELETES),
                ("rmdir", DELETES),
                (".rm(", DELETES),
                ("truncate", DELETES),
                ("child_process", RUNS),
                ("execSync", RUNS),
                ("spawn", RUNS),
                ("Deno.remove", DELETES),
                ("Deno.run", RUNS),
                ("Deno.Command", RUNS),
                ("Bun.spawn", RUNS),
                ("Bun.$", RUNS),
                ("eval(", RUNS),
                ("Function(", RUNS),
                ("require(", RUNS),
                ("import(", RUNS),
            ],
            Self::Php => &[
                ("unlink", DELETES),
                ("rmdir", DELETES),
                ("ftruncate", DELETES),
                ("system", RUNS),
                ("exec", RUNS),
                ("passthru", RUNS),
                ("popen", RUNS),
                ("`", RUNS),
                ("eval", RUNS),
            ],
        }
    }
}

/// Whether a script is too deep or too long to hand to the parser, whose
/// recursion has no bound of its own (a stack overflow would abort aot).
fn too_deep(text: &str) -> bool {
    const LONGEST: usize = 64 * 1024;
    const DEEPEST: usize = 64;
    if text.len() > LONGEST {
        return true;
    }
    let (mut depth, mut deepest) = (0usize, 0usize);
    for word in text.split(|c: char| c.is_whitespace() || c == ';') {
        let opens = word.matches(['(', '{']).count()
            + usize::from(matches!(
                word,
                "if" | "while" | "until" | "for" | "case" | "do" | "then"
            ));
        let closes = word.matches([')', '}']).count() + usize::from(matches!(word, "fi" | "done" | "esac"));
        depth = (depth + opens).saturating_sub(closes);
        deepest = deepest.max(depth + opens);
    }
    deepest > DEEPEST
}

/// A long script cut for a message.
fn cut_for_show(text: &str) -> String {
    let first: String = text.chars().take(80).collect();
    if first.len() < text.len() {
        format!("{first}…")
    } else {
        first
    }
}

/// The source text of a word piece, where bash would find a command in it.
fn raw_of(piece: &WordPieceWithSource) -> String {
    format!("{:?}", piece.piece)
}

/// Whether a word is a recursive flag of chmod/chown/chgrp.
fn recursive_flag(word: &str) -> bool {
    word == "--recursive" || short_flags(word).contains(&'R')
}

/// The letters of a bundle of short flags (`-rf` → r, f); none for other words.
fn short_flags(word: &str) -> Vec<char> {
    match word.strip_prefix('-') {
        Some(rest) if !rest.starts_with('-') && !rest.is_empty() && rest.chars().all(|c| c.is_ascii_alphabetic()) => {
            rest.chars().collect()
        }
        _ => Vec::new(),
    }
}

/// Where the wrapped command starts after a wrapper's own options.
fn wrapped_start(wrapper: &str, rest: &[Arg]) -> usize {
    let mut i = 0;
    while let Some(arg) = rest.get(i) {
        let t = arg.text.as_str();
        if wrapper == "env" && t.contains('=') && !t.starts_with('-') {
            i += 1;
            continue;
        }
        if !t.starts_with('-') {
            break;
        }
        // Options that take a value.
        let takes_value = match wrapper {
            "sudo" => matches!(
                t,
                "-u" | "-g"
                    | "-C"
                    | "-D"
                    | "-h"
                    | "-p"
                    | "-r"
                    | "-t"
                    | "-U"
                    | "--user"
                    | "--group"
                    | "--chdir"
                    | "--host"
                    | "--prompt"
                    | "--role"
                    | "--type"
                    | "--other-user"
                    | "--close-from"
            ),
            "exec" => t == "-a",
            "env" => matches!(t, "-u" | "-C" | "-S"),
            "nice" => t == "-n",
            "stdbuf" => matches!(t, "-i" | "-o" | "-e"),
            "ionice" => matches!(t, "-c" | "-n" | "-p"),
            _ => false,
        };
        i += if takes_value { 2 } else { 1 };
    }
    i
}

/// Where xargs' command starts after its options.
fn xargs_start(rest: &[Arg]) -> usize {
    let mut i = 0;
    while let Some(arg) = rest.get(i) {
        let t = arg.text.as_str();
        if !t.starts_with('-') {
            break;
        }
        let takes_value = matches!(
            t,
            "-a" | "-d" | "-E" | "-I" | "-L" | "-n" | "-P" | "-s" | "--delimiter" | "--max-args" | "--max-procs"
        );
        i += if takes_value { 2 } else { 1 };
    }
    i
}

/// `path` with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests;
