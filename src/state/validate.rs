//! Validation of a state file: the shape (every field known, every value of the
//! right kind, within its limits) checked against the generated schema, and the
//! graph (ids, dependencies, alternatives, cycles) checked against itself. Every
//! problem is reported at once, at its line and column.

use std::collections::{HashMap, HashSet};

use petgraph::algo::tarjan_scc;
use petgraph::graph::{DiGraph, NodeIndex};
use serde_json::{Map, Value};

use crate::model::AtomId;
use crate::model::text::cut;
use crate::model::time::Span;
use crate::state::diag::{Diagnostic, nearest};
use crate::state::spans::{Loc, Node, NodeKind, Scalar};
use crate::state::{FORMAT_VERSION, StateFile};

/// The result of checking a document's shape.
#[derive(Debug, Default)]
pub struct Shape {
    /// Every problem found.
    pub errors: Vec<Diagnostic>,
    /// Locations of keys the schema does not know and of values it refused, so
    /// that the rest can be read leniently.
    pub unknown_keys: HashSet<(u64, u64)>,
}

/// Checks a located document against the JSON Schema; returns every problem.
pub fn check_shape(root: &Node, schema: &Value) -> Shape {
    let empty = Map::new();
    let defs = schema.get("$defs").and_then(Value::as_object).unwrap_or(&empty);
    let mut walker = Walker {
        defs,
        errors: Vec::new(),
        unknown: HashSet::new(),
    };
    walker.walk(root, schema, "");
    Shape {
        errors: walker.errors,
        unknown_keys: walker.unknown,
    }
}

/// Returns the document as JSON without the keys at `skip` (key locations), so
/// that the rest can be read even when some fields are unknown.
pub fn to_json_without(node: &Node, skip: &HashSet<(u64, u64)>) -> Value {
    match &node.kind {
        NodeKind::Map(entries) => Value::Object(
            entries
                .iter()
                .filter(|(_, key, value)| {
                    !skip.contains(&(key.line, key.column)) && !skip.contains(&(value.loc.line, value.loc.column))
                })
                .map(|(k, _, v)| (k.clone(), to_json_without(v, skip)))
                .collect(),
        ),
        NodeKind::Seq(items) => Value::Array(items.iter().map(|i| to_json_without(i, skip)).collect()),
        NodeKind::Scalar(Scalar::Null) => Value::Null,
        NodeKind::Scalar(Scalar::Bool(b)) => Value::Bool(*b),
        NodeKind::Scalar(Scalar::Int(i)) => {
            i64::try_from(*i).map_or_else(|_| Value::String(i.to_string()), Value::from)
        }
        NodeKind::Scalar(Scalar::Float(f)) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        NodeKind::Scalar(Scalar::Str(s)) => Value::String(s.clone()),
    }
}

struct Walker<'s> {
    defs: &'s Map<String, Value>,
    errors: Vec<Diagnostic>,
    unknown: HashSet<(u64, u64)>,
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn is_null_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("null")
}

fn scalar_text(node: &Node) -> Option<String> {
    match &node.kind {
        NodeKind::Scalar(Scalar::Str(s)) => Some(s.clone()),
        NodeKind::Scalar(Scalar::Int(i)) => Some(i.to_string()),
        NodeKind::Scalar(Scalar::Float(f)) => Some(f.to_string()),
        NodeKind::Scalar(Scalar::Bool(b)) => Some(b.to_string()),
        _ => None,
    }
}

fn type_accepts(ty: &str, node: &Node) -> bool {
    match (ty, &node.kind) {
        ("object", NodeKind::Map(_)) | ("array", NodeKind::Seq(_)) => true,
        ("null", NodeKind::Scalar(Scalar::Null)) => true,
        // serde-saphyr reads any plain scalar into a string field (the Rust type is the schema).
        ("string", NodeKind::Scalar(s)) => !matches!(s, Scalar::Null),
        ("integer", NodeKind::Scalar(Scalar::Int(_))) => true,
        ("number", NodeKind::Scalar(Scalar::Int(_) | Scalar::Float(_))) => true,
        ("boolean", NodeKind::Scalar(Scalar::Bool(_))) => true,
        ("boolean", NodeKind::Scalar(Scalar::Str(s))) => {
            matches!(s.to_ascii_lowercase().as_str(), "y" | "yes" | "n" | "no" | "on" | "off")
        }
        _ => false,
    }
}

