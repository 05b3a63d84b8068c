//! Protobuf values in the Confluent wire format: magic byte 0, a big-endian u32 schema id, the
//! message indexes (a zig-zag varint count, then that many zig-zag varint indexes; a count of 0
//! means the file's first message), then the message. Each schema id's `.proto` text, as the
//! registry keeps it, is compiled here (protox, with Google's well-known types) and its records
//! are read by prost-reflect into a dynamic message, then written as JSON (proto field names,
//! 64-bit integers as numbers, enums by name, every field, defaults included) for the JSON
//! decoder, which holds each value to its column as it does for JSON values.
//!
//! [`ProtoSchemas::columns`] says the column each field of a message takes, in the type grammar
//! of frazil's declared columns (`struct<a: long, b: list<string>>`), so a table can be made from
//! a schema. A field that cannot be a column (a map with non-string keys, `google.protobuf.Any`,
//! a recursive message) is named with why. Pure Rust, no pyo3.
//!
//! Plain values (`values.format = "protobuf"`): each value is the bare message of one type of one
//! `.proto` file, registered under [`PLAIN_ID`]; [`ProtoSchemas::read_plain`] names the type, and
//! every value is read as it, without a frame.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use prost_reflect::{DescriptorPool, DynamicMessage, FileDescriptor, Kind, MessageDescriptor, SerializeOptions};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver};

/// The schema id plain values' `.proto` file is registered under.
pub const PLAIN_ID: u32 = 0;
/// The name the schema's text is compiled under.
const SCHEMA_FILE: &str = "schema.proto";
/// Nested messages followed into columns before a message is taken to be recursive.
const MAX_DEPTH: usize = 32;

#[derive(Debug)]
enum Entry {
    Readable(FileDescriptor),
    Refused(String),
}

/// What a value becomes.
#[derive(Debug, PartialEq, Eq)]
pub enum Transcoded {
    /// The message as JSON.
    Json(Vec<u8>),
    /// The record is bad, for this reason.
    Bad(String),
    /// Its schema id is not registered yet.
    Unknown(u32),
}

/// The messages one caller looked up: (schema id, message indexes, the message or why there is none).
pub type Seen = Vec<(u32, Vec<i64>, Result<Option<MessageDescriptor>, String>)>;

/// The compiled schemas by id, shared by every buffer of a pipeline; safe across threads.
#[derive(Debug, Default)]
pub struct ProtoSchemas {
    by_id: RwLock<HashMap<u32, Arc<Entry>>>,
    /// Plain values: the indexes of the one message type of [`PLAIN_ID`]'s file every value is.
    plain: OnceLock<Vec<i64>>,
}

struct Source(String);

impl FileResolver for Source {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        if name == SCHEMA_FILE {
            File::from_source(name, &self.0)
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

/// Compiles a schema's `.proto` text; the error says where it is wrong.
pub fn compile(text: &str) -> Result<FileDescriptor, String> {
    let mut resolver = ChainFileResolver::new();
    resolver.add(Source(text.to_string()));
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(Path::new(SCHEMA_FILE)).map_err(|e| format!("the schema does not compile: {e}"))?;
    compiler
        .descriptor_pool()
        .get_file_by_name(SCHEMA_FILE)
        .ok_or_else(|| "the schema does not compile to a file".to_string())
}

impl ProtoSchemas {
    /// Records of schema `id` are read with `text` (a `.proto` file); an error when it does not
    /// compile (nothing is registered: [`Self::refuse`] it).
    pub fn register(&self, id: u32, text: &str) -> Result<(), String> {
        let file = compile(text)?;
        self.by_id.write().expect("schemas lock poisoned").insert(id, Arc::new(Entry::Readable(file)));
        Ok(())
    }

