//! A location-annotated tree of a YAML (or JSON) document: every map key and
//! value with its line and column. Validation walks it to report every problem
//! at once, each at its place in the file.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{Location, Spanned};

/// A place in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Loc {
    /// 1-based line.
    pub line: u64,
    /// 1-based column, in characters.
    pub column: u64,
    /// Length in characters (at least 1 when rendered).
    pub len: u64,
}

impl Loc {
    fn from_location(location: &Location) -> Self {
        Self {
            line: location.line(),
            column: location.column(),
            len: location.span().len(),
        }
    }

    fn known(self) -> Option<Self> {
        (self.line > 0).then_some(self)
    }
}

/// A scalar value.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i128),
    /// A floating-point number.
    Float(f64),
    /// Text.
    Str(String),
}

/// One node of the document with its location.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Where the node is.
    pub loc: Loc,
    /// What it is.
    pub kind: NodeKind,
}

/// The kind of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    /// A mapping: keys with their locations, in order.
    Map(Vec<(String, Loc, Node)>),
    /// A sequence.
    Seq(Vec<Node>),
    /// A scalar.
    Scalar(Scalar),
}

impl Node {
    /// Returns the kind's name as JSON Schema spells it.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            NodeKind::Map(_) => "object",
            NodeKind::Seq(_) => "array",
            NodeKind::Scalar(Scalar::Null) => "null",
            NodeKind::Scalar(Scalar::Bool(_)) => "boolean",
            NodeKind::Scalar(Scalar::Int(_)) => "integer",
            NodeKind::Scalar(Scalar::Float(_)) => "number",
            NodeKind::Scalar(Scalar::Str(_)) => "string",
        }
    }

    /// Returns the value under `key` if this is a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Map(entries) => entries.iter().find(|(k, _, _)| k == key).map(|(_, _, v)| v),
            _ => None,
        }
    }

    /// Returns the location of `key` itself if this is a map.
    pub fn key_loc(&self, key: &str) -> Option<Loc> {
        match &self.kind {
            NodeKind::Map(entries) => entries
                .iter()
                .find(|(k, _, _)| k == key)
                .and_then(|(_, loc, _)| loc.known()),
            _ => None,
        }
    }

    /// Returns the `index`-th element if this is a sequence.
    pub fn item(&self, index: usize) -> Option<&Node> {
        match &self.kind {
            NodeKind::Seq(items) => items.get(index),
            _ => None,
        }
    }

    /// Returns the node at a path of map keys.
    pub fn path(&self, keys: &[&str]) -> Option<&Node> {
        keys.iter().try_fold(self, |node, key| node.get(key))
    }

    /// Returns the dotted path of the map key written at `line`:`column`
    /// (`graph.atoms.fetch.run`), searching the whole tree.
    pub fn key_path_at(&self, line: u64, column: u64) -> Option<String> {
        match &self.kind {
            NodeKind::Map(entries) => entries.iter().find_map(|(key, loc, value)| {
                if loc.line == line && loc.column == column {
                    Some(key.clone())
                } else {
                    value.key_path_at(line, column).map(|rest| format!("{key}.{rest}"))
                }
            }),
            NodeKind::Seq(items) => items
                .iter()
                .enumerate()
                .find_map(|(i, item)| item.key_path_at(line, column).map(|rest| format!("[{i}].{rest}"))),
            NodeKind::Scalar(_) => None,
        }
    }

    /// Returns this node's location, if known.
    pub fn loc(&self) -> Option<Loc> {
        self.loc.known()
    }
}

/// Parses text (YAML, or JSON as a YAML subset) into a located tree.
pub fn parse(text: &str) -> Result<Node, serde_saphyr::Error> {
    serde_saphyr::from_str::<Node>(text)
}

/// Parses YAML text into a located tree where a repeated key keeps its last
/// value, with every repeated key's dotted path and place: after duplicate
/// keys are reported, the rest of the file is still checked.
pub fn parse_with_duplicates(text: &str) -> Result<(Node, Vec<(String, Loc)>), serde_saphyr::Error> {
    let options = serde_saphyr::options! {
        duplicate_keys: serde_saphyr::DuplicateKeyPolicy::PassThrough,
    };
    let mut root = serde_saphyr::from_str_with_options::<Node>(text, options)?;
    let mut repeated = Vec::new();
    keep_last(&mut root, "", &mut repeated);
    Ok((root, repeated))
}

