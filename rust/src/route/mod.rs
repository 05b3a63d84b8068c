//! Route keys: the values at a few dotted paths of each JSON record value, found without building
//! the value (other fields are skipped, not allocated), and the records grouped by them. The
//! router (Python) decides tables once per distinct key, not once per record. Pure Rust, no pyo3.

mod scan;

use std::collections::HashMap;
use std::fmt;

use crate::kafka::Fetched;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The value at one path of one record, as text: a string as it is, a number or boolean as its
/// JSON text; `None` when the path is missing, null, or leads to an object or array.
pub type Key = Option<String>;

/// Records grouped by their keys at `paths`, groups in order of first appearance; each group
/// holds the indices of its records in ascending order. A value that is not one JSON object is
/// in no group: it is listed in `malformed` with the reason (its route fields cannot be read, so
/// it must not pass for a record whose route field is missing).
#[derive(Debug, PartialEq, Eq, Default)]
pub struct Groups {
    pub groups: Vec<(Vec<Key>, Vec<u32>)>,
    pub malformed: Vec<(u32, String)>,
}

pub fn group<V: AsRef<[u8]>>(values: &[V], paths: &[Vec<String>]) -> Groups {
    let mut index: HashMap<Vec<Key>, usize> = HashMap::new();
    let mut groups: Vec<(Vec<Key>, Vec<u32>)> = Vec::new();
    let mut malformed = Vec::new();
    for (i, value) in values.iter().enumerate() {
        let keys: Vec<Key> = paths.iter().map(|path| key_at(value.as_ref(), path)).collect();
        if keys.iter().all(Option::is_none) {
            // a parse error anywhere reads as "no key": say which it is
            if let Some(reason) = crate::buffer::explain_syntax(value.as_ref()) {
                malformed.push((i as u32, reason));
                continue;
            }
        }
        let slot = match index.get(&keys) {
            Some(&slot) => slot,
            None => {
                index.insert(keys.clone(), groups.len());
                groups.push((keys, Vec::new()));
                groups.len() - 1
            }
        };
        groups[slot].1.push(i as u32);
    }
    Groups { groups, malformed }
}

/// The records of `fetched` from index `start` on that have a value, grouped as [`group`] does;
/// indices are the fetch's, and each group says how many value bytes its records hold.
pub fn group_fetched(fetched: &Fetched, start: usize, paths: &[Vec<String>]) -> FetchedGroups {
    let mut at: Vec<u32> = Vec::with_capacity(fetched.len().saturating_sub(start));
    let mut values: Vec<&[u8]> = Vec::with_capacity(at.capacity());
    for i in start..fetched.len() {
        if let Some(value) = fetched.value(i) {
            at.push(i as u32);
            values.push(value);
        }
    }
    let found = group(&values, paths);
    let groups = found
        .groups
        .into_iter()
        .map(|(keys, indices)| {
            let bytes = indices.iter().map(|&k| values[k as usize].len() as u64).sum();
            (keys, indices.into_iter().map(|k| at[k as usize]).collect(), bytes)
        })
        .collect();
    let malformed = found.malformed.into_iter().map(|(k, reason)| (at[k as usize], reason)).collect();
    FetchedGroups { groups, malformed }
}

/// [`Groups`] of a fetch: (keys, the fetch's indices, their value bytes) per group.
#[derive(Debug, PartialEq, Eq, Default)]
pub struct FetchedGroups {
    pub groups: Vec<(Vec<Key>, Vec<u32>, u64)>,
    pub malformed: Vec<(u32, String)>,
}

/// The key at `path` in one JSON value: read in one plain pass ([`scan`]) where that pass is sure,
/// by serde_json otherwise.
pub fn key_at(value: &[u8], path: &[String]) -> Key {
    scan::key_at(value, path).unwrap_or_else(|| slow_key_at(value, path))
}

