//! Kafka record keys in the Confluent wire format (magic byte 0, a big-endian u32 schema id, the
//! payload), read as JSON so that `keys.rs` can take fields of them: an Avro datum (arrow-avro,
//! its writer schema as the reader, then [`avro_row`]), a Protobuf message (`protobuf.rs`, the
//! message indexes after the id), or JSON Schema's JSON text.
//!
//! An Avro datum's fields become JSON as sent: text (an enum by its name, a uuid in its canonical
//! form), numbers, booleans, records as objects, null. A field of any other type (bytes, fixed,
//! decimal, a date or time, an array, a map, a union of several types) becomes a marker that
//! [`unreadable`] names, so only a key column that reads that field refuses the record. Which kind each schema id is comes from the registry,
//! asked outside (Python, once per id); an id not registered yet refuses the append
//! ([`super::BufferError::UnknownKeySchemas`]) until it is. Pure Rust, no pyo3.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Int32Type, Int64Type};
use arrow::error::ArrowError;
use arrow_avro::reader::Decoder;
use arrow_avro::schema::AvroSchema;
use serde_json::{Map, Number, Value};

use super::avro::{CONFLUENT_HEADER, CONFLUENT_MAGIC};
use crate::protobuf::{ProtoSchemas, Transcoded};

/// The object key of [`unreadable`]'s marker: no JSON text holds a NUL in a name by accident.
const UNREADABLE: &str = "\u{0}unreadable";

#[derive(Debug)]
enum Kind {
    /// The writer schema, and a decoder of it kept for the next key (taken while in use).
    Avro(AvroSchema, Mutex<Option<Box<Decoder>>>),
    /// Compiled into `protobuf` under the same id.
    Protobuf,
    Json,
    Refused(String),
}

/// What a framed key reads as.
#[derive(Debug, PartialEq, Eq)]
pub enum KeyJson {
    /// Not in the wire format: read as it is.
    Unframed,
    /// The key's JSON.
    Json(Vec<u8>),
    /// The key cannot be read, for this reason.
    Bad(String),
    /// Its schema id is not registered yet.
    Unknown(u32),
}

/// The key schemas of a pipeline by registry id, shared by its buffers; safe across threads.
#[derive(Debug, Default)]
pub struct KeySchemas {
    by_id: RwLock<HashMap<u32, Arc<Kind>>>,
    protobuf: ProtoSchemas,
}

impl KeySchemas {
    /// Keys of schema `id` are Avro datums of `writer` (its JSON); an error when arrow-avro cannot
    /// read it (nothing is registered: [`Self::refuse`] it).
    pub fn register_avro(&self, id: u32, writer: &str) -> Result<(), String> {
        let schema = AvroSchema::new(writer.to_string());
        let decoder = decoder(id, &schema).map_err(|e| e.to_string())?;
        self.insert(id, Kind::Avro(schema, Mutex::new(Some(Box::new(decoder)))));
        Ok(())
    }

    /// Keys of schema `id` are Protobuf messages of `text` (a `.proto` file).
    pub fn register_protobuf(&self, id: u32, text: &str) -> Result<(), String> {
        self.protobuf.register(id, text)?;
        self.insert(id, Kind::Protobuf);
        Ok(())
    }

    /// Keys of schema `id` are JSON text (a JSON Schema serializer's).
    pub fn register_json(&self, id: u32) {
        self.insert(id, Kind::Json);
    }

    /// Every key of schema `id` is unreadable, for `reason`.
    pub fn refuse(&self, id: u32, reason: String) {
        self.insert(id, Kind::Refused(reason));
    }

    pub fn known(&self, id: u32) -> bool {
        self.by_id.read().expect("key schemas lock poisoned").contains_key(&id)
    }

    fn insert(&self, id: u32, kind: Kind) {
        self.by_id.write().expect("key schemas lock poisoned").insert(id, Arc::new(kind));
    }

    /// The schema id of a key in the wire format, None for any other key.
    pub fn id_of(key: &[u8]) -> Option<u32> {
        (key.len() >= CONFLUENT_HEADER && key[0] == CONFLUENT_MAGIC)
            .then(|| u32::from_be_bytes([key[1], key[2], key[3], key[4]]))
    }