    /// Plain values' schema from a descriptor set (a `FileDescriptorSet`, as `protoc
    /// --include_imports --descriptor_set_out` or `buf build -o` write it) rather than `.proto`
    /// text: the file that defines `message` (its full name, or a short name only one file
    /// defines), or with "" the set's last file (protoc writes a file after its imports),
    /// registered under [`PLAIN_ID`].
    pub fn register_descriptor_set(&self, data: &[u8], message: &str) -> Result<(), String> {
        let pool = DescriptorPool::decode(data).map_err(|e| {
            format!(
                "cannot be read as a Protobuf descriptor set ({e}); write one with protoc --include_imports \
                 --descriptor_set_out or buf build -o (with every import in it), or give the .proto source (a file \
                 ending in .proto)"
            )
        })?;
        let file = if message.is_empty() {
            pool.files().last()
        } else if let Some(exact) = pool.get_message_by_name(message) {
            Some(exact.parent_file())
        } else {
            let mut files: Vec<FileDescriptor> = Vec::new();
            for m in pool.all_messages().filter(|m| m.name() == message) {
                if !files.iter().any(|f| f.name() == m.parent_file().name()) {
                    files.push(m.parent_file());
                }
            }
            if files.len() > 1 {
                let names: Vec<&str> = files.iter().map(|f| f.name()).collect();
                return Err(format!(
                    "message {message:?} is defined in several files of the descriptor set ({}): give its full name",
                    names.join(", ")
                ));
            }
            files.pop()
        };
        let file = file.ok_or_else(|| {
            let names: Vec<String> =
                pool.all_messages().filter(|m| !m.is_map_entry()).map(|m| m.full_name().to_string()).collect();
            format!("the descriptor set has no message {message:?}; it has {}", names.join(", "))
        })?;
        self.by_id.write().expect("schemas lock poisoned").insert(PLAIN_ID, Arc::new(Entry::Readable(file)));
        Ok(())
    }

    /// Every record of schema `id` is a bad record, for `reason`.
    pub fn refuse(&self, id: u32, reason: String) {
        self.by_id.write().expect("schemas lock poisoned").insert(id, Arc::new(Entry::Refused(reason)));
    }

    pub fn known(&self, id: u32) -> bool {
        self.by_id.read().expect("schemas lock poisoned").contains_key(&id)
    }

    fn entry(&self, id: u32) -> Option<Arc<Entry>> {
        self.by_id.read().expect("schemas lock poisoned").get(&id).cloned()
    }

    /// The message of schema `id` at `indexes`, or why there is none.
    fn message(&self, id: u32, indexes: &[i64]) -> Result<Option<MessageDescriptor>, String> {
        match self.entry(id).as_deref() {
            None => Ok(None),
            Some(Entry::Refused(reason)) => Err(reason.clone()),
            Some(Entry::Readable(file)) => message_at(file, indexes).map(Some),
        }
    }

    /// Every value is a bare `message` (its full name; "" for the file's first) of the file
    /// registered under [`PLAIN_ID`], read without a frame. Returns its full name and indexes;
    /// an error when the file has no such message, or the values were named another one before.
    pub fn read_plain(&self, message: &str) -> Result<(String, Vec<i64>), String> {
        let entry = self.entry(PLAIN_ID);
        let Some(Entry::Readable(file)) = entry.as_deref() else {
            return Err("no .proto file is registered for plain values".into());
        };
        let found = if message.is_empty() {
            file.messages().next().map(|m| (m.full_name().to_string(), vec![0]))
        } else {
            let mut named = Vec::new();
            indexes_of(file.messages(), message, &mut Vec::new(), &mut named);
            // a full name is one message; a short one must name only one
            match named.iter().position(|(full, _)| full == message) {
                Some(exact) => Some(named.swap_remove(exact)),
                None if named.len() > 1 => {
                    let names: Vec<&str> = named.iter().map(|(full, _)| full.as_str()).collect();
                    return Err(format!(
                        "message {message:?} names several messages ({}): give its full name",
                        names.join(", ")
                    ));
                }
                None => named.pop(),
            }
        };
        let (name, indexes) = found.ok_or_else(|| {
            let names = all_messages(file.messages());
            format!("the .proto file has no message {message:?}; it has {}", names.join(", "))
        })?;
        if self.plain.get_or_init(|| indexes.clone()) != &indexes {
            return Err("plain values were already read as another message".into());
        }
        Ok((name, indexes))
    }

