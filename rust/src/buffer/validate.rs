//! Per-value checks before arrow-json sees a value: exactly one JSON object, text arrow-json
//! would misread, and (optionally) fields the schema does not know.

use arrow::datatypes::{DataType, Fields};
use serde::de::IgnoredAny;

use super::unique::parse_unique;

/// What the check found out about one value.
pub(crate) enum Checked {
    /// Feed the value as it is.
    Ok,
    /// Feed this re-serialized value instead (see [`has_escaped_surrogate`]).
    Rewritten(Vec<u8>),
}

/// The cheap checks on one value: it must start with `{` and end with `}`. The full check that
/// it is exactly one JSON object is made while decoding (see `JsonBuffer::decode_unchecked`),
/// so numbers are parsed once. With `unknown` set, fields missing from `fields` are pushed as
/// dotted paths (this parses the value with serde_json).
///
/// With `fold_case`, a field whose name differs from a column's only in case is renamed to the
/// column's (the value is parsed and, when a name changed, re-serialized); two fields of one
/// object that fold to the same column are an error naming both.
///
/// A value parsed here has each key once in every object (see [`parse_unique`]): it may be
/// re-serialized, which would keep only the last. The error is (field path, reason).
pub(crate) fn check(
    value: &[u8],
    fields: &Fields,
    unknown: Option<&mut Vec<String>>,
    fold_case: bool,
) -> Result<Checked, (String, String)> {
    let whole = |reason: String| (String::new(), reason);
    let first = value.iter().find(|b| !b.is_ascii_whitespace());
    let last = value.iter().rev().find(|b| !b.is_ascii_whitespace());
    if first != Some(&b'{') || last != Some(&b'}') {
        return Err(whole(match first {
            None => "value is empty".to_string(),
            Some(_) => explain_syntax(value).unwrap_or_else(|| "value is not exactly one JSON object".to_string()),
        }));
    }
    let surrogate = has_escaped_surrogate(value);
    if unknown.is_none() && !surrogate && !fold_case {
        return Ok(Checked::Ok);
    }
    let mut parsed = parse_unique(value, fields)?;
    let folded = fold_case && fold_keys(&mut parsed, fields, "").map_err(whole)?;
    if let Some(out) = unknown {
        collect_unknown(&parsed, fields, "", out);
    }
    if surrogate || folded {
        return serde_json::to_vec(&parsed).map(Checked::Rewritten).map_err(|e| whole(e.to_string()));
    }
    Ok(Checked::Ok)
}

/// Why `value` is not one JSON object, in serde_json's words; None if it is one.
pub(crate) fn explain_syntax(value: &[u8]) -> Option<String> {
    match serde_json::from_slice::<IgnoredAny>(value) {
        Err(e) => Some(format!("value is not valid JSON: {e}")),
        Ok(_) if value.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') => None, // one object: no second parse
        Ok(_) => match serde_json::from_slice::<serde_json::Value>(value) {
            Ok(serde_json::Value::Object(_)) => None,
            Ok(other) => Some(format!("value is JSON but not an object (found {})", json_kind(&other))),
            Err(e) => Some(format!("value is not valid JSON: {e}")),
        },
    }
}

/// Renames the fields of `value` (and of its struct and list-of-struct fields) that match a
/// column of `fields` only without regard to case; whether any was renamed.
fn fold_keys(value: &mut serde_json::Value, fields: &Fields, prefix: &str) -> Result<bool, String> {
    let serde_json::Value::Object(map) = value else { return Ok(false) };
    let mut renames: Vec<(String, String)> = Vec::new();
    for key in map.keys() {
        if fields.iter().any(|f| f.name() == key) {
            continue;
        }
        if let Some(column) = fields.iter().find(|f| f.name().eq_ignore_ascii_case(key)).map(|f| f.name().clone()) {
            let path = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
            if let Some(other) = map.keys().find(|k| *k != key && k.eq_ignore_ascii_case(&column)) {
                return Err(format!(
                    "fields '{}' and '{}' both match column '{column}' once case is ignored (case_insensitive = true); \
                     the record must have one of them",
                    path(key),
                    path(other)
                ));
            }
            renames.push((key.clone(), column));
        }
    }
    let mut changed = !renames.is_empty();
    for (from, to) in renames {
        if let Some(v) = map.remove(&from) {
            map.insert(to, v);
        }
    }
    for field in fields.iter() {
        let Some(child) = map.get_mut(field.name()) else { continue };
        let path = if prefix.is_empty() { field.name().clone() } else { format!("{prefix}.{}", field.name()) };
        changed |= fold_within(child, field.data_type(), &path)?;
    }
    Ok(changed)
}

