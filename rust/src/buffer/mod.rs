//! The record buffer: Kafka record values (JSON) decoded into Arrow record batches with a fixed
//! target schema, plus optional Kafka metadata columns. Pure Rust, no pyo3.
//!
//! Each `append` decodes one batch of records from one topic-partition. A record that cannot be
//! decoded never fails the batch: it comes back as a [`RecordError`] and the rest are kept.
//! `drain` hands everything buffered so far over as one record batch.

use std::sync::Arc;

use arrow::array::{ArrayRef, BinaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::array::TimestampMillisecondArray;
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::reader::{Decoder, ReaderBuilder};

/// Names of the optional Kafka metadata columns, in the order the Python side adds them.
pub const META_TOPIC: &str = "_kafka_topic";
pub const META_PARTITION: &str = "_kafka_partition";
pub const META_OFFSET: &str = "_kafka_offset";
pub const META_TIMESTAMP: &str = "_kafka_timestamp";
pub const META_KEY: &str = "_kafka_key";
pub const META_COLUMNS: [&str; 5] = [META_TOPIC, META_PARTITION, META_OFFSET, META_TIMESTAMP, META_KEY];

/// One record that could not be turned into a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Position of the record in the `append` call.
    pub index: usize,
    pub partition: i32,
    pub offset: i64,
    /// Dotted path of the offending field, empty when the record as a whole is at fault.
    pub field: String,
    pub reason: String,
}

/// One batch of records from one topic-partition, as handed to [`JsonBuffer::append`].
pub struct Records<'a, V: AsRef<[u8]>, K: AsRef<[u8]>> {
    pub topic: &'a str,
    pub partition: i32,
    pub offsets: &'a [i64],
    pub timestamps_ms: &'a [i64],
    pub keys: &'a [Option<K>],
    pub values: &'a [V],
}

#[derive(Debug)]
pub struct JsonBuffer {
    schema: SchemaRef,
    /// The part of `schema` that is decoded from the JSON value.
    value_schema: SchemaRef,
    metadata_columns: bool,
    batches: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
}