impl<'s> Walker<'s> {
    fn resolve(&self, schema: &'s Value) -> &'s Value {
        match schema.get("$ref").and_then(Value::as_str) {
            Some(reference) => {
                let name = reference.rsplit('/').next().unwrap_or(reference);
                self.defs.get(name).unwrap_or(schema)
            }
            None => schema,
        }
    }

    fn error(&mut self, node_loc: Option<Loc>, path: &str, message: String, help: Option<String>) {
        if let Some(loc) = node_loc {
            self.unknown.insert((loc.line, loc.column));
        }
        let mut d = Diagnostic::new(message).at(node_loc);
        if !path.is_empty() {
            d = d.field(path);
        }
        if let Some(help) = help {
            d = d.help(help);
        }
        self.errors.push(d);
    }

    fn walk(&mut self, node: &Node, schema: &'s Value, path: &str) {
        let schema = self.resolve(schema);
        if let Some(branches) = schema
            .get("anyOf")
            .or_else(|| schema.get("oneOf"))
            .and_then(Value::as_array)
        {
            self.walk_branches(node, branches, path);
            return;
        }
        if let Some(types) = schema.get("type") {
            let allowed: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !allowed.is_empty() && !allowed.iter().any(|t| type_accepts(t, node)) {
                let wanted = allowed
                    .iter()
                    .map(|t| {
                        if *t == "object" {
                            "a mapping"
                        } else if *t == "array" {
                            "a list"
                        } else {
                            t
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" or ");
                let found = match node.type_name() {
                    "object" => "a mapping",
                    "array" => "a list",
                    other => other,
                };
                self.error(node.loc(), path, format!("expected {wanted}, found {found}"), None);
                return;
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            let names: Vec<&str> = options.iter().filter_map(Value::as_str).collect();
            self.check_enum(node, &names, path);
        }
        if let NodeKind::Scalar(Scalar::Int(value)) = node.kind {
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64)
                && (value as f64) < min
            {
                let message = if value < 0 && min >= 0.0 {
                    format!("must not be negative, found {value}")
                } else {
                    format!("must be at least {min}, found {value}")
                };
                self.error(node.loc(), path, message, None);
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64)
                && (value as f64) > max
            {
                self.error(node.loc(), path, format!("must be at most {max}, found {value}"), None);
            }
        }
        if let NodeKind::Scalar(Scalar::Float(value)) = node.kind
            && let Some(min) = schema.get("minimum").and_then(Value::as_f64)
            && value < min
        {
            self.error(node.loc(), path, format!("must be at least {min}, found {value}"), None);
        }
        if schema.get("format").and_then(Value::as_str) == Some("duration")
            && let Some(text) = scalar_text(node)
            && let Err(message) = Span::parse(&text)
        {
            self.error(node.loc(), path, message, None);
        }
        match &node.kind {
            NodeKind::Map(entries) => self.walk_object(node, entries, schema, path),
            NodeKind::Seq(items) => {
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.walk(item, item_schema, &format!("{path}[{i}]"));
                    }
                }
            }
            NodeKind::Scalar(_) => {}
        }
    }

    fn check_enum(&mut self, node: &Node, names: &[&str], path: &str) {
        let Some(text) = scalar_text(node) else {
            self.error(node.loc(), path, format!("expected one of: {}", names.join(", ")), None);
            return;
        };
        if !names.contains(&text.as_str()) {
            let help = match nearest(&text, names.iter().copied()) {
                Some(near) => format!("did you mean `{near}`? expected one of: {}", names.join(", ")),
                None => format!("expected one of: {}", names.join(", ")),
            };
            self.error(node.loc(), path, format!("unknown value `{text}`"), Some(help));
        }
    }

    fn walk_branches(&mut self, node: &Node, branches: &'s [Value], path: &str) {
        let is_null = matches!(node.kind, NodeKind::Scalar(Scalar::Null));
        if is_null && branches.iter().any(|b| is_null_schema(self.resolve(b))) {
            return;
        }
        let candidates: Vec<&'s Value> = branches
            .iter()
            .map(|b| self.resolve(b))
            .filter(|b| !is_null_schema(b))
            .collect();
        // Enums whose variants are documented: one `const` branch per variant.
        let consts: Vec<&str> = candidates
            .iter()
            .filter_map(|b| b.get("const").and_then(Value::as_str))
            .collect();
        if !consts.is_empty() && consts.len() == candidates.len() {
            self.check_enum(node, &consts, path);
            return;
        }
        // Internally tagged enums: pick the branch by its `type` tag.
        if let Some(tag) = node.get("type").and_then(scalar_text) {
            let tag_of = |b: &Value| {
                let t = b.get("properties")?.get("type")?;
                t.get("const")
                    .or_else(|| t.get("enum").and_then(|e| e.get(0)))
                    .and_then(Value::as_str)
                    .map(str::to_string)
            };
            let tags: Vec<String> = candidates.iter().filter_map(|b| tag_of(b)).collect();
            if !tags.is_empty() {
                match candidates.iter().find(|b| tag_of(b).as_deref() == Some(tag.as_str())) {
                    Some(branch) => self.walk(node, branch, path),
                    None => {
                        let loc = node.get("type").and_then(Node::loc);
                        let help = format!("expected one of: {}", tags.join(", "));
                        self.error(loc, &join(path, "type"), format!("unknown type `{tag}`"), Some(help));
                    }
                }
                return;
            }
        }
        if let [only] = candidates.as_slice() {
            self.walk(node, only, path);
            return;
        }
        let mut first_errors = None;
        for branch in &candidates {
            let mut trial = Walker {
                defs: self.defs,
                errors: Vec::new(),
                unknown: HashSet::new(),
            };
            trial.walk(node, branch, path);
            if trial.errors.is_empty() {
                return;
            }
            first_errors.get_or_insert(trial.errors);
        }
        self.errors.extend(first_errors.unwrap_or_default());
    }

    fn walk_object(&mut self, node: &Node, entries: &[(String, Loc, Node)], schema: &'s Value, path: &str) {
        let properties = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        for (key, key_loc, value) in entries {
            let child = join(path, key);
            if let Some(prop) = properties.and_then(|p| p.get(key)) {
                self.walk(value, prop, &child);
            } else if let Some(extra @ Value::Object(_)) = additional {
                self.walk(value, extra, &child);
            } else if additional == Some(&Value::Bool(false)) {
                self.unknown.insert((key_loc.line, key_loc.column));
                // The help lists what a user writes: engine-owned fields and
                // version-1 leftovers are read but never suggested.
                let names: Vec<&str> = properties
                    .map(|p| {
                        p.iter()
                            .filter(|(_, prop)| !engine_owned(prop))
                            .map(|(name, _)| name.as_str())
                            .collect()
                    })
                    .unwrap_or_default();
                let suggestion =
                    nearest(key, names.iter().copied()).or_else(|| synonym(key).filter(|s| names.contains(s)));
                let help = match suggestion {
                    Some(near) => format!("did you mean `{near}`? valid fields here: {}", names.join(", ")),
                    None => format!("valid fields here: {}", names.join(", ")),
                };
                let where_ = if path.is_empty() {
                    "at the top level".to_string()
                } else {
                    format!("in `{path}`")
                };
                self.error(
                    Some(*key_loc),
                    "",
                    format!("unknown field `{key}` {where_}"),
                    Some(help),
                );
            }
        }
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !entries.iter().any(|(k, _, _)| k == name) {
                    let where_ = if path.is_empty() {
                        "at the top level".to_string()
                    } else {
                        format!("in `{path}`")
                    };
                    self.error(node.loc(), "", format!("missing field `{name}` {where_}"), None);
                }
            }
        }
    }
}