/// [`fold_keys`] on the structs inside `value`, a value of `data_type`, through lists at any depth.
fn fold_within(value: &mut serde_json::Value, data_type: &DataType, path: &str) -> Result<bool, String> {
    match (data_type, value) {
        (DataType::Struct(inner), value @ serde_json::Value::Object(_)) => fold_keys(value, inner, path),
        (DataType::List(item) | DataType::LargeList(item), serde_json::Value::Array(items)) => {
            let mut changed = false;
            for (i, element) in items.iter_mut().enumerate() {
                changed |= fold_within(element, item.data_type(), &format!("{path}[{i}]"))?;
            }
            Ok(changed)
        }
        _ => Ok(false),
    }
}

fn collect_unknown(value: &serde_json::Value, fields: &Fields, prefix: &str, out: &mut Vec<String>) {
    let serde_json::Value::Object(map) = value else { return };
    for (key, child) in map {
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        match fields.iter().find(|f| f.name() == key) {
            None => out.push(path),
            Some(field) => match (field.data_type(), child) {
                (DataType::Struct(inner), serde_json::Value::Object(_)) => collect_unknown(child, inner, &path, out),
                (DataType::List(item) | DataType::LargeList(item), serde_json::Value::Array(items)) => {
                    if let DataType::Struct(inner) = item.data_type() {
                        for (i, element) in items.iter().enumerate() {
                            collect_unknown(element, inner, &format!("{path}[{i}]"), out);
                        }
                    }
                }
                _ => {}
            },
        }
    }
}