/// Drops every entry of a map whose key comes again later in it, noting the
/// later ones, throughout the tree.
fn keep_last(node: &mut Node, path: &str, repeated: &mut Vec<(String, Loc)>) {
    let join = |key: &str| {
        if path.is_empty() {
            key.to_string()
        } else {
            format!("{path}.{key}")
        }
    };
    match &mut node.kind {
        NodeKind::Map(entries) => {
            let mut seen = std::collections::HashSet::new();
            for (key, loc, value) in entries.iter_mut() {
                if !seen.insert(key.clone()) {
                    repeated.push((join(key), *loc));
                }
                // Each value is checked, the one dropped below too.
                keep_last(value, &join(key), repeated);
            }
            let mut kept: Vec<(String, Loc, Node)> = Vec::with_capacity(entries.len());
            for entry in entries.drain(..).rev() {
                if !kept.iter().any(|(k, _, _)| *k == entry.0) {
                    kept.push(entry);
                }
            }
            kept.reverse();
            *entries = kept;
        }
        NodeKind::Seq(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                keep_last(item, &format!("{path}[{i}]"), repeated);
            }
        }
        NodeKind::Scalar(_) => {}
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<Kind>::deserialize(deserializer)?;
        Ok(Node {
            loc: Loc::from_location(&spanned.referenced),
            kind: spanned.value.0,
        })
    }
}

struct Kind(NodeKind);

struct Key(String);

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let Kind(kind) = Kind::deserialize(deserializer)?;
        Ok(Key(match kind {
            NodeKind::Scalar(Scalar::Str(s)) => s,
            NodeKind::Scalar(Scalar::Int(i)) => i.to_string(),
            NodeKind::Scalar(Scalar::Float(f)) => f.to_string(),
            NodeKind::Scalar(Scalar::Bool(b)) => b.to_string(),
            NodeKind::Scalar(Scalar::Null) => "null".to_string(),
            NodeKind::Map(_) | NodeKind::Seq(_) => {
                return Err(de::Error::custom("a mapping key must be a plain value"));
            }
        }))
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Bool(v))))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Int(v.into()))))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Int(v))))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Int(v.into()))))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(match i128::try_from(v) {
            Ok(i) => Scalar::Int(i),
            Err(_) => Scalar::Str(v.to_string()),
        })))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Float(v))))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Str(v.to_string()))))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Str(v))))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Null)))
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind(NodeKind::Scalar(Scalar::Null)))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        Kind::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Node>()? {
            items.push(item);
        }
        Ok(Kind(NodeKind::Seq(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Key>>()? {
            let value = map.next_value::<Node>()?;
            entries.push((key.value.0, Loc::from_location(&key.referenced), value));
        }
        Ok(Kind(NodeKind::Map(entries)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_carry_their_locations() {
        let node = parse("a:\n  b: [x, 2]\n  c: {d: null}\n").unwrap();
        let b = node.path(&["a", "b"]).unwrap();
        assert_eq!(b.type_name(), "array");
        let x = b.item(0).unwrap();
        assert_eq!((x.loc.line, x.loc.column), (2, 7));
        assert_eq!(b.item(1).unwrap().kind, NodeKind::Scalar(Scalar::Int(2)));
        let key = node.get("a").unwrap().key_loc("c").unwrap();
        assert_eq!((key.line, key.column), (3, 3));
        assert_eq!(node.key_path_at(3, 7).as_deref(), Some("a.c.d"));
        assert_eq!(node.key_path_at(3, 4), None);
        assert_eq!(node.path(&["a", "c", "d"]).unwrap().type_name(), "null");
    }

    #[test]
    fn json_parses_as_yaml_with_locations() {
        let node = parse("{\n  \"a\": [1,\n  \"two\"]\n}").unwrap();
        let two = node.path(&["a"]).unwrap().item(1).unwrap();
        assert_eq!(two.loc.line, 3);
    }
}
