//! The order of the keys of JP's entries.
//!
//! jp-store renders an event's keys in one fixed order (`type`,
//! `timestamp`, the fields of its type, `metadata`, unknown fields:
//! `jpstore_engine::internal::event::render`). JP's serializer is deterministic too,
//! with its own order (`timestamp` before `type`, its structs' field
//! order), and a file written by hand or by another tool may have any. So
//! import records the order it found as cheaply as it can be said, and
//! export puts each rendered event's keys back in it:
//!
//! 1. [`KeyOrder`]: the rendering's order, or the same with `timestamp`
//!    first (JP's); one value for the conversation.
//! 2. For an entry type whose events the file wrote otherwise: a list of
//!    keys (`type_keys`). A rendered event's keys that are in the list come
//!    first, in the list's order, then the others in the rendering's order.
//! 3. For an entry that follows neither: its own list (`entry_keys`), with
//!    the same rule.
//!
//! For the files JP writes only 1 is needed; entries appended later are
//! written in the same order. Keys inside values (metadata, arguments,
//! config deltas, unknown entries) keep their order in the store already.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::JpInfo;
use jpstore_engine::event::Object;

/// The order of the keys of a conversation's events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyOrder {
    /// jp-store's rendering: `type`, `timestamp`, the fields, `metadata`.
    #[default]
    TypeFirst,
    /// The same with `timestamp` before `type` (JP's serde: the timestamp,
    /// then the flattened, internally tagged kind).
    TimestampFirst,
}

impl KeyOrder {
    /// Whether it is the default (so not stored).
    pub fn is_type_first(&self) -> bool {
        *self == KeyOrder::TypeFirst
    }

    /// The keys of a rendering (`rendered`, in the rendering's order) in
    /// this order.
    fn arrange<'k>(self, rendered: &[&'k str]) -> Vec<&'k str> {
        match self {
            KeyOrder::TypeFirst => rendered.to_vec(),
            KeyOrder::TimestampFirst => {
                let mut out: Vec<&str> = rendered
                    .iter()
                    .copied()
                    .filter(|k| *k == "timestamp")
                    .collect();
                out.extend(rendered.iter().copied().filter(|k| *k != "timestamp"));
                out
            }
        }
    }
}

/// The keys of `rendered` with those in `list` first, in the list's order,
/// then the others in the rendering's order.
fn by_list<'k>(list: &[String], rendered: &[&'k str]) -> Vec<&'k str> {
    let mut out: Vec<&str> = list
        .iter()
        .filter_map(|k| rendered.iter().copied().find(|r| r == k))
        .collect();
    out.extend(
        rendered
            .iter()
            .copied()
            .filter(|r| !list.iter().any(|k| k == r)),
    );
    out
}

/// The order the keys of a rendered event take: the entry's own list, its
/// type's, or the conversation's [`KeyOrder`].
fn arranged<'k>(
    info: &JpInfo,
    index: Option<usize>,
    type_name: &str,
    rendered: &[&'k str],
) -> Vec<&'k str> {
    if let Some(list) = index.and_then(|i| info.entry_keys.get(&i.to_string())) {
        return by_list(list, rendered);
    }
    match info.type_keys.get(type_name) {
        Some(list) => by_list(list, rendered),
        None => info.key_order.arrange(rendered),
    }
}

/// Puts the keys of a rendered event (`obj`, in the rendering's order) in
/// the order recorded for the entry at `index` (`None` for an entry with
/// no place in the stored conversation) of type `type_name`.
pub fn arrange(info: &JpInfo, index: Option<usize>, type_name: &str, mut obj: Object) -> Object {
    let keys: Vec<String> = obj.keys().cloned().collect();
    let rendered: Vec<&str> = keys.iter().map(String::as_str).collect();
    let order = arranged(info, index, type_name, &rendered);
    if order == rendered {
        return obj;
    }
    let mut out = Object::with_capacity(obj.len());
    for k in order {
        if let Some((k, v)) = obj.shift_remove_entry(k) {
            out.insert(k, v);
        }
    }
    out
}