/// arrow-json 60 decodes a `\uXXXX\uXXXX` surrogate pair whose high half is D840 or above to the
/// wrong character (it ORs where it must add), silently corrupting text such as U+20000. Values
/// with an escaped surrogate are re-serialized by serde_json as plain UTF-8 first (serde_json's
/// `float_roundtrip` keeps every double exact through that).
fn has_escaped_surrogate(value: &[u8]) -> bool {
    memchr::memchr_iter(b'\\', value).any(|i| {
        value.get(i + 1) == Some(&b'u')
            && value.get(i + 2).map(|b| b | 0x20) == Some(b'd')
            && value.get(i + 3).is_some_and(|b| matches!(b | 0x20, b'8'..=b'9' | b'a'..=b'f'))
    })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// arrow-json's strict mode says `column 'x' missing from schema` at the object holding `x`
/// (`path`): the field becomes `path.x`, and the reason says what to do, or that `x` differs
/// from a column only in case (a near miss that would otherwise land as NULL).
pub(crate) fn explain_unknown(fields: &Fields, path: String, reason: String) -> (String, String) {
    let Some(name) = reason.strip_prefix("column '").and_then(|r| r.strip_suffix("' missing from schema")) else {
        return (path, reason);
    };
    let full = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
    let why = match near_miss(fields, &full) {
        Some(column) => case_reason(&column),
        None => "the table has no such column: add it to the table (and its columns in the config), or set \
                 unknown_fields = \"ignore\" to drop such fields (counted)"
            .to_string(),
    };
    (full, why)
}

/// The column an unknown field (`a.b[2].c`, as [`check`] reports it) differs from only in case,
/// if there is one: such a field is never dropped as unknown (it would land as NULL).
pub(crate) fn near_miss(fields: &Fields, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('.').map(|p| p.split('[').next().unwrap_or(p)).collect();
    let (name, parents) = parts.split_last()?;
    let mut level = fields.clone();
    for parent in parents {
        level = level.iter().find(|f| f.name() == parent).and_then(|f| struct_fields(f.data_type()))?;
    }
    level.iter().find(|f| f.name().eq_ignore_ascii_case(name)).map(|f| f.name().clone())
}

/// The reason given for a field that differs from `column` only in case.
pub(crate) fn case_reason(column: &str) -> String {
    format!(
        "differs only in case from column '{column}' (names must match exactly): rename the field in the producer, \
         or the column"
    )
}

fn struct_fields(data_type: &DataType) -> Option<Fields> {
    match data_type {
        DataType::Struct(inner) => Some(inner.clone()),
        DataType::List(item) | DataType::LargeList(item) => struct_fields(item.data_type()),
        _ => None,
    }
}

/// arrow-json names the field in its messages as `whilst decoding field 'x': ...`; nested fields
/// nest the phrase. Returns (dotted path, innermost reason).
pub(crate) fn split_field(message: &str) -> (String, String) {
    const MARK: &str = "whilst decoding field '";
    let mut path = Vec::new();
    let mut rest = message;
    while let Some(start) = rest.find(MARK) {
        let after = &rest[start + MARK.len()..];
        match after.find('\'') {
            Some(end) => {
                path.push(after[..end].to_string());
                rest = after[end + 1..].trim_start_matches(':').trim_start();
            }
            None => break,
        }
    }
    let reason = rest.trim_start_matches("Json error: ").to_string();
    // arrow-json finds a missing required field only when building the struct, and names it in
    // Rust debug syntax: `... non-nullable StructArray child: Field { "id": Int64 }` (older
    // versions: `Field { name: "id", ... }`)
    const REQUIRED: &str = "non-nullable StructArray child: Field { ";
    if let Some(start) = reason.find(REQUIRED) {
        let after = reason[start + REQUIRED.len()..].trim_start_matches("name: ").trim_start_matches('"');
        if let Some(end) = after.find('"') {
            path.push(after[..end].to_string());
            return (path.join("."), "is required, and the record has no value for it (missing or null)".to_string());
        }
    }
    (path.join("."), if reason.is_empty() { message.to_string() } else { reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::Field;
    use std::sync::Arc;

    fn fields() -> Fields {
        let inner = Fields::from(vec![Field::new("b", DataType::Int64, true)]);
        Fields::from(vec![
            Field::new("a", DataType::Struct(inner.clone()), true),
            Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Struct(inner), true))), true),
        ])
    }

    #[test]
    fn only_one_object_passes() {
        let f = fields();
        assert!(matches!(check(br#" {"a": {}}"#, &f, None, false), Ok(Checked::Ok)));
        for (value, reason) in [
            (&b"[1]"[..], "not an object (found an array)"),
            (b"  ", "empty"),
            (b"{\"a\":", "not valid JSON"),
            (b"{\"a\": 1} x", "not valid JSON"),
            (b"nul", "not valid JSON"),
        ] {
            let (field, err) = check(value, &f, None, false).err().unwrap();
            assert!(field.is_empty() && err.contains(reason), "{err}");
        }
    }

    #[test]
    fn unknown_fields_are_listed_with_paths() {
        let mut out = Vec::new();
        check(br#"{"a": {"b": 1, "c": 2}, "l": [{"b": 1}, {"z": 0}], "new": true}"#, &fields(), Some(&mut out), false)
            .ok()
            .unwrap();
        assert_eq!(out, vec!["a.c", "l[1].z", "new"]);
    }

    #[test]
    fn near_misses_are_found_through_structs_and_lists() {
        let f = fields();
        assert_eq!(near_miss(&f, "A"), Some("a".to_string()));
        assert_eq!(near_miss(&f, "a.B"), Some("b".to_string()));
        assert_eq!(near_miss(&f, "l[3].B"), Some("b".to_string()));
        assert_eq!(near_miss(&f, "a.c"), None);
        assert_eq!(near_miss(&f, "x.b"), None);
    }

    #[test]
    fn folding_renames_case_misses_at_every_level_and_refuses_two_spellings() {
        let f = fields();
        let Ok(Checked::Rewritten(out)) = check(br#"{"A": {"B": 1}, "L": [{"b": 2}, {"B": 3}]}"#, &f, None, true)
        else {
            panic!("expected a rewrite")
        };
        assert_eq!(String::from_utf8(out).unwrap(), r#"{"a":{"b":1},"l":[{"b":2},{"b":3}]}"#);
        assert!(matches!(check(br#"{"a": {"b": 1}}"#, &f, None, true), Ok(Checked::Ok)));
        let (_, err) = check(br#"{"a": {"b": 1, "B": 2}}"#, &f, None, true).err().unwrap();
        assert!(err.contains("'a.B' and 'a.b' both match column 'b'") || err.contains("'a.b' and 'a.B'"), "{err}");
        assert!(matches!(check(br#"{"A": 1}"#, &f, None, false), Ok(Checked::Ok)));
    }

    #[test]
    fn surrogates_trigger_a_rewrite() {
        assert!(matches!(check(br#"{"a": "\ud840\udc00"}"#, &fields(), None, false), Ok(Checked::Rewritten(_))));
    }

    #[test]
    fn split_field_reads_nested_paths() {
        let (f, r) =
            split_field("Json error: whilst decoding field 'a': whilst decoding field 'b': expected i64 got \"x\"");
        assert_eq!(f, "a.b");
        assert_eq!(r, "expected i64 got \"x\"");
    }
}
