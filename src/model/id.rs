//! Atom ids: the keys under `graph.atoms`, chosen by the user (or assigned by
//! the runtime for a planner's atoms), never by a model.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// An atom's id: the key under `graph.atoms`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AtomId(String);

impl AtomId {
    /// Returns the id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl JsonSchema for AtomId {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "AtomId".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        String::json_schema(generator)
    }
}

impl Deref for AtomId {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for AtomId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for AtomId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AtomId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for AtomId {
    fn from(id: String) -> Self {
        Self(id)
    }
}

impl From<&str> for AtomId {
    fn from(id: &str) -> Self {
        Self(id.to_string())
    }
}

impl From<&String> for AtomId {
    fn from(id: &String) -> Self {
        Self(id.clone())
    }
}

impl From<AtomId> for String {
    fn from(id: AtomId) -> Self {
        id.0
    }
}

impl PartialEq<str> for AtomId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for AtomId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<AtomId> for str {
    fn eq(&self, other: &AtomId) -> bool {
        self == other.0
    }
}

impl PartialEq<AtomId> for &str {
    fn eq(&self, other: &AtomId) -> bool {
        *self == other.0
    }
}