/// Whether a schema property is the engine's or the planner's to write (or a
/// version-1 leftover): not offered to a user as a field to write.
fn engine_owned(prop: &Value) -> bool {
    prop.get("description")
        .and_then(Value::as_str)
        .is_some_and(|d| d.contains("engine-owned") || d.contains("planner-owned") || d.starts_with("Version 1 only"))
}

/// Returns the field a common synonym from other tools most likely means.
fn synonym(key: &str) -> Option<&'static str> {
    Some(match key {
        "dependencies" | "depends_on" | "depends" | "needs" | "requires" | "after" => "deps",
        "command" | "cmd" | "script" | "shell" | "exec" => "run",
        "prompt" | "task" | "instructions" => "agent",
        "alternatives" | "any_of" | "one_of" | "choices" => "or",
        "checks" | "verify" | "test" | "tests" => "check",
        "environment" => "env",
        "workdir" | "working_directory" | "dir" => "cwd",
        _ => return None,
    })
}

/// Checks the graph and the other cross-field rules; returns every problem,
/// Things that are valid but probably not what the author meant, as
/// `field: message` lines: an OR atom with one alternative (no fallback).
pub fn warnings(state: &StateFile) -> Vec<String> {
    let mut out = Vec::new();
    for (id, atom) in &state.graph.atoms {
        if let Some([only]) = atom.or.as_deref() {
            out.push(format!(
                "graph.atoms.{id}: an OR atom with one alternative (`{only}`) has no fallback if it fails; \
                 add an alternative, or depend on it directly (`deps: [{only}]`)"
            ));
        }
    }
    let constraints = &state.objective.constraints;
    if constraints.commit() == crate::state::CommitPolicy::PerAtom
        && constraints.isolation() == crate::state::Isolation::None
    {
        out.push(
            "objective.constraints.commit: per_atom commits what isolation lands; with `isolation: none` nothing is committed"
                .to_string(),
        );
    }
    out
}