    /// `key` as JSON, when it is in the wire format (an Avro key's unreadable fields as markers).
    pub fn json(&self, key: &[u8]) -> KeyJson {
        let Some(id) = Self::id_of(key) else { return KeyJson::Unframed };
        let kind = self.by_id.read().expect("key schemas lock poisoned").get(&id).cloned();
        let Some(kind) = kind else { return KeyJson::Unknown(id) };
        let body = &key[CONFLUENT_HEADER..];
        match kind.as_ref() {
            Kind::Refused(reason) => KeyJson::Bad(format!("the key's schema id {id} cannot be read: {reason}")),
            Kind::Json => KeyJson::Json(body.to_vec()),
            Kind::Protobuf => match self.protobuf.transcode_one(key) {
                Transcoded::Json(json) => KeyJson::Json(json),
                Transcoded::Bad(reason) => KeyJson::Bad(format!("the key is not readable Protobuf: {reason}")),
                Transcoded::Unknown(id) => KeyJson::Unknown(id),
            },
            Kind::Avro(writer, kept) => match avro_json(id, writer, kept, body) {
                Ok(json) => KeyJson::Json(json),
                Err(reason) => {
                    KeyJson::Bad(format!("the key is not a readable Avro datum of its schema id {id}: {reason}"))
                }
            },
        }
    }
}

/// A decoder of `writer`'s datums, read as they were written.
fn decoder(id: u32, writer: &AvroSchema) -> Result<Decoder, ArrowError> {
    super::avro::build(id, writer, writer, 1)
}

/// One Avro datum as the JSON of its fields ([`avro_row`]); the datum must be the whole body. A
/// panic inside arrow-avro is an error. The kept decoder is reused while no datum fails.
fn avro_json(
    id: u32,
    writer: &AvroSchema,
    kept: &Mutex<Option<Box<Decoder>>>,
    datum: &[u8],
) -> Result<Vec<u8>, String> {
    let taken = kept.lock().expect("key decoder lock poisoned").take();
    let mut decoder = match taken {
        Some(decoder) => decoder,
        None => Box::new(decoder(id, writer).map_err(|e| e.to_string())?),
    };
    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<Option<RecordBatch>, String> {
        let used = decoder.decode(datum).map_err(|e| e.to_string())?;
        if used != datum.len() {
            return Err(format!("{} byte(s) left over after the datum", datum.len() - used));
        }
        decoder.flush().map_err(|e| e.to_string())
    }))
    .map_err(|_| "the Avro decoder failed on it".to_string())??;
    // a failed datum may leave the decoder part-way: only one that read a whole datum is kept
    *kept.lock().expect("key decoder lock poisoned") = Some(decoder);
    let batch = batch.filter(|b| b.num_rows() == 1).ok_or("the datum decoded to no row")?;
    let schema = batch.schema();
    let fields = schema.fields().iter().zip(batch.columns()).map(|(f, c)| (f.name().clone(), avro_row(f, c.as_ref())));
    serde_json::to_vec(&Value::Object(fields.collect())).map_err(|e| e.to_string())
}

/// Row 0 of a decoded Avro column as JSON, exactly as sent; a type a key column cannot take as
/// [`unreadable`]'s marker naming it.
fn avro_row(field: &Field, column: &dyn Array) -> Value {
    if column.is_null(0) {
        return Value::Null;
    }
    // arrow-avro's numbers: int, long, float, double
    let float = |x: f64| Number::from_f64(x).map_or_else(|| marker(&format!("the float {x}")), Value::Number);
    match column.data_type() {
        DataType::Boolean => Value::Bool(column.as_boolean().value(0)),
        DataType::Int32 => Value::Number(column.as_primitive::<Int32Type>().value(0).into()),
        DataType::Int64 => Value::Number(column.as_primitive::<Int64Type>().value(0).into()),
        DataType::Float32 => float(column.as_primitive::<Float32Type>().value(0).into()),
        DataType::Float64 => float(column.as_primitive::<Float64Type>().value(0)),
        DataType::Utf8 => Value::String(column.as_string::<i32>().value(0).to_string()),
        DataType::LargeUtf8 => Value::String(column.as_string::<i64>().value(0).to_string()),
        DataType::Utf8View => Value::String(column.as_string_view().value(0).to_string()),
        // an enum: its symbol
        DataType::Dictionary(_, value) if value.as_ref() == &DataType::Utf8 => {
            let text = arrow::compute::cast(&column.slice(0, 1), &DataType::Utf8);
            text.map_or_else(|_| marker("an enum"), |t| Value::String(t.as_string::<i32>().value(0).to_string()))
        }
        DataType::FixedSizeBinary(16) if field.metadata().get("logicalType").is_some_and(|t| t == "uuid") => {
            let b = column.as_fixed_size_binary().value(0);
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            Value::String(format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..]))
        }
        DataType::Struct(fields) => {
            let record = column.as_struct();
            let out: Map<String, Value> =
                fields.iter().zip(record.columns()).map(|(f, c)| (f.name().clone(), avro_row(f, c.as_ref()))).collect();
            Value::Object(out)
        }
        other => marker(&format!("an Avro value of type {other}")),
    }
}