/// The keys of one imported event: where it is stored, its type, its keys
/// as jp-store renders them and as the file holds them.
#[derive(Debug, Clone)]
pub struct SeenKeys {
    /// The stored entry's index.
    pub index: usize,
    /// The entry type.
    pub type_name: String,
    /// The keys of its rendering, in the rendering's order.
    pub rendered: Vec<String>,
    /// Its keys in the file's order.
    pub file: Vec<String>,
}

impl SeenKeys {
    /// The file's keys that the rendering has too, in the file's order
    /// (the others, such as an empty `metadata` the rendering leaves out,
    /// are the business of the file's text fixes).
    fn wanted(&self) -> Vec<&str> {
        self.file
            .iter()
            .filter(|k| self.rendered.contains(k))
            .map(String::as_str)
            .collect()
    }

    fn rendered(&self) -> Vec<&str> {
        self.rendered.iter().map(String::as_str).collect()
    }

    /// Whether `arranged` (the rendering's keys in some order) puts the
    /// keys the file has in the file's order (keys only the rendering has,
    /// such as an `arguments` the file left out, are the fixes' business).
    fn follows(&self, arranged: &[&str]) -> bool {
        arranged
            .iter()
            .filter(|k| self.file.iter().any(|f| f == *k))
            .copied()
            .eq(self.wanted())
    }
}

/// Chooses the cheapest description of the orders `seen` (sets
/// `key_order`, `type_keys` and `entry_keys` of `info`): the [`KeyOrder`]
/// most events follow (the default on a tie); for each type some of whose
/// events follow it not, one list that every event of the type follows
/// when their orders agree (a topological order of what they say: key `a`
/// before key `b`), else a list merged from them in file order, kept if
/// more of them follow it; a list for each event that still does not.
pub fn choose(info: &mut JpInfo, seen: &[SeenKeys]) {
    let follows = |order: KeyOrder| {
        seen.iter()
            .filter(|s| s.follows(&order.arrange(&s.rendered())))
            .count()
    };
    info.key_order = if follows(KeyOrder::TimestampFirst) > follows(KeyOrder::TypeFirst) {
        KeyOrder::TimestampFirst
    } else {
        KeyOrder::TypeFirst
    };
    info.type_keys.clear();
    info.entry_keys.clear();
    let mut by_type: BTreeMap<&str, Vec<&SeenKeys>> = BTreeMap::new();
    for s in seen {
        by_type.entry(&s.type_name).or_default().push(s);
    }
    for (type_name, events) in by_type {
        let base = events
            .iter()
            .filter(|s| s.follows(&info.key_order.arrange(&s.rendered())))
            .count();
        if base == events.len() {
            continue;
        }
        let orders: Vec<Vec<&str>> = events.iter().map(|s| s.wanted()).collect();
        let list = agreeing(&orders).unwrap_or_else(|| {
            let mut list = Vec::new();
            for order in &orders {
                merge_into(&mut list, order);
            }
            list
        });
        let listed = events
            .iter()
            .filter(|s| s.follows(&by_list(&list, &s.rendered())))
            .count();
        if listed > base {
            info.type_keys.insert(type_name.to_owned(), list);
        }
    }
    for s in seen {
        if !s.follows(&arranged(info, Some(s.index), &s.type_name, &s.rendered())) {
            let own = s.wanted().iter().map(|k| (*k).to_owned()).collect();
            info.entry_keys.insert(s.index.to_string(), own);
        }
    }
}

