//! Kafka record keys as columns: the whole key, or a field of a key that is a JSON object, into a
//! column of its own. The whole key lands as a header does (`headers.rs`): its bytes as text in a
//! string column, as they are in a binary column, exactly as the number or boolean its text spells
//! in an int, long, double or boolean column. A field of a JSON key lands if it is of the column's
//! kind (a string for a string column, a number for a number column, true or false for a boolean
//! one), exactly; NULL when the record has no key, or the key lacks the field or holds null there.
//! Anything else makes the record bad, naming the key column and why. A key in the Confluent wire
//! format (a JSON Schema serializer's: magic byte 0, a 4-byte schema id, the JSON) is read after
//! its frame; JSON text never starts with a zero byte, so the two cannot be confused. With the
//! pipeline's key schemas (`key_formats.rs`, from the schema registry), a framed key is read by
//! the kind its schema id has: Avro and Protobuf keys too, as JSON. Pure Rust, no pyo3.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::compute::cast;
use arrow::datatypes::Schema;
use arrow::error::ArrowError;
use serde_json::Value;

use super::headers::{column, parse, shown, Kind};
use super::key_formats::{unreadable, KeyJson, KeySchemas};

/// The key columns of a buffer's schema: which column takes the key, or which field of it.
#[derive(Debug, Clone, Default)]
pub struct KeyColumns {
    /// (index in the schema, the field's path in the key: empty for the whole key, what the column holds)
    named: Vec<(usize, Vec<String>, Kind)>,
    /// How framed keys read, by schema id; None: a framed key must be JSON after its frame.
    schemas: Option<Arc<KeySchemas>>,
}

impl KeyColumns {
    /// `named`: (column, the key's field as a dotted path; "" for the whole key). Each column must
    /// be in `schema`, of type string, binary, int, long, double or boolean (binary for the whole
    /// key only: a JSON field holds no bytes).
    pub fn new(
        schema: &Schema,
        named: &[(String, String)],
        schemas: Option<Arc<KeySchemas>>,
    ) -> Result<Self, ArrowError> {
        let mut out = KeyColumns { named: Vec::new(), schemas };
        for (column, field) in named {
            let i = schema.index_of(column).map_err(|_| {
                ArrowError::SchemaError(format!("key column {column:?} is not in the schema; add it to the table"))
            })?;
            let kind = Kind::of(schema.field(i).data_type())
                .filter(|k| *k != Kind::Bytes || field.is_empty())
                .ok_or_else(|| {
                    ArrowError::SchemaError(format!(
                        "key column {column:?} is {}; a key {} lands in a string, {}int, long, double or boolean column",
                        schema.field(i).data_type(),
                        if field.is_empty() { "" } else { "field" },
                        if field.is_empty() { "binary, " } else { "" },
                    ))
                })?;
            let path = if field.is_empty() { Vec::new() } else { field.split('.').map(str::to_owned).collect() };
            out.named.push((i, path, kind));
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty()
    }

    /// Whether the schema's column `i` is filled from the key.
    pub fn holds(&self, i: usize) -> bool {
        self.named.iter().any(|(j, _, _)| *j == i)
    }

    /// The schema ids of framed `keys` not registered yet, when a column takes a field of a key.
    pub fn unknown<'k>(&self, keys: impl Iterator<Item = Option<&'k [u8]>>) -> Vec<u32> {
        let mut missing = Vec::new();
        let Some(schemas) = self.schemas.as_deref() else { return missing };
        if self.named.iter().all(|(_, path, _)| path.is_empty()) {
            return missing;
        }
        for id in keys.flatten().filter_map(KeySchemas::id_of) {
            if !missing.contains(&id) && !schemas.known(id) {
                missing.push(id);
            }
        }
        missing
    }

    /// Why `key` cannot fill its columns: (the column, the reason).
    pub fn check(&self, schema: &Schema, key: Option<&[u8]>) -> Result<(), (String, String)> {
        let Some(key) = key else { return Ok(()) };
        let mut parsed = None;
        for (i, path, kind) in &self.named {
            let at = || schema.field(*i).name().clone();
            let schemas = self.schemas.as_deref();
            if let Some(value) = value_of(key, path, *kind, schemas, &mut parsed).map_err(|why| (at(), why))? {
                parse(*kind, &value)
                    .map_err(|why| (at(), format!("the key{} is {}: {why}", shown_path(path), shown(&value))))?;
            }
        }
        Ok(())
    }

    /// The key columns of the records at `rows` (each checked): (index in the schema, array).
    pub fn columns<K: AsRef<[u8]>>(
        &self,
        schema: &Schema,
        keys: &[Option<K>],
        rows: &[usize],
    ) -> Result<Vec<(usize, ArrayRef)>, ArrowError> {
        let mut out = Vec::with_capacity(self.named.len());
        // each key read once, whatever number of columns take fields of it
        let mut parsed: Vec<Option<Value>> = vec![None; rows.len()];
        for (i, path, kind) in &self.named {
            let mut values = Vec::with_capacity(rows.len());
            for (&r, cache) in rows.iter().zip(parsed.iter_mut()) {
                values.push(match keys[r].as_ref() {
                    None => None,
                    Some(key) => {
                        value_of(key.as_ref(), path, *kind, self.schemas.as_deref(), cache).map_err(|why| {
                            ArrowError::InvalidArgumentError(format!("a key unchecked for its column: {why}"))
                        })?
                    }
                });
            }
            let built = column(*kind, values.iter().map(|v| v.as_deref()))?;
            let wanted = schema.field(*i).data_type();
            out.push((*i, if built.data_type() == wanted { built } else { cast(&built, wanted)? }));
        }
        Ok(out)
    }
}