/// located through `root` when the document came from text.
pub fn check_semantics(state: &StateFile, root: Option<&Node>) -> Vec<Diagnostic> {
    let mut errors = Vec::new();
    let at = |keys: &[&str]| root.and_then(|r| r.path(keys)).and_then(Node::loc);
    // Atom nodes by id, built once: a lookup per atom must not scan the whole map.
    let atom_nodes: HashMap<&str, (Loc, &Node)> = match root.and_then(|r| r.path(&["graph", "atoms"])).map(|n| &n.kind)
    {
        Some(NodeKind::Map(entries)) => entries.iter().map(|(k, loc, v)| (k.as_str(), (*loc, v))).collect(),
        _ => HashMap::new(),
    };
    let atom_key = |id: &str| atom_nodes.get(id).and_then(|(loc, _)| (loc.line > 0).then_some(*loc));
    let atom_field = |id: &str, name: &str| atom_nodes.get(id).and_then(|(_, node)| node.get(name));
    let atom_field_key = |id: &str, name: &str| atom_nodes.get(id).and_then(|(_, node)| node.key_loc(name));
    let atom_item = |id: &str, name: &str, i: usize| atom_field(id, name).and_then(|n| n.item(i)).and_then(Node::loc);
    let atoms = &state.graph.atoms;
    let ids: Vec<&str> = atoms.keys().map(AtomId::as_str).collect();

    if state.version != FORMAT_VERSION {
        errors.push(
            Diagnostic::new(format!(
                "unsupported version {}; this aot reads versions 1 and {FORMAT_VERSION}",
                state.version
            ))
            .field("version")
            .at(at(&["version"]))
            .help(
                "a file written by a newer aot needs that aot; this one writes `version: 2` and migrates `version: 1`",
            ),
        );
    }
    if let Some(base) = &state.objective.base_case
        && base.command.trim().is_empty()
    {
        errors.push(
            Diagnostic::new("the base case has an empty command")
                .field("objective.base_case.command")
                .at(at(&["objective", "base_case", "command"]))
                .help("give a command whose exit code 0 means the objective is met, e.g. `cargo test -q`"),
        );
    }

    if let Some(agent) = state.workers.as_ref().and_then(|w| w.agent.as_ref()) {
        if agent.command.is_none() && agent.template.is_none() {
            errors.push(
                Diagnostic::new("the agent worker names neither a command nor a template")
                    .field("workers.agent")
                    .at(at(&["workers", "agent"]))
                    .help("give `command: \"my-agent --headless\"` (the prompt arrives on stdin) or `template: claude` (or codex, aider, goose, gemini, opencode)"),
            );
        } else if agent.command.as_deref().is_some_and(|c| c.trim().is_empty()) {
            errors.push(
                Diagnostic::new("the agent command is empty")
                    .field("workers.agent.command")
                    .at(at(&["workers", "agent", "command"])),
            );
        }
    }

    let constraints = &state.objective.constraints;
    for (name, value) in constraints.positive_limits() {
        if value == Some(0) {
            errors.push(
                Diagnostic::new("must be at least 1, found 0")
                    .field(format!("objective.constraints.{name}"))
                    .at(at(&["objective", "constraints", name])),
            );
        }
    }
    if let Some(ggs) = &constraints.ggs {
        for (name, value) in ggs.written() {
            if let Some(v) = value.filter(|v| !(v.is_finite() && *v >= 0.0)) {
                errors.push(
                    Diagnostic::new(format!("must be a number ≥ 0, found {v}"))
                        .field(format!("objective.constraints.ggs.{name}"))
                        .at(at(&["objective", "constraints", "ggs", name])),
                );
            }
        }
    }

    if let Some(v) = constraints.max_cost.filter(|v| !(v.is_finite() && *v >= 0.0)) {
        errors.push(
            Diagnostic::new(format!("must be an amount in dollars ≥ 0, found {v}"))
                .field("objective.constraints.max_cost")
                .at(at(&["objective", "constraints", "max_cost"])),
        );
    }
    for (model, price) in state.llm.iter().flat_map(|l| &l.prices) {
        for (name, v) in [("input", price.input), ("output", price.output)] {
            if !(v.is_finite() && v >= 0.0) {
                errors.push(
                    Diagnostic::new(format!("must be dollars per million tokens ≥ 0, found {v}"))
                        .field(format!("llm.prices.{model}.{name}"))
                        .at(at(&["llm", "prices", model, name])),
                );
            }
        }
    }

    let mut owner_of_alternative: HashMap<&str, &str> = HashMap::new();
    for (id, atom) in atoms {
        let field = |name: &str| format!("graph.atoms.{id}.{name}");
        let id_loc = atom_key(id);
        if !valid_id(id) {
            errors.push(
                Diagnostic::new(format!("invalid atom id `{id}`"))
                    .at(id_loc)
                    .help("atom ids use letters, digits, `_`, `-` and `.`, and start with a letter or digit"),
            );
        }
        let kinds: Vec<&str> = [
            atom.run.as_ref().map(|_| "run"),
            atom.agent.as_ref().map(|_| "agent"),
            atom.or.as_ref().map(|_| "or"),
        ]
        .into_iter()
        .flatten()
        .collect();
        match kinds.as_slice() {
            [] => errors.push(
                Diagnostic::new(format!("atom `{id}` has nothing to do"))
                    .at(id_loc)
                    .help("give it `run` (a shell command), `agent` (a prompt) or `or` (alternatives)"),
            ),
            [_] => {}
            many => errors.push(
                Diagnostic::new(format!(
                    "atom `{id}` has {}; an atom does exactly one thing",
                    many.join(" and ")
                ))
                .at(id_loc)
                .help("split it into separate atoms, linked by `deps`"),
            ),
        }
        for (name, text) in [("run", &atom.run), ("agent", &atom.agent), ("probe", &atom.probe)] {
            if let Some(text) = text
                && text.trim().is_empty()
            {
                errors.push(
                    Diagnostic::new("is empty")
                        .field(field(name))
                        .at(atom_field(id, name).and_then(Node::loc)),
                );
            }
        }
        for (i, check) in atom.check.iter().enumerate() {
            if check.trim().is_empty() {
                let loc = atom_item(id, "check", i);
                errors.push(
                    Diagnostic::new("is an empty command")
                        .field(format!("{}[{i}]", field("check")))
                        .at(loc),
                );
            }
        }
        for (name, value) in &atom.env {
            if crate::model::secret::is_secret_name(name) && !value.is_empty() {
                errors.push(
                    Diagnostic::new(format!("`{name}` looks like a secret, and `env:` values are stored in the file and its journal"))
                        .field(format!("{}.{name}", field("env")))
                        .at(atom_field(id, "env").and_then(|env| env.key_loc(name)))
                        .help(format!("set `{name}` in aot's environment instead: every atom inherits it, and aot keeps its value out of what it records")),
                );
            }
        }
        if let Some(cwd) = &atom.cwd
            && !inside_folder(cwd)
        {
            errors.push(
                Diagnostic::new(format!("`{}` is outside the state file's folder", cut(cwd, 80)))
                    .field(field("cwd"))
                    .at(atom_field(id, "cwd").and_then(Node::loc))
                    .help("`cwd` is a folder relative to the state file's, inside it (e.g. `cwd: crates/core`)"),
            );
        }
        if let Some(alternatives) = &atom.or {
            let or_loc = atom_field(id, "or").and_then(Node::loc);
            if alternatives.is_empty() {
                errors.push(
                    Diagnostic::new(format!("OR atom `{id}` has no alternatives"))
                        .field(field("or"))
                        .at(or_loc)
                        .help("list at least one atom id, e.g. `or: [patch, rewrite]`"),
                );
            }
            let mut seen = HashSet::new();
            for (i, alt) in alternatives.iter().enumerate() {
                let loc = atom_item(id, "or", i);
                let alt_field = format!("{}[{i}]", field("or"));
                if alt == id {
                    errors.push(
                        Diagnostic::new(format!("OR atom `{id}` lists itself as an alternative"))
                            .field(alt_field)
                            .at(loc),
                    );
                } else if !atoms.contains_key(alt) {
                    errors.push(unknown_atom("alternative", alt, &ids).field(alt_field).at(loc));
                } else if !seen.insert(alt.as_str()) {
                    errors.push(
                        Diagnostic::new(format!("alternative `{alt}` is listed twice"))
                            .field(alt_field)
                            .at(loc),
                    );
                } else if let Some(other) = owner_of_alternative.insert(alt.as_str(), id.as_str()) {
                    errors.push(
                        Diagnostic::new(format!("atom `{alt}` is an alternative of both `{other}` and `{id}`"))
                            .field(alt_field)
                            .at(loc)
                            .help("an alternative belongs to one OR atom; share work through `deps` instead"),
                    );
                }
            }
            for (name, present) in [
                ("deps", !atom.deps.is_empty()),
                ("check", !atom.check.is_empty()),
                ("criteria", !atom.criteria.is_empty()),
                ("probe", atom.probe.is_some()),
                ("read_only", atom.read_only),
                ("timeout", atom.timeout.is_some()),
                ("env", !atom.env.is_empty()),
                ("cwd", atom.cwd.is_some()),
            ] {
                if present {
                    errors.push(
                        Diagnostic::new(format!("`{name}` does not apply to an OR atom"))
                            .field(field(name))
                            .at(atom_field_key(id, name))
                            .help("put it on the alternatives, which are the atoms that run"),
                    );
                }
            }
            if let Some(chosen) = &atom.chosen
                && !alternatives.contains(chosen)
            {
                errors.push(
                    Diagnostic::new(format!(
                        "chosen alternative `{chosen}` is not one of `{id}`'s alternatives"
                    ))
                    .field(field("chosen"))
                    .at(atom_field(id, "chosen").and_then(Node::loc)),
                );
            }
        } else {
            if atom.speculative {
                errors.push(
                    Diagnostic::new("`speculative` applies only to OR atoms")
                        .field(field("speculative"))
                        .at(atom_field_key(id, "speculative")),
                );
            }
            if atom.chosen.is_some() {
                errors.push(
                    Diagnostic::new("`chosen` applies only to OR atoms")
                        .field(field("chosen"))
                        .at(atom_field_key(id, "chosen")),
                );
            }
        }
        let mut seen = HashSet::new();
        for (i, dep) in atom.deps.iter().enumerate() {
            let loc = atom_item(id, "deps", i);
            let dep_field = format!("{}[{i}]", field("deps"));
            if dep == id {
                errors.push(
                    Diagnostic::new(format!("atom `{id}` depends on itself"))
                        .field(dep_field)
                        .at(loc),
                );
            } else if !atoms.contains_key(dep) {
                errors.push(unknown_atom("dependency", dep, &ids).field(dep_field).at(loc));
            } else if !seen.insert(dep.as_str()) {
                errors.push(
                    Diagnostic::new(format!("dependency `{dep}` is listed twice"))
                        .field(dep_field)
                        .at(loc),
                );
            }
        }
    }
    errors.extend(find_cycles(state, root));
    if errors.is_empty() {
        // Templates are checked on an acyclic graph only: they need the closure of deps.
        errors.extend(check_templates(state, &|id: &str, name: &str| {
            atom_field(id, name).and_then(Node::loc)
        }));
    }
    errors
}

