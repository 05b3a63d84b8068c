//! Each key once per JSON object. Of two equal keys arrow-json's struct decoder keeps the last
//! value and its map decoder keeps both entries: either way the row is not what was sent, or not
//! one value per key. Such a record is bad, named by the field's path, or by its map column:
//! - structs are decoded by `structs.rs`, which refuses a repeated field on the walk over each
//!   object's keys that finds the fields' values;
//! - maps by arrow-json behind [`UniqueKeys`], which checks each object's keys first;
//! - a value that `validate::check` parses (reported unknown fields, case folding, an escaped
//!   surrogate) is parsed by [`parse_unique`], which refuses a repeated key at any depth: such a
//!   value may be re-serialized, which would keep only the last. Keys a struct does not have are
//!   checked only there: arrow-json refuses them in strict mode, and with
//!   `unknown_fields = "report"` every value is parsed so.
//!
//! A decode that meets a repeated key fails; the buffer's slow path then names the record.

use std::fmt;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, Fields};
use arrow::error::ArrowError;
use arrow::json::reader::{ArrayDecoder, Tape, TapeElement};
use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Why a record with a field twice in one object is bad (the field is named beside it).
pub(crate) fn twice(top_level: bool) -> &'static str {
    if top_level {
        "appears twice in the record; a value is stored as sent, so the producer must send each field once"
    } else {
        "appears twice in one object; a value is stored as sent, so the producer must send each field once"
    }
}

/// Why a record with a key twice in one map is bad (the map column is named beside it).
pub(crate) fn twice_in_map(key: &str) -> String {
    format!("key {key:?} appears twice in the map; a value is stored as sent, so the producer must send each key once")
}

/// A map's decoder behind a check that no object has one key twice.
pub(crate) struct UniqueKeys {
    inner: Box<dyn ArrayDecoder>,
}

impl UniqueKeys {
    pub(crate) fn new(inner: Box<dyn ArrayDecoder>) -> Self {
        UniqueKeys { inner }
    }
}

/// Maps with more keys than this are checked by sorting their keys rather than pairwise.
const PAIRWISE: usize = 16;

impl ArrayDecoder for UniqueKeys {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut keys: Vec<&str> = Vec::new();
        for &p in pos {
            let TapeElement::StartObject(end) = tape.get(p) else { continue };
            keys.clear();
            let mut cur = p + 1;
            while cur < end {
                let TapeElement::String(s) = tape.get(cur) else { break };
                keys.push(tape.get_string(s));
                cur = tape.next(cur + 1, "map value")?;
            }
            let repeated = if keys.len() <= PAIRWISE {
                keys.iter().enumerate().find(|(i, k)| keys[..*i].contains(k)).map(|(_, k)| *k)
            } else {
                keys.sort_unstable();
                keys.windows(2).find(|w| w[0] == w[1]).map(|w| w[0])
            };
            if let Some(key) = repeated {
                return Err(ArrowError::JsonError(twice_in_map(key)));
            }
        }
        self.inner.decode(tape, pos)
    }
}

/// `value` parsed, or why not: a key twice in one object (named by [`repeated`]) or not JSON.
pub(crate) fn parse_unique(value: &[u8], fields: &Fields) -> Result<Value, (String, String)> {
    let mut twice = None;
    let mut de = serde_json::Deserializer::from_slice(value);
    let parsed = Unique { twice: &mut twice }.deserialize(&mut de).and_then(|v| de.end().map(|()| v));
    match (parsed, twice) {
        (_, Some(path)) => Err(repeated(fields, path)),
        (Ok(v), None) => Ok(v),
        (Err(e), None) => Err((String::new(), format!("value is not valid JSON: {e}"))),
    }
}

/// A step of the path to a repeated key (innermost first, as the parse unwinds).
enum Step {
    Key(String),
    Item(usize),
}

