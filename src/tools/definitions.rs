//! The built-in tools' definitions, made once and shared. A service builds
//! the same few tools for every run; their definitions (a description and a
//! JSON Schema each) are the same every time, and copies of them were most of
//! what an idle run held.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use crate::harness::ToolDefinition;
use crate::sync::lock;

/// Distinct definitions kept; past it the table starts over. Definitions
/// depend only on the server's configuration (limits, presets), so this is
/// never reached by one server.
const CAPACITY: usize = 256;

static SHARED: LazyLock<Mutex<HashMap<String, Arc<ToolDefinition>>>> =
    LazyLock::new(Default::default);

/// The definition known by `key` (which must name everything it depends
/// on), built by `build` the first time.
pub(super) fn shared(key: &str, build: impl FnOnce() -> ToolDefinition) -> Arc<ToolDefinition> {
    let mut table = lock(&SHARED);
    if let Some(found) = table.get(key) {
        return Arc::clone(found);
    }
    if table.len() >= CAPACITY {
        table.clear();
    }
    let definition = Arc::new(build());
    table.insert(key.to_owned(), Arc::clone(&definition));
    definition
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_key_one_definition() {
        let build = |name: &str| ToolDefinition {
            name: name.into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        };
        let a = shared("test:a", || build("a"));
        let again = shared("test:a", || build("other"));
        let b = shared("test:b", || build("b"));
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(again.name, "a");
        assert_eq!(b.name, "b");
    }
}