/// A key's JSON when no key schema reads it: a key not in the wire format, or without the
/// pipeline's key schemas (no schema registry) one that must be JSON after its frame (a JSON
/// Schema serializer's).
fn unregistered(key: &[u8], path: &[String]) -> Result<Value, String> {
    match super::framed_json(key) {
        Some(json) => serde_json::from_slice(json).map_err(|_| {
            format!(
                "the key is in the Confluent wire format (schema id {}) but not JSON after its frame (an Avro or \
                 Protobuf key), so it has no field {}: configure schema_registry to read such keys, or take the \
                 whole key as binary",
                u32::from_be_bytes([key[1], key[2], key[3], key[4]]),
                path.join(".")
            )
        }),
        None => serde_json::from_slice(key).map_err(|_| {
            format!("the key is {}, not a JSON object, so it has no field {}", shown(key), path.join("."))
        }),
    }
}

fn shown_field(path: &[String]) -> String {
    if path.is_empty() {
        "value".to_string()
    } else {
        format!("field {}", path.join("."))
    }
}

fn shown_path(path: &[String]) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!("'s field {}", path.join("."))
    }
}

/// The bytes the column of `path` takes from `key` (None: NULL): the key itself for an empty
/// path; else the field's text (a string unescaped, a number or boolean as written), when it is of
/// the column's kind. `parsed` keeps the key's JSON for the next column of the same record.
fn value_of<'k>(
    key: &'k [u8],
    path: &[String],
    kind: Kind,
    schemas: Option<&KeySchemas>,
    parsed: &mut Option<Value>,
) -> Result<Option<Cow<'k, [u8]>>, String> {
    if path.is_empty() {
        return Ok(Some(Cow::Borrowed(key)));
    }
    if parsed.is_none() {
        let read = match schemas.map(|s| s.json(key)) {
            Some(KeyJson::Json(json)) => serde_json::from_slice(&json).map_err(|_| {
                format!("the key's JSON after its frame does not parse, so it has no field {}", path.join("."))
            }),
            Some(KeyJson::Bad(why)) => Err(format!("{why}; so it has no field {}", path.join("."))),
            Some(KeyJson::Unknown(id)) => Err(format!("the key's schema id {id} is not registered yet")),
            Some(KeyJson::Unframed) | None => unregistered(key, path),
        };
        *parsed = Some(read?);
    }
    let mut at = parsed.as_ref().expect("parsed above");
    for (depth, name) in path.iter().enumerate() {
        if let Some(what) = unreadable(at) {
            return Err(format!("the key's {} is {what}, so it has no field {name}", shown_field(&path[..depth])));
        }
        match at {
            Value::Object(fields) => match fields.get(name) {
                Some(v) => at = v,
                None => return Ok(None),
            },
            Value::Null => return Ok(None),
            _ => {
                return Err(format!(
                    "the key's {} is not a JSON object, so it has no field {name}",
                    shown_field(&path[..depth])
                ))
            }
        }
    }
    if let Some(what) = unreadable(at) {
        return Err(format!("the key's field {} is {what}, which a key column cannot take", path.join(".")));
    }
    let text = match (at, kind) {
        (Value::Null, _) => return Ok(None),
        (Value::String(s), Kind::Text) => s.clone().into_bytes(),
        (Value::Number(n), Kind::Int | Kind::Long | Kind::Double) => n.to_string().into_bytes(),
        (Value::Bool(b), Kind::Boolean) => b.to_string().into_bytes(),
        (other, _) => {
            let what = match other {
                Value::String(_) => "text",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                Value::Array(_) => "an array",
                _ => "an object",
            };
            return Err(format!("the key's field {} is {what}, and its column is {}", path.join("."), kind.name()));
        }
    };
    Ok(Some(Cow::Owned(text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Field, Int64Type};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("key", DataType::Utf8, true),
            Field::new("user", DataType::Int64, true),
            Field::new("region", DataType::Utf8, true),
        ])
    }

    fn spec(schema: &Schema) -> KeyColumns {
        let named = [
            ("key".to_string(), String::new()),
            ("user".to_string(), "user.id".to_string()),
            ("region".to_string(), "region".to_string()),
        ];
        KeyColumns::new(schema, &named, None).unwrap()
    }

    #[test]
    fn the_whole_key_and_fields_of_a_json_key_land_typed() {
        let schema = schema();
        let spec = spec(&schema);
        let keys: Vec<Option<&[u8]>> = vec![
            Some(br#"{"user": {"id": 42}, "region": "eu\u00e9"}"#),
            None,
            Some(br#"{"user": null}"#),
            Some(br#"{"user": {"id": 9007199254740993}, "region": null}"#),
        ];
        for key in &keys {
            spec.check(&schema, *key).unwrap();
        }
        let columns = spec.columns(&schema, &keys, &[0, 1, 2, 3]).unwrap();
        let [(1, key), (2, user), (3, region)] = &columns[..] else { panic!("{columns:?}") };
        assert_eq!(key.as_string::<i32>().value(0), r#"{"user": {"id": 42}, "region": "eu\u00e9"}"#);
        assert!(key.is_null(1));
        let user = user.as_primitive::<Int64Type>();
        assert_eq!(
            (user.value(0), user.is_null(1), user.is_null(2), user.value(3)),
            (42, true, true, 9007199254740993)
        );
        let region = region.as_string::<i32>();
        assert_eq!((region.value(0), region.is_null(2), region.is_null(3)), ("eué", true, true));
    }

    #[test]
    fn a_key_that_does_not_fit_names_the_column_and_why() {
        let schema = schema();
        let spec = spec(&schema);
        let cases: [(&[u8], &str, &str); 5] = [
            (b"user-7", "user", "the key is \"user-7\", not a JSON object, so it has no field user.id"),
            (br#"{"user": 7}"#, "user", "the key's field user is not a JSON object, so it has no field id"),
            (br#"{"user": {"id": "7"}}"#, "user", "the key's field user.id is text, and its column is long"),
            (
                br#"{"user": {"id": 1.5}}"#,
                "user",
                "the key's field user.id is \"1.5\": not a long (64-bit) written in digits",
            ),
            (br#"{"region": 3}"#, "region", "the key's field region is a number, and its column is string"),
        ];
        for (key, column, why) in cases {
            assert_eq!(spec.check(&schema, Some(key)), Err((column.to_string(), why.to_string())), "{key:?}");
        }
        let binary = Schema::new(vec![Field::new("b", DataType::Binary, true)]);
        assert!(KeyColumns::new(&binary, &[("b".into(), "x".into())], None).is_err());
        assert!(KeyColumns::new(&binary, &[("b".into(), String::new())], None).is_ok());
    }

    #[test]
    fn a_json_schema_key_is_read_after_its_frame_and_an_avro_one_is_named() {
        let schema = schema();
        let keys = spec(&schema);
        let framed = [&[0u8, 0, 0, 0, 9][..], br#"{"user": {"id": 7}, "region": "eu"}"#].concat();
        assert_eq!(keys.check(&schema, Some(&framed)), Ok(()));
        let got = keys.columns(&schema, &[Some(framed)], &[0]).unwrap();
        assert_eq!(got.iter().find(|(i, _)| *i == 2).unwrap().1.as_primitive::<Int64Type>().value(0), 7);
        let avro = [0u8, 0, 0, 0, 12, 0x0e, 0x04, b'e', b'u'];
        let (column, why) = keys.check(&schema, Some(&avro)).unwrap_err();
        assert_eq!(column, "user");
        assert!(why.contains("Confluent wire format (schema id 12) but not JSON after its frame"), "{why}");
    }

    #[test]
    fn with_key_schemas_an_avro_key_fills_its_field_columns_and_an_unknown_id_is_asked_for() {
        let schema = schema();
        let schemas = Arc::new(KeySchemas::default());
        let named = [("user".to_string(), "user.id".to_string()), ("region".to_string(), "region".to_string())];
        let keys = KeyColumns::new(&schema, &named, Some(schemas.clone())).unwrap();
        let avro = r#"{"type": "record", "name": "K", "fields": [
            {"name": "user", "type": {"type": "record", "name": "U", "fields": [{"name": "id", "type": "long"}]}},
            {"name": "region", "type": "string"}]}"#;
        // user.id = 7 (zig-zag 14), region = "eu"
        let key = [0u8, 0, 0, 0, 12, 14, 4, b'e', b'u'];
        let json = br#"{"user": {"id": 3}}"#.to_vec();
        let all = [Some(key.to_vec()), Some(json), None];
        assert_eq!(keys.unknown(all.iter().map(|k| k.as_deref())), vec![12]);
        schemas.register_avro(12, avro).unwrap();
        assert!(keys.unknown(all.iter().map(|k| k.as_deref())).is_empty());
        assert_eq!(keys.check(&schema, Some(&key)), Ok(()));
        let got = keys.columns(&schema, &all, &[0, 1, 2]).unwrap();
        let user = got.iter().find(|(i, _)| *i == 2).unwrap().1.as_primitive::<Int64Type>();
        assert_eq!((user.value(0), user.value(1), user.is_null(2)), (7, 3, true));
        assert_eq!(got.iter().find(|(i, _)| *i == 3).unwrap().1.as_string::<i32>().value(0), "eu");
        let (column, why) = keys.check(&schema, Some(&key[..7])).unwrap_err();
        assert_eq!(column, "user");
        assert!(why.contains("not a readable Avro datum of its schema id 12"), "{why}");
    }
}