/// One list of keys that every order of `orders` follows, if they agree:
/// a topological order of "`a` comes right before `b` in some order", ties
/// broken by the key seen first; `None` if the orders contradict each
/// other (a cycle).
fn agreeing(orders: &[Vec<&str>]) -> Option<Vec<String>> {
    let mut keys: Vec<&str> = Vec::new();
    for order in orders {
        for k in order {
            if !keys.contains(k) {
                keys.push(k);
            }
        }
    }
    let at = |k: &str| keys.iter().position(|x| *x == k).unwrap_or(0);
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); keys.len()];
    let mut before = vec![0usize; keys.len()];
    for order in orders {
        for pair in order.windows(2) {
            let (a, b) = (at(pair[0]), at(pair[1]));
            if !after[a].contains(&b) {
                after[a].push(b);
                before[b] += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(keys.len());
    let mut done = vec![false; keys.len()];
    while out.len() < keys.len() {
        let next = (0..keys.len()).find(|&k| !done[k] && before[k] == 0)?;
        done[next] = true;
        for &b in &after[next] {
            before[b] -= 1;
        }
        out.push(keys[next].to_owned());
    }
    Some(out)
}

/// Merges one order of keys into `list`: a key not in it yet goes right
/// after the key before it in `order` (or first).
fn merge_into(list: &mut Vec<String>, order: &[&str]) {
    let mut after: Option<usize> = None;
    for k in order {
        match list.iter().position(|l| l == k) {
            Some(at) => after = Some(at),
            None => {
                let at = after.map_or(0, |a| a + 1);
                list.insert(at, (*k).to_owned());
                after = Some(at);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jp::ConfigLayout;

    fn info() -> JpInfo {
        JpInfo::new("1-x".into(), false, ConfigLayout::None)
    }

    fn seen(index: usize, type_name: &str, rendered: &[&str], file: &[&str]) -> SeenKeys {
        SeenKeys {
            index,
            type_name: type_name.into(),
            rendered: rendered.iter().map(|k| (*k).to_owned()).collect(),
            file: file.iter().map(|k| (*k).to_owned()).collect(),
        }
    }

    #[test]
    fn jp_order_costs_one_value_and_odd_entries_their_own_list() {
        let req = ["type", "timestamp", "content", "schema", "author"];
        let mut i = info();
        choose(
            &mut i,
            &[
                seen(
                    0,
                    "turn_start",
                    &["type", "timestamp"],
                    &["timestamp", "type"],
                ),
                seen(
                    1,
                    "chat_request",
                    &req[..3],
                    &["timestamp", "type", "content"],
                ),
                seen(
                    2,
                    "chat_request",
                    &req,
                    &["timestamp", "type", "content", "author", "schema"],
                ),
                seen(
                    3,
                    "chat_request",
                    &req,
                    &["timestamp", "type", "content", "author", "schema"],
                ),
                seen(
                    4,
                    "turn_start",
                    &["type", "timestamp"],
                    &["type", "timestamp"],
                ),
            ],
        );
        assert_eq!(i.key_order, KeyOrder::TimestampFirst);
        assert_eq!(
            i.type_keys.get("chat_request").map(Vec::as_slice),
            Some(&["timestamp", "type", "content", "author", "schema"].map(String::from)[..])
        );
        assert_eq!(i.entry_keys.len(), 1);
        assert_eq!(
            i.entry_keys.get("4").map(Vec::as_slice),
            Some(&["type", "timestamp"].map(String::from)[..])
        );
        let mut obj = Object::new();
        for k in req {
            obj.insert(k.into(), serde_json::Value::Null);
        }
        let out = arrange(&i, Some(9), "chat_request", obj);
        assert_eq!(
            out.keys().collect::<Vec<_>>(),
            ["timestamp", "type", "content", "author", "schema"]
        );
    }

    #[test]
    fn orders_that_agree_give_one_list_whatever_the_order_they_come_in() {
        let a = vec!["timestamp", "content", "author", "type"];
        let b = vec!["timestamp", "content", "schema", "type"];
        let c = vec!["timestamp", "content", "author", "schema", "type"];
        let list = agreeing(&[a.clone(), b.clone(), c.clone()]).expect("agree");
        assert_eq!(list, ["timestamp", "content", "author", "schema", "type"]);
        for order in [a, b, c] {
            assert_eq!(by_list(&list, &order), order);
        }
        assert_eq!(agreeing(&[vec!["a", "b"], vec!["b", "a"]]), None);
    }

    #[test]
    fn jp_store_order_costs_nothing() {
        let mut i = info();
        choose(
            &mut i,
            &[seen(
                0,
                "chat_request",
                &["type", "timestamp", "content"],
                &["type", "timestamp", "content", "metadata"],
            )],
        );
        assert_eq!(i, info());
    }
}
