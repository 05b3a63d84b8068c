//! Kafka record keys in the Confluent wire format (magic byte 0, a big-endian u32 schema id, the
//! payload), read as JSON so that `keys.rs` can take fields of them: an Avro datum (arrow-avro,
//! its writer schema as the reader), a Protobuf message (`protobuf.rs`, the message indexes after
//! the id), or JSON Schema's JSON text. Which kind each schema id is comes from the registry,
//! asked outside (Python, once per id); an id not registered yet refuses the append
//! ([`super::BufferError::UnknownKeySchemas`]) until it is. Pure Rust, no pyo3.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use arrow_avro::reader::Decoder;
use arrow_avro::schema::AvroSchema;

use super::avro::{CONFLUENT_HEADER, CONFLUENT_MAGIC};
use crate::protobuf::{ProtoSchemas, Transcoded};

#[derive(Debug)]
enum Kind {
    Avro(AvroSchema),
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
        decoder(id, &schema).map_err(|e| e.to_string())?;
        self.insert(id, Kind::Avro(schema));
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

    /// `key` as JSON, when it is in the wire format.
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
            Kind::Avro(writer) => match avro_json(id, writer, body) {
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

/// One Avro datum as a JSON object (its fields; a null field left out); the datum must be the
/// whole body. A panic inside arrow-avro is an error.
fn avro_json(id: u32, writer: &AvroSchema, datum: &[u8]) -> Result<Vec<u8>, String> {
    let mut decoder = decoder(id, writer).map_err(|e| e.to_string())?;
    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<Option<RecordBatch>, String> {
        let used = decoder.decode(datum).map_err(|e| e.to_string())?;
        if used != datum.len() {
            return Err(format!("{} byte(s) left over after the datum", datum.len() - used));
        }
        decoder.flush().map_err(|e| e.to_string())
    }))
    .map_err(|_| "the Avro decoder failed on it".to_string())??;
    let batch = batch.filter(|b| b.num_rows() == 1).ok_or("the datum decoded to no row")?;
    let mut writer = arrow::json::ArrayWriter::new(Vec::new());
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    let text = writer.into_inner();
    // `[{...}]`: the one object
    Ok(text[1..text.len() - 1].to_vec())
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
}