impl JsonBuffer {
    /// `schema` is the table's Arrow schema. With `metadata_columns`, the five `_kafka_*` columns
    /// must be in it; they are filled from the record metadata, not from the value.
    pub fn new(schema: SchemaRef, metadata_columns: bool) -> Result<Self, ArrowError> {
        let value_fields: Vec<Arc<Field>> = schema
            .fields()
            .iter()
            .filter(|f| !(metadata_columns && META_COLUMNS.contains(&f.name().as_str())))
            .cloned()
            .collect();
        if metadata_columns {
            for name in META_COLUMNS {
                schema.field_with_name(name).map_err(|_| {
                    ArrowError::SchemaError(format!(
                        "metadata_columns is on but the schema has no column {name:?}; add it to the table or turn metadata columns off"
                    ))
                })?;
            }
        }
        let value_schema = Arc::new(Schema::new(value_fields));
        // Fail early on a schema the JSON decoder cannot handle.
        ReaderBuilder::new(value_schema.clone()).build_decoder()?;
        Ok(Self { schema, value_schema, metadata_columns, batches: Vec::new(), rows: 0, bytes: 0 })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows buffered and not yet drained.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Bytes held by the buffered Arrow arrays.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Decode one batch of records; returns the records that could not be decoded.
    pub fn append<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &mut self,
        records: &Records<'_, V, K>,
    ) -> Result<Vec<RecordError>, ArrowError> {
        let n = records.values.len();
        if records.offsets.len() != n || records.timestamps_ms.len() != n || records.keys.len() != n {
            return Err(ArrowError::InvalidArgumentError(format!(
                "offsets, timestamps, keys and values must have the same length (got {}, {}, {}, {n})",
                records.offsets.len(),
                records.timestamps_ms.len(),
                records.keys.len()
            )));
        }
        let mut errors = Vec::new();
        let mut good: Vec<usize> = Vec::with_capacity(n);
        let mut rewritten: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, value) in records.values.iter().enumerate() {
            match check_object(value.as_ref()) {
                Ok(None) => good.push(i),
                Ok(Some(utf8)) => {
                    good.push(i);
                    rewritten.push((i, utf8));
                }
                Err(reason) => errors.push(record_error(records, i, String::new(), reason)),
            }
        }
        let values = Values { original: records.values, rewritten: &rewritten };
        let decoded = match self.decode_all(&values, &good) {
            Ok(batch) => batch,
            Err(_) => {
                // Slow path: find the records at fault one by one, keep the others.
                let mut kept = Vec::with_capacity(good.len());
                for &i in &good {
                    match self.decode_all(&values, &[i]) {
                        Ok(_) => kept.push(i),
                        Err(e) => {
                            let (field, reason) = split_field(&e.to_string());
                            errors.push(record_error(records, i, field, reason));
                        }
                    }
                }
                errors.sort_by_key(|e| e.index);
                good = kept;
                self.decode_all(&values, &good)?
            }
        };
        if decoded.num_rows() > 0 {
            let batch = self.with_metadata(decoded, records, &good)?;
            self.rows += batch.num_rows();
            self.bytes += batch.get_array_memory_size();
            self.batches.push(batch);
        }
        Ok(errors)
    }

    /// Everything buffered as one record batch (None when empty); the buffer is empty afterwards.
    pub fn drain(&mut self) -> Result<Option<RecordBatch>, ArrowError> {
        if self.batches.is_empty() {
            return Ok(None);
        }
        let batch = concat_batches(&self.schema, &self.batches)?;
        self.batches.clear();
        self.rows = 0;
        self.bytes = 0;
        Ok(Some(batch))
    }

    /// Drop everything buffered (after a rebalance the records are read again).
    pub fn clear(&mut self) {
        self.batches.clear();
        self.rows = 0;
        self.bytes = 0;
    }

    fn decoder(&self, capacity: usize) -> Result<Decoder, ArrowError> {
        ReaderBuilder::new(self.value_schema.clone()).with_batch_size(capacity.max(1)).build_decoder()
    }

    fn decode_all<V: AsRef<[u8]>>(&self, values: &Values<'_, V>, indices: &[usize]) -> Result<RecordBatch, ArrowError> {
        let mut decoder = self.decoder(indices.len())?;
        for &i in indices {
            let value = values.get(i);
            let mut pos = 0;
            while pos < value.len() {
                pos += decoder.decode(&value[pos..])?;
            }
            decoder.decode(b"\n")?;
        }
        Ok(decoder.flush()?.unwrap_or_else(|| RecordBatch::new_empty(self.value_schema.clone())))
    }

    fn with_metadata<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        decoded: RecordBatch,
        records: &Records<'_, V, K>,
        rows: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        let mut next_value_column = 0;
        for field in self.schema.fields() {
            let name = field.name().as_str();
            if !self.metadata_columns || !META_COLUMNS.contains(&name) {
                columns.push(decoded.column(next_value_column).clone());
                next_value_column += 1;
                continue;
            }
            let column: ArrayRef = match name {
                META_TOPIC => Arc::new(StringArray::from(vec![records.topic; rows.len()])),
                META_PARTITION => Arc::new(Int32Array::from(vec![records.partition; rows.len()])),
                META_OFFSET => Arc::new(Int64Array::from_iter_values(rows.iter().map(|&i| records.offsets[i]))),
                META_TIMESTAMP => Arc::new(
                    TimestampMillisecondArray::from_iter_values(rows.iter().map(|&i| records.timestamps_ms[i]))
                        .with_timezone("UTC"),
                ),
                _ => Arc::new(BinaryArray::from_iter(rows.iter().map(|&i| records.keys[i].as_ref().map(|k| k.as_ref())))),
            };
            columns.push(if column.data_type() == field.data_type() { column } else { cast(&column, field.data_type())? });
        }
        RecordBatch::try_new(self.schema.clone(), columns)
    }
}

fn record_error<V: AsRef<[u8]>, K: AsRef<[u8]>>(
    records: &Records<'_, V, K>,
    index: usize,
    field: String,
    reason: String,
) -> RecordError {
    RecordError { index, partition: records.partition, offset: records.offsets[index], field, reason }
}