/// [`key_at`] by serde_json alone.
fn slow_key_at(value: &[u8], path: &[String]) -> Key {
    let mut de = serde_json::Deserializer::from_slice(value);
    Seek { path }.deserialize(&mut de).ok().flatten()
}

/// Walks down `path`; at its end, the scalar as text.
struct Seek<'p> {
    path: &'p [String],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Key, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Key, A::Error> {
        let Some((first, rest)) = self.path.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(None);
        };
        let mut found = None;
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if found.is_none() && name.as_ref() == first.as_str() {
                found = Some(map.next_value_seed(Seek { path: rest })?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found.flatten())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Key, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(self.path.is_empty().then(|| v.to_owned()))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Key, E> {
        Ok(self.path.is_empty().then(|| v.to_string()))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Key, E> {
        Ok(self.path.is_empty().then(|| v.to_string()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Key, E> {
        Ok(self.path.is_empty().then(|| v.to_string()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Key, E> {
        Ok(self
            .path
            .is_empty()
            .then(|| serde_json::Number::from_f64(v).map_or_else(|| v.to_string(), |n| n.to_string())))
    }

    fn visit_unit<E>(self) -> Result<Key, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn finds_scalars_at_paths_as_text() {
        let v = br#"{"a": {"b": "x", "n": 12, "f": 1.5, "t": true, "z": null, "o": {"p": 1}, "l": [1]}, "c": "top"}"#;
        assert_eq!(key_at(v, &path("c")), Some("top".into()));
        assert_eq!(key_at(v, &path("a.b")), Some("x".into()));
        assert_eq!(key_at(v, &path("a.n")), Some("12".into()));
        assert_eq!(key_at(v, &path("a.f")), Some("1.5".into()));
        assert_eq!(key_at(v, &path("a.t")), Some("true".into()));
        assert_eq!(key_at(v, &path("a.z")), None);
        assert_eq!(key_at(v, &path("a.o")), None);
        assert_eq!(key_at(v, &path("a.l")), None);
        assert_eq!(key_at(v, &path("a.missing")), None);
        assert_eq!(key_at(v, &path("c.deeper")), None);
        assert_eq!(key_at(br#"{"s": "caf\u00e9 \"q\""}"#, &path("s")), Some("café \"q\"".into()));
        assert_eq!(key_at(b"not json", &path("a")), None);
        assert_eq!(key_at(br#"{"a": 1"#, &path("a")), None);
    }

    #[test]
    fn groups_by_key_tuple_in_first_seen_order() {
        let values: Vec<&[u8]> =
            vec![br#"{"k": "b", "m": 1}"#, br#"{"k": "a"}"#, br#"{"k": "b", "m": 1}"#, br#"{"m": 2}"#];
        let groups = group(&values, &[path("k"), path("m")]).groups;
        assert_eq!(
            groups,
            vec![
                (vec![Some("b".into()), Some("1".into())], vec![0, 2]),
                (vec![Some("a".into()), None], vec![1]),
                (vec![None, Some("2".into())], vec![3]),
            ]
        );
        assert_eq!(group(&values, &[]).groups, vec![(vec![], vec![0, 1, 2, 3])]);
    }

    #[test]
    fn a_value_that_is_not_one_json_object_is_in_no_group_and_says_why() {
        let values: Vec<&[u8]> = vec![br#"{"k": "a"}"#, br#"{"k": "a""#, b"[1]", br#"{"m": 1}"#, b""];
        let got = group(&values, &[path("k")]);
        assert_eq!(got.groups, vec![(vec![Some("a".into())], vec![0]), (vec![None], vec![3])]);
        let reasons: Vec<(u32, bool)> = got.malformed.iter().map(|(i, r)| (*i, r.contains("JSON"))).collect();
        assert_eq!(reasons, vec![(1, true), (2, true), (4, true)], "{:?}", got.malformed);
        assert!(got.malformed[1].1.contains("not an object"), "{:?}", got.malformed);
    }
}
