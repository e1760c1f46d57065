//! Checks across the registered types, run on the whole set a change
//! would leave: a `waits_for` cycle (two types that wait for each other
//! could never start) refuses the change; a `not_while_running` declared on
//! one side only is reported as a warning, since the other type would still
//! start while the first runs.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use super::HandlerEntry;

/// The first `waits_for` cycle among `handlers`, as `a -> b -> a`.
pub(super) fn waits_for_cycle(handlers: &BTreeMap<String, Arc<HandlerEntry>>) -> Option<String> {
    fn visit(
        t: &str,
        h: &BTreeMap<String, Arc<HandlerEntry>>,
        path: &mut Vec<String>,
        done: &mut HashSet<String>,
    ) -> Option<String> {
        if let Some(pos) = path.iter().position(|p| p == t) {
            let mut cycle = path[pos..].to_vec();
            cycle.push(t.to_string());
            return Some(cycle.join(" -> "));
        }
        if done.contains(t) {
            return None;
        }
        path.push(t.to_string());
        if let Some(e) = h.get(t) {
            for next in &e.settings.waits_for {
                if let Some(c) = visit(next, h, path, done) {
                    return Some(c);
                }
            }
        }
        path.pop();
        done.insert(t.to_string());
        None
    }
    let mut done = HashSet::new();
    handlers
        .keys()
        .find_map(|t| visit(t, handlers, &mut Vec::new(), &mut done))
}

/// One warning per `not_while_running` whose other type does not declare
/// it back.
pub(super) fn one_sided(handlers: &BTreeMap<String, Arc<HandlerEntry>>) -> Vec<String> {
    let mut out = Vec::new();
    for (t, e) in handlers {
        for other in &e.settings.not_while_running {
            if let Some(o) = handlers.get(other) {
                if !o.settings.not_while_running.contains(t) {
                    out.push(format!(
                        "not_while_running is one-sided: `{t}` declares `{other}` but `{other}` does not declare `{t}`; declare it on both sides"
                    ));
                }
            }
        }
    }
    out
}