    /// A value as the JSON of its message: in the wire format, or a bare message of the plain
    /// type ([`Self::read_plain`]). `seen` keeps the messages looked up by this caller (one
    /// append's values mostly name one).
    pub fn transcode(&self, value: &[u8], seen: &mut Seen) -> Transcoded {
        let split = match self.plain.get() {
            Some(indexes) => Ok((PLAIN_ID, indexes.clone(), value)),
            None => split(value),
        };
        let (id, indexes, body) = match split {
            Ok(split) => split,
            Err(reason) => return Transcoded::Bad(reason),
        };
        let found = match seen.iter().find(|(i, x, _)| *i == id && *x == indexes) {
            Some((_, _, found)) => found.clone(),
            None => {
                let found = self.message(id, &indexes);
                if matches!(found, Ok(None)) {
                    return Transcoded::Unknown(id);
                }
                seen.push((id, indexes, found.clone()));
                found
            }
        };
        let descriptor = match found {
            Ok(Some(descriptor)) => descriptor,
            Ok(None) => return Transcoded::Unknown(id),
            Err(reason) => return Transcoded::Bad(format!("schema id {id}: {reason}")),
        };
        let message = match DynamicMessage::decode(descriptor.clone(), body) {
            Ok(message) => message,
            Err(e) => {
                return Transcoded::Bad(format!(
                    "not a valid {} message of schema id {id}: {e}",
                    descriptor.full_name()
                ))
            }
        };
        if let Some(field) = message.unknown_fields().next() {
            return Transcoded::Bad(format!(
                "the {} message of schema id {id} has field number {}, which its schema does not have; was it \
                 written with another schema?",
                descriptor.full_name(),
                field.number()
            ));
        }
        let options = SerializeOptions::new()
            .use_proto_field_name(true)
            .stringify_64_bit_integers(false)
            .skip_default_fields(false);
        let mut out = serde_json::Serializer::new(Vec::with_capacity(body.len() * 2));
        match message.serialize_with_options(&mut out, &options) {
            Ok(()) => Transcoded::Json(out.into_inner()),
            Err(e) => Transcoded::Bad(format!("the {} message cannot be written as JSON: {e}", descriptor.full_name())),
        }
    }

    /// [`Self::transcode`] of one value.
    pub fn transcode_one(&self, value: &[u8]) -> Transcoded {
        self.transcode(value, &mut Seen::new())
    }