/// The values of one `append` call, some of them rewritten by [`check_object`].
struct Values<'a, V> {
    original: &'a [V],
    /// Sorted by index.
    rewritten: &'a [(usize, Vec<u8>)],
}

impl<V: AsRef<[u8]>> Values<'_, V> {
    fn get(&self, i: usize) -> &[u8] {
        match self.rewritten.binary_search_by_key(&i, |(j, _)| *j) {
            Ok(k) => &self.rewritten[k].1,
            Err(_) => self.original[i].as_ref(),
        }
    }
}

/// A value must be one JSON object. Returns a rewritten value when arrow-json would misread it.
///
/// arrow-json 60 decodes a `\uXXXX\uXXXX` surrogate pair whose high half is D840 or above to the
/// wrong character (it ORs where it must add), silently corrupting text such as U+20000. Values
/// with an escaped surrogate are re-serialized by serde_json as plain UTF-8 first.
fn check_object(value: &[u8]) -> Result<Option<Vec<u8>>, String> {
    match serde_json::from_slice::<serde_json::Value>(value) {
        Ok(v @ serde_json::Value::Object(_)) => {
            Ok(if has_escaped_surrogate(value) { Some(serde_json::to_vec(&v).map_err(|e| e.to_string())?) } else { None })
        }
        Ok(other) => Err(format!("value is JSON but not an object (found {})", json_kind(&other))),
        Err(e) => Err(format!("value is not valid JSON: {e}")),
    }
}