/// The field at fault for a key twice in one object at `path` and the reason: the map column for
/// a map's key, else the field's dotted path (`a.b`, `l[1].c`).
fn repeated(fields: &Fields, mut path: Vec<Step>) -> (String, String) {
    path.reverse();
    let text = |steps: &[Step]| {
        let mut out = String::new();
        for step in steps {
            match step {
                Step::Key(k) if out.is_empty() => out.push_str(k),
                Step::Key(k) => {
                    out.push('.');
                    out.push_str(k)
                }
                Step::Item(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    };
    let Some((Step::Key(key), parents)) = path.split_last() else { return (text(&path), twice(false).into()) };
    let mut at = Some(DataType::Struct(fields.clone()));
    for step in parents {
        at = match (at, step) {
            (Some(DataType::Struct(f)), Step::Key(k)) => {
                f.iter().find(|f| f.name() == k).map(|f| f.data_type().clone())
            }
            (Some(DataType::List(item) | DataType::LargeList(item)), Step::Item(_)) => Some(item.data_type().clone()),
            (Some(DataType::Map(entries, _)), Step::Key(_)) => match entries.data_type() {
                DataType::Struct(kv) => kv.get(1).map(|v| v.data_type().clone()),
                _ => None,
            },
            _ => None,
        };
    }
    match at {
        Some(DataType::Map(..)) => (text(parents), twice_in_map(key)),
        _ => (text(&path), twice(parents.is_empty()).into()),
    }
}

/// A JSON value as serde_json builds one, refusing an object with a key twice: `twice` then holds
/// the path to the second.
struct Unique<'t> {
    twice: &'t mut Option<Vec<Step>>,
}

impl<'de> DeserializeSeed<'de> for Unique<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Unique<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        loop {
            match seq.next_element_seed(Unique { twice: &mut *self.twice }) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => return Ok(Value::Array(out)),
                Err(e) => {
                    if let Some(path) = self.twice.as_mut() {
                        path.push(Step::Item(out.len()));
                    }
                    return Err(e);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let slot = match out.entry(key) {
                Entry::Vacant(slot) => slot,
                Entry::Occupied(first) => {
                    *self.twice = Some(vec![Step::Key(first.key().clone())]);
                    return Err(serde::de::Error::custom("a key twice in one object"));
                }
            };
            match map.next_value_seed(Unique { twice: &mut *self.twice }) {
                Ok(v) => {
                    slot.insert(v);
                }
                Err(e) => {
                    if let Some(path) = self.twice.as_mut() {
                        path.push(Step::Key(slot.key().clone()));
                    }
                    return Err(e);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{JsonBuffer, Options, UnknownFields};
    use arrow::datatypes::{Field, Schema};
    use std::sync::Arc;

    /// The schema of `validate`'s tests: `a` a struct of `b`, `l` a list of such structs.
    fn validate_fields() -> Fields {
        let inner = Fields::from(vec![Field::new("b", DataType::Int64, true)]);
        Fields::from(vec![
            Field::new("a", DataType::Struct(inner.clone()), true),
            Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Struct(inner), true))), true),
        ])
    }

    /// With a map column arrow-json decodes every batch (the single pass reads no maps).
    fn schema(map: bool) -> Arc<Schema> {
        let inner = Fields::from(vec![Field::new("b", DataType::Int64, true), Field::new("c", DataType::Utf8, true)]);
        let entries = Field::new(
            "entries",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Int64, true),
            ])),
            false,
        );
        let wide: Vec<Field> = (0..20).map(|i| Field::new(format!("w{i}"), DataType::Int64, true)).collect();
        let mut fields = vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("a", DataType::Struct(inner.clone()), true),
            Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Struct(inner), true))), true),
            Field::new("wide", DataType::Struct(wide.into()), true),
        ];
        if map {
            fields.push(Field::new("attrs", DataType::Map(Arc::new(entries), false), true));
        }
        Arc::new(Schema::new(fields))
    }

    /// (offset, field, reason) of each bad record among `values`, and the rows kept.
    fn refused(values: &[&str], map: bool, options: Options) -> (Vec<(i64, String, String)>, usize) {
        let buf = JsonBuffer::new(schema(map), options).unwrap();
        let out = crate::buffer::tests::append_from_zero(&buf, values);
        (out.errors.into_iter().map(|e| (e.offset, e.field, e.reason)).collect(), out.rows)
    }

    #[test]
    fn a_field_twice_is_a_bad_record_naming_its_path_on_every_path() {
        let values = [
            r#"{"id": 1, "name": "a"}"#,
            r#"{"id": 1, "name": "a", "id": 2}"#,
            r#"{"a": {"b": 1, "c": "x", "b": 2}}"#,
            r#"{"l": [{"b": 1}, {"c": "y", "c": "z"}]}"#,
            r#"{"wide": {"w0": 1, "w19": 2, "w7": 3, "w19": 4}}"#,
            r#"{"name": "b", "a": {"b": 1, "c": "x"}, "l": [{"b": 1}, {"b": 2}], "wide": {"w3": 1}}"#,
            r#"{"id": 3, "id": 3}"#,
        ];
        let top = twice(true).to_string();
        let nested = twice(false).to_string();
        let want = vec![
            (1, "id".to_string(), top.clone()),
            (2, "a.b".to_string(), nested.clone()),
            (3, "l.c".to_string(), nested.clone()),
            (4, "wide.w19".to_string(), nested.clone()),
            (6, "id".to_string(), top.clone()),
        ];
        for single_pass in [true, false] {
            assert_eq!(refused(&values, false, Options { single_pass, ..Options::default() }), (want.clone(), 2));
        }
        let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
        crate::buffer::tests::append_from_zero(&buf, &[values[0], values[5]]);
        assert_eq!(buf.single_pass_rows(), 2, "the schema is one the single pass reads, which gives up on a repeat");
        // parsed by serde_json first (reported unknown fields, case folding): the same records, and a
        // list item's index in the path as validate names it
        let parsed = vec![
            (1, "id".to_string(), top.clone()),
            (2, "a.b".to_string(), nested.clone()),
            (3, "l[1].c".to_string(), nested.clone()),
            (4, "wide.w19".to_string(), nested),
            (6, "id".to_string(), top),
        ];
        let report = Options { unknown_fields: UnknownFields::Report, ..Options::default() };
        assert_eq!(refused(&values, false, report), (parsed.clone(), 2));
        assert_eq!(refused(&values, true, Options { fold_case: true, ..Options::default() }), (parsed, 2));
    }

    #[test]
    fn a_repeat_is_found_whatever_order_the_objects_before_it_came_in() {
        let values = [
            r#"{"id": 1, "name": "a", "a": {"b": 1, "c": "x"}}"#,
            r#"{"id": 2, "name": "b"}"#,
            r#"{"id": 3, "name": "c", "id": 4}"#,
            r#"{"name": "d"}"#,
            r#"{"name": "e", "name": "f"}"#,
            r#"{"a": {"c": "y", "b": 2}, "id": 5}"#,
            r#"{"a": {"c": "y", "b": 2, "c": "z"}, "id": 6}"#,
            r#"{"id": 7, "name": "g", "a": {"b": 1, "c": "x"}}"#,
            r#"{"id": 8, "name": "h", "a": {"b": 1, "c": "x"}, "name": "i"}"#,
            r#"{}"#,
            r#"{"id": 9, "id": 9}"#,
        ];
        let top = twice(true).to_string();
        let want = vec![
            (2, "id".to_string(), top.clone()),
            (4, "name".to_string(), top.clone()),
            (6, "a.c".to_string(), twice(false).to_string()),
            (8, "name".to_string(), top.clone()),
            (10, "id".to_string(), top),
        ];
        for single_pass in [true, false] {
            assert_eq!(refused(&values, false, Options { single_pass, ..Options::default() }), (want.clone(), 6));
        }
    }

    #[test]
    fn a_key_twice_in_a_map_is_a_bad_record_naming_the_map() {
        let many: String = (0..40).map(|i| format!(r#""k{i}": {i}, "#)).collect();
        let long = format!(r#"{{"attrs": {{{many}"k7": 0}}}}"#);
        let values = [r#"{"attrs": {"k": 1, "j": 2, "k": 3}}"#, r#"{"attrs": {"k": 1, "K": 2}}"#, long.as_str()];
        let want = vec![(0, "attrs".to_string(), twice_in_map("k")), (2, "attrs".to_string(), twice_in_map("k7"))];
        for options in [
            Options::default(),
            Options { unknown_fields: UnknownFields::Report, ..Options::default() },
            Options { fold_case: true, ..Options::default() },
        ] {
            assert_eq!(refused(&values, true, options), (want.clone(), 1));
        }
    }

    #[test]
    fn an_unknown_field_twice_is_still_named_as_unknown_when_rejected() {
        let (errors, rows) = refused(&[r#"{"id": 1, "x": 1, "x": 2}"#], false, Options::default());
        assert_eq!(rows, 0);
        assert_eq!(errors[0].1, "x");
        assert!(errors[0].2.starts_with("the table has no such column"), "{errors:?}");
    }

    #[test]
    fn a_key_twice_is_refused_with_its_path_and_anything_else_parses_as_serde_json_would() {
        let f = validate_fields();
        for (value, field, top_level) in [
            (&br#"{"a": {"b": 1}, "a": 2}"#[..], "a", true),
            (br#"{"a": {"b": 1, "b": 1}}"#, "a.b", false),
            (br#"{"l": [{"b": 1}, {"z": [{"q": 1, "q": 2}]}]}"#, "l[1].z[0].q", false),
            (br#"{"new": {"x": 1, "x": 1}}"#, "new.x", false),
        ] {
            let refused = parse_unique(value, &f).err();
            assert_eq!(refused, Some((field.to_string(), twice(top_level).to_string())));
        }
        for value in [
            &br#"{"a": {"b": -9223372036854775808}, "l": [18446744073709551615, 1e300, 0.1, -0.0, 2.5e-308]}"#[..],
            br#"{"s": "\ud83d\ude00\n\"", "e": {}, "n": null, "t": [true, false, []], "b": {"b": {"b": 1}}}"#,
            br#"{"a": 1e400}"#,
            br#"{"a": 1} {}"#,
        ] {
            let theirs = serde_json::from_slice::<Value>(value).map_err(|e| format!("value is not valid JSON: {e}"));
            let ours = parse_unique(value, &f).map_err(|(_, reason)| reason);
            assert_eq!(ours.map(|v| v.to_string()), theirs.map(|v| v.to_string()), "{value:?}");
        }
    }
}