/// Checks `{{bindings.ID.FIELD}}` references in `run`, `agent`, `probe` and
/// `check`: the atom must
/// exist and be a dependency (direct or not) of the atom using it — otherwise
/// its binding may not exist when the command runs — and FIELD must be
/// `summary` or `output`.
fn check_templates(state: &StateFile, loc_of: &dyn Fn(&str, &str) -> Option<Loc>) -> Vec<Diagnostic> {
    let atoms = &state.graph.atoms;
    let ids: Vec<&str> = atoms.keys().map(AtomId::as_str).collect();
    let mut errors = Vec::new();
    for (id, atom) in atoms {
        let texts = [("run", &atom.run), ("agent", &atom.agent), ("probe", &atom.probe)]
            .into_iter()
            .filter_map(|(name, text)| Some((name, text.as_ref()?)))
            .chain(atom.check.iter().map(|text| ("check", text)));
        for (name, text) in texts {
            let refs = crate::state::template::references(text);
            if refs.is_empty() {
                continue;
            }
            let closure = dependency_closure(state, id);
            for r in refs {
                let field = format!("graph.atoms.{id}.{name}");
                let at = loc_of(id, name);
                if !atoms.contains_key(r.atom.as_str()) {
                    errors.push(unknown_atom("template reference", &r.atom, &ids).field(field).at(at));
                } else if !closure.contains(r.atom.as_str()) {
                    errors.push(
                        Diagnostic::new(format!(
                            "`{{{{bindings.{}.{}}}}}` refers to `{}`, which `{id}` does not depend on",
                            r.atom, r.field, r.atom
                        ))
                        .field(field)
                        .at(at)
                        .help(format!(
                            "add `{}` to `deps`, so its binding exists before `{id}` runs",
                            r.atom
                        )),
                    );
                } else if !matches!(r.field.as_str(), "summary" | "output") {
                    errors.push(
                        Diagnostic::new(format!(
                            "unknown binding field `{}` in `{{{{bindings.{}.{}}}}}`",
                            r.field, r.atom, r.field
                        ))
                        .field(field)
                        .at(at)
                        .help("a binding offers `summary` and `output`"),
                    );
                }
            }
        }
    }
    errors
}