fn marker(what: &str) -> Value {
    Value::Object(Map::from_iter([(UNREADABLE.to_string(), Value::String(what.to_string()))]))
}

/// What an Avro key's field holds that a key column cannot take, when `value` is such a field.
pub fn unreadable(value: &Value) -> Option<&str> {
    match value {
        Value::Object(fields) if fields.len() == 1 => fields.get(UNREADABLE).and_then(Value::as_str),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVRO: &str = r#"{"type": "record", "name": "Key", "fields": [
        {"name": "shop", "type": {"type": "record", "name": "Shop", "fields": [{"name": "id", "type": "long"}]}},
        {"name": "region", "type": ["null", "string"], "default": null}]}"#;
    const PROTO: &str = "syntax = \"proto3\";\nmessage Key { int64 user = 1; string region = 2; }\n";

    fn framed(id: u32, body: &[u8]) -> Vec<u8> {
        let mut out = vec![0];
        out.extend(id.to_be_bytes());
        out.extend(body);
        out
    }

    fn json(schemas: &KeySchemas, key: &[u8]) -> serde_json::Value {
        match schemas.json(key) {
            KeyJson::Json(text) => serde_json::from_slice(&text).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn avro_protobuf_and_json_keys_read_as_json_by_their_schema_id() {
        let schemas = KeySchemas::default();
        schemas.register_avro(7, AVRO).unwrap();
        schemas.register_protobuf(8, PROTO).unwrap();
        schemas.register_json(9);
        // shop.id = 21 (zig-zag 42), region: union branch 1, "eu"
        let avro = framed(7, &[42, 2, 4, b'e', b'u']);
        assert_eq!(json(&schemas, &avro), serde_json::json!({"shop": {"id": 21}, "region": "eu"}));
        // message indexes: count 0 (the first message); user = 5, region = "eu"
        let proto = framed(8, &[0, 0x08, 5, 0x12, 2, b'e', b'u']);
        assert_eq!(json(&schemas, &proto), serde_json::json!({"user": 5, "region": "eu"}));
        assert_eq!(json(&schemas, &framed(9, br#"{"a": 1}"#)), serde_json::json!({"a": 1}));
        assert_eq!(schemas.json(br#"{"a": 1}"#), KeyJson::Unframed);
    }

    #[test]
    fn an_unknown_id_a_refused_one_and_a_broken_datum_say_why() {
        let schemas = KeySchemas::default();
        schemas.register_avro(7, AVRO).unwrap();
        schemas.refuse(3, "schema id 3 uses schema references".into());
        assert_eq!(schemas.json(&framed(4, b"x")), KeyJson::Unknown(4));
        assert!(matches!(schemas.json(&framed(3, b"x")), KeyJson::Bad(r) if r.contains("uses schema references")));
        // trailing bytes after a whole datum
        let long = framed(7, &[42, 0, 99]);
        assert!(matches!(schemas.json(&long), KeyJson::Bad(r) if r.contains("left over")), "{:?}", schemas.json(&long));
        // a string that runs past the end
        assert!(matches!(schemas.json(&framed(7, &[42, 2, 40, b'e'])), KeyJson::Bad(r) if r.contains("Avro")));
        assert!(schemas.register_avro(10, "{\"type\": \"nope\"}").is_err());
        assert!(!schemas.known(10));
    }

    #[test]
    fn an_avro_keys_uuid_and_enum_read_as_text_and_other_types_as_markers() {
        let schemas = KeySchemas::default();
        let writer = r#"{"type": "record", "name": "K", "fields": [
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["FREE", "PAID"]}},
            {"name": "raw", "type": "bytes"}]}"#;
        schemas.register_avro(5, writer).unwrap();
        let uuid = b"550e8400-e29b-41d4-a716-446655440000";
        let mut body = vec![72];
        body.extend(uuid);
        body.extend([2, 2, 0xff]); // tier = PAID (index 1), raw = one byte
        let got = json(&schemas, &framed(5, &body));
        assert_eq!(got["id"], serde_json::json!("550e8400-e29b-41d4-a716-446655440000"));
        assert_eq!(got["tier"], serde_json::json!("PAID"));
        assert_eq!(unreadable(&got["raw"]), Some("an Avro value of type Binary"), "{got}");
        assert_eq!(unreadable(&got["id"]), None);
    }
}