fn has_escaped_surrogate(value: &[u8]) -> bool {
    value.windows(4).any(|w| w[0] == b'\\' && w[1] == b'u' && (w[2] | 0x20) == b'd' && matches!(w[3] | 0x20, b'8'..=b'9' | b'a'..=b'f'))
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

/// arrow-json names the field in its messages as `whilst decoding field 'x': ...`; nested fields
/// nest the phrase. Returns (dotted path, innermost reason).
fn split_field(message: &str) -> (String, String) {
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
    (path.join("."), if reason.is_empty() { message.to_string() } else { reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Int64Type, TimeUnit};

    fn schema(meta: bool) -> SchemaRef {
        let mut fields = vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new(
                "inner",
                DataType::Struct(vec![Field::new("score", DataType::Float64, true)].into()),
                true,
            ),
        ];
        if meta {
            fields.push(Field::new(META_TOPIC, DataType::Utf8, false));
            fields.push(Field::new(META_PARTITION, DataType::Int32, false));
            fields.push(Field::new(META_OFFSET, DataType::Int64, false));
            fields.push(Field::new(META_TIMESTAMP, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false));
            fields.push(Field::new(META_KEY, DataType::Binary, true));
        }
        Arc::new(Schema::new(fields))
    }

    fn append(buf: &mut JsonBuffer, offsets: &[i64], values: &[&str]) -> Vec<RecordError> {
        let timestamps: Vec<i64> = offsets.iter().map(|o| 1_700_000_000_000 + o).collect();
        let keys: Vec<Option<Vec<u8>>> = offsets.iter().map(|o| if o % 2 == 0 { Some(o.to_string().into_bytes()) } else { None }).collect();
        let records = Records { topic: "t", partition: 3, offsets, timestamps_ms: &timestamps, keys: &keys, values };
        buf.append(&records).unwrap()
    }

    #[test]
    fn decodes_values_and_metadata() {
        let mut buf = JsonBuffer::new(schema(true), true).unwrap();
        let errors = append(&mut buf, &[10, 11], &[r#"{"id": 1, "name": "a", "inner": {"score": 1.5}}"#, r#"{"id": 2, "extra": true}"#]);
        assert!(errors.is_empty());
        assert_eq!(buf.rows(), 2);
        assert!(buf.bytes() > 0);
        let batch = buf.drain().unwrap().unwrap();
        assert_eq!(buf.rows(), 0);
        assert_eq!(batch.schema(), schema(true));
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
        assert_eq!(batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values(), &[10, 11]);
        assert_eq!(batch.column_by_name(META_PARTITION).unwrap().as_primitive::<arrow::datatypes::Int32Type>().value(1), 3);
        let ts = batch.column_by_name(META_TIMESTAMP).unwrap().as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_010_000);
        let keys = batch.column_by_name(META_KEY).unwrap().as_binary::<i32>();
        assert_eq!(keys.value(0), b"10");
        assert!(keys.is_null(1));
        assert!(buf.drain().unwrap().is_none());
    }

    #[test]
    fn bad_records_come_back_as_errors_and_the_rest_is_kept() {
        let mut buf = JsonBuffer::new(schema(false), false).unwrap();
        let errors = append(
            &mut buf,
            &[5, 6, 7, 8, 9],
            &[r#"{"id": 1}"#, "{not json", r#"{"id": "x"}"#, "[1,2]", r#"{"id": 4, "inner": {"score": "high"}}"#],
        );
        let summary: Vec<(usize, i64, &str)> = errors.iter().map(|e| (e.index, e.offset, e.field.as_str())).collect();
        assert_eq!(summary, vec![(1, 6, ""), (2, 7, "id"), (3, 8, ""), (4, 9, "inner.score")]);
        assert!(errors[0].reason.contains("not valid JSON"), "{}", errors[0].reason);
        assert!(errors[2].reason.contains("not an object"), "{}", errors[2].reason);
        assert!(errors[3].reason.contains("high"), "{}", errors[3].reason);
        let batch = buf.drain().unwrap().unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 1);
    }

    #[test]
    fn missing_required_field_is_a_record_error() {
        let mut buf = JsonBuffer::new(schema(false), false).unwrap();
        let errors = append(&mut buf, &[0, 1], &[r#"{"name": "no id"}"#, r#"{"id": 7}"#]);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].offset, 0);
        assert_eq!(buf.rows(), 1);
    }

    #[test]
    fn metadata_columns_must_be_in_the_schema() {
        let err = JsonBuffer::new(schema(false), true).unwrap_err();
        assert!(err.to_string().contains("_kafka_topic"), "{err}");
    }

    #[test]
    fn mismatched_lengths_are_rejected() {
        let mut buf = JsonBuffer::new(schema(false), false).unwrap();
        let keys: Vec<Option<Vec<u8>>> = vec![None];
        let records = Records { topic: "t", partition: 0, offsets: &[1, 2], timestamps_ms: &[0], keys: &keys, values: &["{}"] };
        assert!(buf.append(&records).is_err());
    }

    #[test]
    fn escaped_surrogate_pairs_decode_to_the_right_character() {
        let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
        let mut buf = JsonBuffer::new(schema, false).unwrap();
        // U+10000, U+20000 (high half D840, misread by arrow-json 60), U+E0100, and plain text
        let values = [r#"{"name": "\ud800\udc00"}"#, r#"{"name": "\uD840\uDC00"}"#, r#"{"name": "\udb40\udd00"}"#, r#"{"name": "a\u00e9"}"#];
        assert!(append(&mut buf, &[0, 1, 2, 3], &values).is_empty());
        let batch = buf.drain().unwrap().unwrap();
        let names: Vec<&str> = batch.column(0).as_string::<i32>().iter().map(|s| s.unwrap()).collect();
        assert_eq!(names, vec!["\u{10000}", "\u{20000}", "\u{E0100}", "a\u{e9}"]);
    }

    #[test]
    fn rewritten_values_keep_doubles_bit_for_bit() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, true)]));
        let mut buf = JsonBuffer::new(schema, false).unwrap();
        // the escaped surrogate in the key sends the value through the serde_json rewrite
        assert!(append(&mut buf, &[0], &[r#"{"\ud800\udc00": 0, "x": 5.1085747145855235e-182}"#]).is_empty());
        let batch = buf.drain().unwrap().unwrap();
        assert_eq!(batch.column(0).as_primitive::<arrow::datatypes::Float64Type>().value(0), 5.1085747145855235e-182);
    }

    #[test]
    fn split_field_reads_nested_paths() {
        let (f, r) = split_field("Json error: whilst decoding field 'a': whilst decoding field 'b': expected i64 got \"x\"");
        assert_eq!(f, "a.b");
        assert_eq!(r, "expected i64 got \"x\"");
    }
}