/// Returns the atoms `id` depends on, directly or through other atoms (an OR
/// dependency brings its alternatives, one of which will be solved).
fn dependency_closure<'a>(state: &'a StateFile, id: &str) -> HashSet<&'a str> {
    let atoms = &state.graph.atoms;
    let mut seen = HashSet::new();
    let mut stack: Vec<&str> = atoms
        .get(id)
        .map(|a| a.deps.iter().map(AtomId::as_str).collect())
        .unwrap_or_default();
    while let Some(next) = stack.pop() {
        if seen.insert(next)
            && let Some(atom) = atoms.get(next)
        {
            stack.extend(atom.deps.iter().map(AtomId::as_str));
            stack.extend(atom.or.iter().flatten().map(AtomId::as_str));
        }
    }
    seen
}

fn unknown_atom(what: &str, name: &str, ids: &[&str]) -> Diagnostic {
    const LISTED: usize = 20;
    let d = Diagnostic::new(format!("{what} `{}` is not an atom", cut(name, 80)));
    match nearest(name, ids.iter().copied()) {
        Some(near) => d.help(format!("did you mean `{near}`?")),
        None if ids.is_empty() => d.help("the graph has no atoms"),
        None if ids.len() > LISTED => d.help(format!(
            "atoms are: {}, … ({} in all)",
            ids[..LISTED].join(", "),
            ids.len()
        )),
        None => d.help(format!("atoms are: {}", ids.join(", "))),
    }
}