    /// The columns of the message of schema `id` at `indexes`: (field name, column type).
    pub fn columns(&self, id: u32, indexes: &[i64]) -> Result<Vec<(String, String)>, String> {
        let descriptor = self.message(id, indexes)?.ok_or_else(|| format!("schema id {id} is not registered"))?;
        descriptor.fields().map(|f| Ok((f.name().to_string(), column_of(&f, f.name(), 0)?))).collect()
    }
}

/// (schema id, message indexes, the message's bytes) of a value in the wire format.
pub fn split(value: &[u8]) -> Result<(u32, Vec<i64>, &[u8]), String> {
    const NOT_FRAMED: &str = "the value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the \
                              message indexes, then the message): check the producer's serializer";
    if value.len() < 6 || value[0] != 0 {
        return Err(NOT_FRAMED.into());
    }
    let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
    let mut at = 5;
    let count = zigzag(value, &mut at).ok_or(NOT_FRAMED)?;
    if !(0..=64).contains(&count) {
        return Err(format!("{NOT_FRAMED} (it says {count} message indexes)"));
    }
    let mut indexes = Vec::with_capacity(count.max(1) as usize);
    for _ in 0..count {
        indexes.push(zigzag(value, &mut at).ok_or(NOT_FRAMED)?);
    }
    if indexes.is_empty() {
        indexes.push(0);
    }
    Ok((id, indexes, &value[at..]))
}

fn zigzag(buf: &[u8], at: &mut usize) -> Option<i64> {
    let mut raw: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *buf.get(*at)?;
        *at += 1;
        raw |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

/// The full name and indexes of each message `name` names among `messages` (nested ones too): by
/// its full name, or by its own name when `name` has no dot.
fn indexes_of(
    messages: impl Iterator<Item = MessageDescriptor>,
    name: &str,
    at: &mut Vec<i64>,
    found: &mut Vec<(String, Vec<i64>)>,
) {
    for (i, message) in messages.enumerate() {
        at.push(i as i64);
        if message.full_name() == name || message.name() == name && !name.contains('.') {
            found.push((message.full_name().to_string(), at.clone()));
        }
        indexes_of(message.child_messages(), name, at, found);
        at.pop();
    }
}

/// The full names of `messages` and of the messages nested in them (a map's entry type left out).
fn all_messages(messages: impl Iterator<Item = MessageDescriptor>) -> Vec<String> {
    messages
        .filter(|m| !m.is_map_entry())
        .flat_map(|m| std::iter::once(m.full_name().to_string()).chain(all_messages(m.child_messages())))
        .collect()
}

/// The message at `indexes`: the file's top-level message at the first, nested ones after.
fn message_at(file: &FileDescriptor, indexes: &[i64]) -> Result<MessageDescriptor, String> {
    let missing = || format!("the schema has no message at indexes {indexes:?}");
    let first = usize::try_from(indexes[0]).map_err(|_| missing())?;
    let mut message = file.messages().nth(first).ok_or_else(missing)?;
    for &i in &indexes[1..] {
        let i = usize::try_from(i).map_err(|_| missing())?;
        let child = message.child_messages().nth(i);
        message = child.ok_or_else(missing)?;
    }
    Ok(message)
}

fn column_of(field: &prost_reflect::FieldDescriptor, path: &str, depth: usize) -> Result<String, String> {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else { unreachable!("a map field's kind is its entry message") };
        let key = entry.map_entry_key_field();
        if key.kind() != Kind::String {
            return Err(format!(
                "field {path}: a map with {:?} keys; JSON writes its keys as text, and a column would not hold them \
                 as sent: only string keys",
                key.kind()
            ));
        }
        let value = entry.map_entry_value_field();
        return Ok(format!("map<string, {}>", kind_of(&value.kind(), &format!("{path}{{}}"), depth)?));
    }
    let one = kind_of(&field.kind(), path, depth)?;
    Ok(if field.is_list() { format!("list<{one}>") } else { one })
}

fn kind_of(kind: &Kind, path: &str, depth: usize) -> Result<String, String> {
    Ok(match kind {
        Kind::Double => "double".into(),
        Kind::Float => "float".into(),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => "int".into(),
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 | Kind::Uint32 | Kind::Fixed32 => "long".into(),
        Kind::Uint64 | Kind::Fixed64 => "decimal(20, 0)".into(),
        Kind::Bool => "boolean".into(),
        Kind::String | Kind::Enum(_) => "string".into(),
        Kind::Bytes => "binary".into(),
        Kind::Message(message) => return message_column(message, path, depth),
    })
}

fn message_column(message: &MessageDescriptor, path: &str, depth: usize) -> Result<String, String> {
    let wrapped = match message.full_name() {
        "google.protobuf.Timestamp" => Some("timestamptz"),
        "google.protobuf.DoubleValue" => Some("double"),
        "google.protobuf.FloatValue" => Some("float"),
        "google.protobuf.Int32Value" => Some("int"),
        "google.protobuf.Int64Value" | "google.protobuf.UInt32Value" => Some("long"),
        "google.protobuf.UInt64Value" => Some("decimal(20, 0)"),
        "google.protobuf.BoolValue" => Some("boolean"),
        "google.protobuf.StringValue" => Some("string"),
        "google.protobuf.BytesValue" => Some("binary"),
        name if name.starts_with("google.protobuf.") => {
            return Err(format!(
                "field {path}: a {name}, which no column type holds as sent; declare the table's columns"
            ))
        }
        _ => None,
    };
    if let Some(column) = wrapped {
        return Ok(column.into());
    }
    if depth >= MAX_DEPTH {
        return Err(format!("field {path}: nests messages more than {MAX_DEPTH} deep (a recursive message?)"));
    }
    if message.fields().len() == 0 {
        return Err(format!("field {path}: the message {} has no fields, so no column", message.full_name()));
    }
    let fields = message
        .fields()
        .map(|f| Ok(format!("{}: {}", f.name(), column_of(&f, &format!("{path}.{}", f.name()), depth + 1)?)))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(format!("struct<{}>", fields.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"
        syntax = "proto3";
        package shop;
        import "google/protobuf/timestamp.proto";
        import "google/protobuf/wrappers.proto";
        message Other { string x = 1; }
        message Order {
          int64 id = 1;
          string name = 2;
          double amount = 3;
          google.protobuf.Timestamp at = 4;
          repeated string tags = 5;
          map<string, int64> counts = 6;
          Kind kind = 7;
          Geo geo = 8;
          bytes raw = 9;
          uint64 big = 10;
          google.protobuf.Int32Value maybe = 11;
          enum Kind { A = 0; B = 1; }
          message Geo { string city = 1; int32 zone = 2; }
        }
    "#;

    fn frame(id: u32, indexes: &[u8], body: &[u8]) -> Vec<u8> {
        [&[0u8][..], &id.to_be_bytes(), indexes, body].concat()
    }

    /// field 1 (id) = 7, field 2 (name) = "ab", field 8 (geo) = {city: "Oslo"}
    const ORDER: &[u8] = &[0x08, 7, 0x12, 2, b'a', b'b', 0x42, 6, 0x0a, 4, b'O', b's', b'l', b'o'];

    #[test]
    fn a_message_becomes_the_json_of_every_field_with_its_columns_named() {
        let schemas = ProtoSchemas::default();
        schemas.register(3, SCHEMA).unwrap();
        // indexes [1]: the file's second message, Order (count 1, index 1, zig-zag encoded)
        let Transcoded::Json(json) = schemas.transcode_one(&frame(3, &[2, 2], ORDER)) else { panic!() };
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(got["id"], 7);
        assert_eq!(got["name"], "ab");
        assert_eq!(got["geo"], serde_json::json!({"city": "Oslo", "zone": 0}));
        assert_eq!(got["amount"], 0.0);
        assert_eq!(got["kind"], "A");
        assert_eq!(got["tags"], serde_json::json!([]));
        assert_eq!(schemas.transcode_one(&frame(4, &[0], ORDER)), Transcoded::Unknown(4));
        let columns = schemas.columns(3, &[1]).unwrap();
        let typed: Vec<String> = columns.iter().map(|(n, t)| format!("{n} {t}")).collect();
        assert_eq!(
            typed,
            [
                "id long",
                "name string",
                "amount double",
                "at timestamptz",
                "tags list<string>",
                "counts map<string, long>",
                "kind string",
                "geo struct<city: string, zone: int>",
                "raw binary",
                "big decimal(20, 0)",
                "maybe int"
            ]
        );
        assert_eq!(schemas.columns(3, &[0]).unwrap(), [("x".to_string(), "string".to_string())]);
        assert_eq!(schemas.columns(3, &[1, 0]).unwrap().len(), 2); // Order.Geo
    }

    #[test]
    fn what_cannot_be_read_is_named() {
        let schemas = ProtoSchemas::default();
        schemas.register(3, SCHEMA).unwrap();
        let bad = |value: &[u8]| match schemas.transcode_one(value) {
            Transcoded::Bad(reason) => reason,
            other => panic!("{other:?}"),
        };
        assert!(bad(br#"{"id": 1}"#).contains("not in the Confluent wire format"));
        assert!(bad(&frame(3, &[2, 2], &[0x08])).contains("not a valid shop.Order message"));
        assert!(bad(&frame(3, &[2, 2], &[0xa0, 0x06, 1])).contains("field number 100"));
        assert!(bad(&frame(3, &[2, 18], ORDER)).contains("no message at indexes [9]"));
        schemas.refuse(5, "a JSON schema, not Protobuf".into());
        assert!(bad(&frame(5, &[0], ORDER)).contains("schema id 5: a JSON schema"));
        assert!(compile("message {").unwrap_err().contains("does not compile"));
        let recursive = "syntax = \"proto3\"; message Node { Node next = 1; }";
        schemas.register(6, recursive).unwrap();
        assert!(schemas.columns(6, &[0]).unwrap_err().contains("recursive"));
        let int_keys = "syntax = \"proto3\"; message M { map<int32, string> m = 1; }";
        schemas.register(7, int_keys).unwrap();
        assert!(schemas.columns(7, &[0]).unwrap_err().contains("only string keys"));
    }

    #[test]
    fn plain_values_are_bare_messages_of_the_type_named() {
        let schemas = ProtoSchemas::default();
        schemas.register(PLAIN_ID, SCHEMA).unwrap();
        let none = schemas.read_plain("shop.Missing").unwrap_err();
        assert!(none.contains("no message \"shop.Missing\"; it has shop.Other, shop.Order, shop.Order.Geo"), "{none}");
        assert_eq!(schemas.read_plain("Order").unwrap(), ("shop.Order".to_string(), vec![1]));
        let Transcoded::Json(json) = schemas.transcode_one(ORDER) else { panic!() };
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!((got["id"].clone(), got["geo"]["city"].clone()), (serde_json::json!(7), serde_json::json!("Oslo")));
        assert!(schemas.read_plain("shop.Other").unwrap_err().contains("already read as another message"));
        let Transcoded::Bad(reason) = schemas.transcode_one(&[0xff, 0xff]) else { panic!() };
        assert!(reason.starts_with("not a valid shop.Order message of schema id 0"), "{reason}");
        let nested = ProtoSchemas::default();
        nested.register(PLAIN_ID, SCHEMA).unwrap();
        // the map field's entry type (CountsEntry) comes first among Order's nested types
        assert_eq!(nested.read_plain("shop.Order.Geo").unwrap().1, vec![1, 1]);
        let twice = ProtoSchemas::default();
        let text =
            "syntax = \"proto3\"; package p; message E { message O { int32 a = 1; } } message O { int32 b = 1; }";
        twice.register(PLAIN_ID, text).unwrap();
        let why = twice.read_plain("O").unwrap_err();
        assert!(why.contains("names several messages (p.E.O, p.O): give its full name"), "{why}");
        assert_eq!(twice.read_plain("p.O").unwrap().1, vec![1]);
        let first = ProtoSchemas::default();
        first.register(PLAIN_ID, SCHEMA).unwrap();
        assert_eq!(first.read_plain("").unwrap(), ("shop.Other".to_string(), vec![0]));
    }

    /// `text` compiled with its imports into a descriptor set, as protoc writes one.
    fn descriptor_set(text: &str) -> Vec<u8> {
        let file = compile(text).unwrap();
        let pool = file.parent_pool();
        assert!(pool.files().count() > 1, "the imports are in the set too");
        pool.encode_to_vec()
    }

    #[test]
    fn plain_values_read_with_a_descriptor_set_as_with_the_proto_source() {
        let set = descriptor_set(SCHEMA);
        let schemas = ProtoSchemas::default();
        schemas.register_descriptor_set(&set, "Order").unwrap();
        assert_eq!(schemas.read_plain("Order").unwrap(), ("shop.Order".to_string(), vec![1]));
        let Transcoded::Json(json) = schemas.transcode_one(ORDER) else { panic!() };
        let got: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(got["geo"]["city"], serde_json::json!("Oslo"));
        // "" is the last file's first message: the schema's own file comes after its imports
        let last = ProtoSchemas::default();
        last.register_descriptor_set(&set, "").unwrap();
        assert_eq!(last.read_plain("").unwrap().0, "shop.Other");
        // a message of an imported file is found in its file
        let imported = ProtoSchemas::default();
        imported.register_descriptor_set(&set, "google.protobuf.Timestamp").unwrap();
        assert_eq!(imported.read_plain("google.protobuf.Timestamp").unwrap().1, vec![0]);
        let none = ProtoSchemas::default().register_descriptor_set(&set, "shop.Missing").unwrap_err();
        assert!(none.contains("no message \"shop.Missing\"; it has") && none.contains("shop.Order"), "{none}");
        let text = ProtoSchemas::default().register_descriptor_set(SCHEMA.as_bytes(), "").unwrap_err();
        assert!(
            text.contains("cannot be read as a Protobuf descriptor set") && text.contains("ending in .proto"),
            "{text}"
        );
    }
}