/// Returns whether a relative folder stays inside the folder it is relative
/// to, judged on its text: not absolute, and no `..` climbs above it.
fn inside_folder(path: &str) -> bool {
    use std::path::Component;
    let mut depth: usize = 0;
    for part in std::path::Path::new(path).components() {
        match part {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    true
}

/// Returns whether `id` can name an atom: it must fit in environment variable
/// names (`AOT_BINDING_<ID>`) and templates (`{{bindings.ID.summary}}`).
pub fn valid_id(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn find_cycles(state: &StateFile, root: Option<&Node>) -> Vec<Diagnostic> {
    let atoms = &state.graph.atoms;
    let mut graph = DiGraph::<&str, ()>::with_capacity(atoms.len(), atoms.len());
    let index: HashMap<&str, NodeIndex> = atoms
        .keys()
        .map(|id| (id.as_str(), graph.add_node(id.as_str())))
        .collect();
    for (id, atom) in atoms {
        let from = index[id.as_str()];
        let targets = atom.deps.iter().chain(atom.or.iter().flatten());
        for target in targets {
            if target != id
                && let Some(&to) = index.get(target.as_str())
            {
                graph.update_edge(from, to, ());
            }
        }
    }
    let mut errors = Vec::new();
    for component in tarjan_scc(&graph) {
        if component.len() < 2 {
            continue;
        }
        let members: HashSet<NodeIndex> = component.iter().copied().collect();
        let start = component
            .iter()
            .copied()
            .min_by_key(|n| atoms.get_index_of(graph[*n]))
            .unwrap_or(component[0]);
        let cycle = cycle_through(&graph, start, &members);
        let names: Vec<&str> = cycle.iter().map(|n| graph[*n]).collect();
        let first = names.first().copied().unwrap_or_default();
        let loc = root
            .and_then(|r| r.path(&["graph", "atoms"]))
            .and_then(|n| n.key_loc(first));
        errors.push(
            Diagnostic::new(format!("dependency cycle: {} → {first}", names.join(" → ")))
                .at(loc)
                .help("the graph must be acyclic: remove one of these `deps` or `or` links"),
        );
    }
    errors
}

/// Finds a cycle from `start` back to itself inside a strongly connected component.
fn cycle_through(graph: &DiGraph<&str, ()>, start: NodeIndex, members: &HashSet<NodeIndex>) -> Vec<NodeIndex> {
    let mut path = vec![start];
    let mut visited = HashSet::from([start]);
    let mut stack = vec![graph.neighbors(start).collect::<Vec<_>>()];
    while let Some(frontier) = stack.last_mut() {
        let Some(next) = frontier.pop() else {
            stack.pop();
            path.pop();
            continue;
        };
        if next == start {
            return path;
        }
        if members.contains(&next) && visited.insert(next) {
            path.push(next);
            stack.push(graph.neighbors(next).collect());
        }
    }
    vec![start]
}
