//! The record buffer: Kafka record values (JSON) decoded into Arrow record batches with a fixed
//! target schema, plus optional Kafka metadata columns. Pure Rust, no pyo3.
//!
//! `append` takes `&self`: decoding runs outside any lock, and the decoded batch is pushed to one
//! of several shards (by partition), each a lock-free list ([`shard::Shard`]): appends never take
//! a lock, not even appends of one partition, and a drain never blocks an append (an append that
//! lands during a drain stays for the next one). Memory is accounted exactly (the Arrow
//! buffers held plus the keys kept for deduplication) against an optional hard cap; an append
//! that would pass it is refused whole with [`BufferError::Full`]. A record that cannot be
//! decoded never fails the batch: it comes back as a [`RecordError`] and the rest are kept.

mod align;
pub mod avro;
mod decode;
mod decoders;
mod dedupe;
mod fast;
mod headers;
mod key_formats;
mod keys;
pub mod shard;
mod structs;
mod temporal;
mod unique;
mod validate;

pub use align::ALIGNMENT;
pub use headers::{HeaderColumns, Headers};
pub use key_formats::KeySchemas;
pub use keys::KeyColumns;
pub(crate) use unique::twice;
pub(crate) use validate::explain_syntax;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use arrow::array::TimestampMillisecondArray;
use arrow::array::{ArrayRef, BinaryArray, Int32Array, Int64Array, RecordBatch, StringArray};
use arrow::compute::{cast, concat_batches};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::reader::ReaderBuilder;

use crate::kafka::Fetched;
use shard::Shard;
use validate::Checked;

/// Names of the optional Kafka metadata columns.
pub const META_TOPIC: &str = "_kafka_topic";
pub const META_PARTITION: &str = "_kafka_partition";
pub const META_OFFSET: &str = "_kafka_offset";
pub const META_TIMESTAMP: &str = "_kafka_timestamp";
pub const META_KEY: &str = "_kafka_key";
pub const META_COLUMNS: [&str; 5] = [META_TOPIC, META_PARTITION, META_OFFSET, META_TIMESTAMP, META_KEY];

const NOT_FRAMED: &str = "the value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, then \
     the JSON): with values.format = \"json-schema-confluent\" every value must be written by a JSON Schema \
     serializer through the registry";

/// `records` with other values (as many, in the same order).
fn with_values<'a, V: AsRef<[u8]>, K: AsRef<[u8]>, W: AsRef<[u8]>>(
    records: &Records<'a, V, K>,
    values: &'a [W],
) -> Records<'a, W, K> {
    Records {
        topic: records.topic,
        partition: records.partition,
        offsets: records.offsets,
        timestamps_ms: records.timestamps_ms,
        keys: records.keys,
        values,
        headers: records.headers,
    }
}

/// The JSON text of a value in the Confluent wire format; None when it has no frame.
pub fn framed_json(value: &[u8]) -> Option<&[u8]> {
    use avro::{CONFLUENT_HEADER, CONFLUENT_MAGIC};
    (value.len() > CONFLUENT_HEADER && value[0] == CONFLUENT_MAGIC).then(|| &value[CONFLUENT_HEADER..])
}

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

/// A field in a record that the schema does not have (reported with [`UnknownFields::Report`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownField {
    pub index: usize,
    pub offset: i64,
    pub path: String,
}

#[derive(Debug, Default)]
pub struct Appended {
    pub rows: usize,
    pub errors: Vec<RecordError>,
    pub unknown_fields: Vec<UnknownField>,
    /// Avro: writer fields the table has no column for, left out of the rows kept (one per field
    /// per row; the writer schema's registration says how many).
    pub fields_ignored: usize,
    /// Records the table's transforms filtered out: no row, no error.
    pub filtered: usize,
}

#[derive(Debug)]
pub enum BufferError {
    /// Appending would pass the byte cap; nothing was appended. Drain, then try again.
    Full {
        needed: usize,
        used: usize,
        cap: usize,
    },
    /// Avro or Protobuf values name schemas the buffer has not been given; nothing was appended.
    /// Register them (or refuse them), then append again.
    UnknownSchemas(Vec<u32>),
    /// Keys whose fields fill columns name schemas the key schemas ([`Options::key_schemas`])
    /// have not been given; nothing was appended. Register them (or refuse them), then append again.
    UnknownKeySchemas(Vec<u32>),
    Arrow(ArrowError),
}

impl std::fmt::Display for BufferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BufferError::Full { needed, used, cap } => write!(
                f,
                "buffer full: appending needs {needed} bytes, {used} of {cap} are in use; drain the buffer first"
            ),
            BufferError::UnknownSchemas(ids) => {
                write!(f, "unknown writer schema id(s) {ids:?}; register them, then append again")
            }
            BufferError::UnknownKeySchemas(ids) => {
                write!(f, "unknown key schema id(s) {ids:?}; register them, then append again")
            }
            BufferError::Arrow(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BufferError {}

impl From<ArrowError> for BufferError {
    fn from(e: ArrowError) -> Self {
        BufferError::Arrow(e)
    }
}

/// One batch of records from one topic-partition, as handed to [`JsonBuffer::append`].
pub struct Records<'a, V: AsRef<[u8]>, K: AsRef<[u8]>> {
    pub topic: &'a str,
    pub partition: i32,
    pub offsets: &'a [i64],
    pub timestamps_ms: &'a [i64],
    pub keys: &'a [Option<K>],
    pub values: &'a [V],
    /// Each record's headers; needed only by a buffer with header columns.
    pub headers: Option<&'a [Headers<'a>]>,
}

/// What a field that the schema does not have does to its record. There is no way to drop such a
/// field without a word: a value is stored as sent, or its record is a bad record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnknownFields {
    /// The record is a bad record naming the field's path, and the column it differs from only
    /// in case when there is one (arrow-json's strict mode, at no cost).
    #[default]
    Reject,
    /// The row is kept without the field, which is listed in [`Appended::unknown_fields`] (each
    /// value is parsed once more to find them; the single pass is off). A field that differs from
    /// a column only in case is still a bad record: it would land as NULL.
    Report,
}

impl std::str::FromStr for UnknownFields {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "reject" => Ok(Self::Reject),
            "report" => Ok(Self::Report),
            other => Err(format!("unknown_fields must be \"reject\" or \"report\", not {other:?}")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Fill the five `_kafka_*` columns (they must be in the schema) from record metadata.
    pub metadata_columns: bool,
    /// Hard cap on buffered bytes; `None` for no cap.
    pub max_bytes: Option<usize>,
    /// Number of shards; partitions map to `partition % shards`.
    pub shards: usize,
    /// A field the schema does not have: a bad record (the default), or reported with the row kept.
    pub unknown_fields: UnknownFields,
    /// Keep only the last record per Kafka key, ordered by (partition, offset), at drain.
    pub dedupe_by_key: bool,
    /// A field that differs from a column only in case lands in that column (each value is
    /// parsed once more to find such fields); two spellings of one column in a record are an error.
    pub fold_case: bool,
    /// Decode plain values in one pass (`fast.rs`) where the schema allows it; off, every value
    /// goes through arrow-json (the same rows, slower: kept for tests and benchmarks).
    pub single_pass: bool,
    /// Columns filled from a header each: (column, header name).
    pub header_columns: Vec<(String, Vec<u8>)>,
    /// The `map<string, binary>` column filled with every header of a record.
    pub headers_column: Option<String>,
    /// Columns filled from the record key each: (column, the key's field as a dotted path; "" for
    /// the whole key).
    pub key_columns: Vec<(String, String)>,
    /// How keys in the Confluent wire format read (Avro, Protobuf, JSON Schema), by schema id,
    /// for the key columns that take a field; a key whose id is not registered refuses the append
    /// ([`BufferError::UnknownKeySchemas`]). None: such a key must be JSON after its frame.
    pub key_schemas: Option<Arc<KeySchemas>>,
    /// Every value is JSON in the Confluent wire format (magic byte 0, a big-endian u32 schema
    /// id, the JSON text: a JSON Schema serializer's framing); a value without it is a bad record.
    pub confluent: bool,
    /// Every value is Protobuf in the Confluent wire format, read with these schemas into JSON
    /// first; a value whose schema id is not registered refuses the append
    /// ([`BufferError::UnknownSchemas`]).
    pub protobuf: Option<Arc<crate::protobuf::ProtoSchemas>>,
    /// The table's transforms, applied to each value's JSON before it is decoded: a value they
    /// filter out is no row and no error (counted in [`Appended::filtered`]).
    pub transforms: Option<Arc<crate::transform::Transforms>>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            metadata_columns: false,
            max_bytes: None,
            shards: 16,
            unknown_fields: UnknownFields::Reject,
            dedupe_by_key: false,
            fold_case: false,
            single_pass: true,
            header_columns: Vec::new(),
            headers_column: None,
            key_columns: Vec::new(),
            key_schemas: None,
            confluent: false,
            protobuf: None,
            transforms: None,
        }
    }
}

/// A decoded batch and what deduplication needs to know about its rows.
#[derive(Debug)]
struct Entry {
    batch: RecordBatch,
    partition: i32,
    offsets: Vec<i64>,
    keys: Option<BinaryArray>,
    bytes: usize,
}

#[derive(Debug)]
pub struct JsonBuffer {
    schema: SchemaRef,
    /// The part of `schema` that is decoded from the JSON value.
    value_schema: SchemaRef,
    options: Options,
    /// The columns filled from the records' headers.
    headers: HeaderColumns,
    /// The columns filled from the records' keys.
    keys: KeyColumns,
    /// The single-pass decoder, when the schema and options allow it (`fast.rs`).
    fast: Option<fast::FastDecoder>,
    /// Entries of each shard in append order (a partition's entries all go to one shard).
    shards: Vec<Shard<Entry>>,
    /// Rows and bytes of the entries held, counted before an entry can be drained (so a
    /// concurrent drain never subtracts what was not added) and uncounted after it was.
    rows: AtomicUsize,
    bytes: AtomicUsize,
    /// Rows the single pass decoded (the rest went through arrow-json).
    single_pass_rows: AtomicUsize,
}

impl JsonBuffer {
    pub fn new(schema: SchemaRef, options: Options) -> Result<Self, ArrowError> {
        if options.metadata_columns {
            for name in META_COLUMNS {
                schema.field_with_name(name).map_err(|_| {
                    ArrowError::SchemaError(format!(
                        "metadata_columns is on but the schema has no column {name:?}; add it to the table or turn metadata columns off"
                    ))
                })?;
            }
        }
        if options.shards == 0 {
            return Err(ArrowError::InvalidArgumentError("shards must be at least 1".into()));
        }
        let headers = HeaderColumns::new(&schema, &options.header_columns, options.headers_column.as_deref())?;
        let keys = KeyColumns::new(&schema, &options.key_columns, options.key_schemas.clone())?;
        let value_fields: Vec<Arc<Field>> = schema
            .fields()
            .iter()
            .enumerate()
            .filter(|(i, f)| {
                !(headers.holds(*i)
                    || keys.holds(*i)
                    || options.metadata_columns && META_COLUMNS.contains(&f.name().as_str()))
            })
            .map(|(_, f)| f.clone())
            .collect();
        let value_schema = Arc::new(Schema::new(value_fields));
        // Fail early on a schema the JSON decoder cannot handle.
        ReaderBuilder::new(value_schema.clone()).with_decoder_factory(Arc::new(decoders::Factory)).build_decoder()?;
        let shards = (0..options.shards).map(|_| Shard::new()).collect();
        let reject = options.unknown_fields == UnknownFields::Reject;
        let fast = (options.single_pass && reject)
            .then(|| fast::FastDecoder::for_fields(value_schema.fields(), reject, options.fold_case))
            .flatten();
        Ok(Self {
            schema,
            value_schema,
            options,
            headers,
            keys,
            fast,
            shards,
            rows: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            single_pass_rows: AtomicUsize::new(0),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows buffered and not yet drained.
    pub fn rows(&self) -> usize {
        self.rows.load(Ordering::Acquire)
    }

    /// Bytes held: the buffered Arrow arrays plus keys kept for deduplication.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Acquire)
    }

    /// Rows decoded by the single pass so far (`fast.rs`).
    pub fn single_pass_rows(&self) -> usize {
        self.single_pass_rows.load(Ordering::Relaxed)
    }

    pub fn max_bytes(&self) -> Option<usize> {
        self.options.max_bytes
    }

    /// Decode one batch of records of one partition. Safe to call from several threads at once.
    pub fn append<V: AsRef<[u8]>, K: AsRef<[u8]>>(&self, records: &Records<'_, V, K>) -> Result<Appended, BufferError> {
        if let Some(schemas) = &self.options.protobuf {
            return self.append_protobuf(records, schemas);
        }
        if !self.options.confluent {
            return self.append_text(records, Vec::new());
        }
        // the JSON after each value's frame; a value without one is decoded as nothing and refused
        let mut unframed = Vec::new();
        let values: Vec<&[u8]> = records
            .values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                framed_json(v.as_ref()).unwrap_or_else(|| {
                    unframed.push((i, String::new(), NOT_FRAMED.to_string()));
                    b"{}"
                })
            })
            .collect();
        self.append_text(&with_values(records, &values), unframed)
    }

    /// [`Self::append`] of JSON text, each value through the table's transforms first (when it
    /// has any); the records at `refused` (ascending) are bad records already.
    fn append_text<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        refused: Vec<(usize, String, String)>,
    ) -> Result<Appended, BufferError> {
        use crate::transform::Outcome;
        let Some(transforms) = &self.options.transforms else {
            return self.append_json(records, &refused, &[]);
        };
        let mut refused = refused.into_iter().peekable();
        let (mut values, mut bad, mut filtered) = (Vec::with_capacity(records.values.len()), Vec::new(), Vec::new());
        for (i, value) in records.values.iter().enumerate() {
            if let Some(already) = refused.next_if(|(j, _, _)| *j == i) {
                bad.push(already);
                values.push(Vec::new());
                continue;
            }
            match transforms.apply(value.as_ref()) {
                Outcome::Json(json) => values.push(json),
                Outcome::Filtered => {
                    filtered.push(i);
                    values.push(Vec::new());
                }
                Outcome::Bad { field, reason } => {
                    bad.push((i, field, format!("{reason} (a transform of the table)")));
                    values.push(Vec::new());
                }
            }
        }
        let mut out = self.append_json(&with_values(records, &values), &bad, &filtered)?;
        out.filtered = filtered.len();
        Ok(out)
    }

    /// [`Self::append`] of Protobuf values: each message as JSON first.
    fn append_protobuf<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        schemas: &crate::protobuf::ProtoSchemas,
    ) -> Result<Appended, BufferError> {
        use crate::protobuf::Transcoded;
        let mut missing: Vec<u32> = Vec::new();
        let mut bad = Vec::new();
        let mut values: Vec<Vec<u8>> = Vec::with_capacity(records.values.len());
        let mut seen = crate::protobuf::Seen::new();
        for (i, v) in records.values.iter().enumerate() {
            match schemas.transcode(v.as_ref(), &mut seen) {
                Transcoded::Json(json) => values.push(json),
                Transcoded::Bad(reason) => {
                    bad.push((i, String::new(), reason));
                    values.push(b"{}".to_vec());
                }
                Transcoded::Unknown(id) => {
                    if !missing.contains(&id) {
                        missing.push(id);
                    }
                    values.push(Vec::new());
                }
            }
        }
        if !missing.is_empty() {
            return Err(BufferError::UnknownSchemas(missing));
        }
        self.append_text(&with_values(records, &values), bad)
    }

    /// [`Self::append`] of JSON text; the records at `refused` (ascending) are bad records, each
    /// for its field and reason (a value not in the wire format, a message that does not decode, a
    /// transform that does not apply), and those at `filtered` (ascending) are left out.
    fn append_json<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        refused: &[(usize, String, String)],
        filtered: &[usize],
    ) -> Result<Appended, BufferError> {
        let n = records.values.len();
        if records.offsets.len() != n || records.timestamps_ms.len() != n || records.keys.len() != n {
            return Err(ArrowError::InvalidArgumentError(format!(
                "offsets, timestamps, keys and values must have the same length (got {}, {}, {}, {n})",
                records.offsets.len(),
                records.timestamps_ms.len(),
                records.keys.len()
            ))
            .into());
        }
        let mut out = Appended::default();
        let mut good: Vec<usize> = Vec::with_capacity(n);
        let mut rewritten: Vec<(usize, Vec<u8>)> = Vec::new();
        let mut unknown = Vec::new();
        // the single pass folds names as it reads; only the records it leaves are folded here
        let fold_first = self.options.fold_case && self.fast.is_none();
        let mut refused = refused.iter().peekable();
        let mut filtered = filtered.iter().peekable();
        for (i, value) in records.values.iter().enumerate() {
            if let Some((_, field, reason)) = refused.next_if(|(j, _, _)| *j == i) {
                out.errors.push(self.record_error(records, i, field.clone(), reason.clone()));
                continue;
            }
            if filtered.next_if(|j| **j == i).is_some() {
                continue;
            }
            unknown.clear();
            let report = (self.options.unknown_fields == UnknownFields::Report).then_some(&mut unknown);
            match validate::check(value.as_ref(), self.value_schema.fields(), report, fold_first) {
                Ok(checked) => {
                    // a field that differs from a column only in case is a bad record, never dropped
                    let near = unknown
                        .iter()
                        .find_map(|path| validate::near_miss(self.value_schema.fields(), path).map(|c| (path, c)));
                    if let Some((path, column)) = near {
                        out.errors.push(self.record_error(records, i, path.clone(), validate::case_reason(&column)));
                        continue;
                    }
                    good.push(i);
                    if let Checked::Rewritten(utf8) = checked {
                        rewritten.push((i, utf8));
                    }
                    out.unknown_fields.extend(unknown.drain(..).map(|path| UnknownField {
                        index: i,
                        offset: records.offsets[i],
                        path,
                    }));
                }
                Err((field, reason)) => out.errors.push(self.record_error(records, i, field, reason)),
            }
        }
        self.keep_fitting(records, &mut good, &mut out.errors)?;
        let (decoded, good) = self.decode(records, good, rewritten, &mut out)?;
        if decoded.num_rows() != good.len() {
            // Never let a row drift away from its offset.
            return Err(ArrowError::JsonError(format!(
                "decoded {} rows from {} values; refusing the batch",
                decoded.num_rows(),
                good.len()
            ))
            .into());
        }
        out.rows = self.store(decoded, records, &good)?;
        Ok(out)
    }

    /// Whether the buffer fills columns from the records' headers (it needs them at append).
    pub(crate) fn takes_headers(&self) -> bool {
        !self.headers.is_empty()
    }

    /// Of the records at `good`, keeps those whose headers and key fit their columns; each other
    /// is pushed to `errors`, naming the column and why. An error when headers are needed and
    /// `records` has none.
    pub(crate) fn keep_fitting<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        good: &mut Vec<usize>,
        errors: &mut Vec<RecordError>,
    ) -> Result<(), BufferError> {
        if !self.headers.is_empty() {
            let Some(headers) = records.headers.filter(|h| h.len() == records.values.len()) else {
                return Err(ArrowError::InvalidArgumentError(
                    "this buffer fills columns from headers: give every record's headers".into(),
                )
                .into());
            };
            good.retain(|&i| match self.headers.check(&self.schema, &headers[i]) {
                Ok(()) => true,
                Err((field, reason)) => {
                    errors.push(self.record_error(records, i, field, reason));
                    false
                }
            });
        }
        if !self.keys.is_empty() {
            let unknown = self.keys.unknown(good.iter().map(|&i| records.keys[i].as_ref().map(|k| k.as_ref())));
            if !unknown.is_empty() {
                return Err(BufferError::UnknownKeySchemas(unknown));
            }
            good.retain(|&i| match self.keys.check(&self.schema, records.keys[i].as_ref().map(|k| k.as_ref())) {
                Ok(()) => true,
                Err((field, reason)) => {
                    errors.push(self.record_error(records, i, field, reason));
                    false
                }
            });
        }
        Ok(())
    }

    /// The records of `fetched` from index `from` on that have a value (a null value is a
    /// tombstone, not a row), decoded as [`Self::append`] does, straight from the fetched bytes.
    /// An error's `index` counts the records handed on, not the fetch's; its offset is the record's.
    pub fn append_fetched(
        &self,
        topic: &str,
        partition: i32,
        fetched: &Fetched,
        from: usize,
    ) -> Result<Appended, BufferError> {
        let taken = Taken::of(fetched, from, !self.headers.is_empty());
        self.append(&taken.records(topic, partition))
    }

    /// The records of `fetched` at `indices` (ascending, each with a value: a routed share of a
    /// fetch), decoded as [`Self::append`] does, straight from the fetched bytes. An error's
    /// `index` is the record's position in `indices`; its offset is the record's.
    pub fn append_fetched_at(
        &self,
        topic: &str,
        partition: i32,
        fetched: &Fetched,
        indices: &[u32],
    ) -> Result<Appended, BufferError> {
        let taken = Taken::at(fetched, indices, !self.headers.is_empty()).map_err(ArrowError::InvalidArgumentError)?;
        self.append(&taken.records(topic, partition))
    }

    /// Keeps `decoded` (value columns in `value_schema` order, one row per index of `good`, in
    /// order) with the metadata columns of those records; the number of rows kept.
    pub(crate) fn store<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        decoded: RecordBatch,
        records: &Records<'_, V, K>,
        good: &[usize],
    ) -> Result<usize, BufferError> {
        if good.is_empty() {
            return Ok(0);
        }
        let entry = self.entry(decoded, records, good)?;
        self.reserve(entry.bytes)?;
        let rows = entry.batch.num_rows();
        // counted before the push makes the entry drainable: a drain that takes it subtracts
        // after this add (the push publishes it, the drain's take acquires it), never before
        self.rows.fetch_add(rows, Ordering::AcqRel);
        let shard = records.partition.unsigned_abs() as usize % self.shards.len();
        self.shards[shard].push(entry);
        Ok(rows)
    }

    /// The columns decoded from the value (the schema without the metadata columns).
    pub(crate) fn value_schema(&self) -> &SchemaRef {
        &self.value_schema
    }

    /// Everything buffered as one record batch (None when empty); what was drained is no longer
    /// counted. With `dedupe_by_key`, only the last record per key (by partition, offset) is kept.
    pub fn drain(&self) -> Result<Option<RecordBatch>, ArrowError> {
        let entries = self.take_entries();
        if entries.is_empty() {
            return Ok(None);
        }
        self.concat(&entries).map(Some)
    }

    /// Everything buffered as the batches it was appended in, without concatenating them (one
    /// copy fewer than [`Self::drain`]); with `dedupe_by_key` the one deduplicated batch.
    ///
    /// With `min_rows > 1`, runs of consecutive smaller batches are glued into batches of at
    /// least `min_rows` rows (the last run, or one cut short by a big batch, may be smaller);
    /// batches of `min_rows` rows or more are never copied. Each run is freed once glued, so the
    /// peak is the data plus one run. A writer that pays per batch (pyiceberg projects every
    /// batch in Python) wants this when a slow topic appends a few rows at a time.
    pub fn drain_batches(&self, min_rows: usize) -> Result<Vec<RecordBatch>, ArrowError> {
        let entries = self.take_entries();
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        if self.options.dedupe_by_key {
            return Ok(vec![self.concat(&entries)?]);
        }
        let mut out = Vec::new();
        let mut run: Vec<RecordBatch> = Vec::new();
        let mut run_rows = 0;
        for entry in entries {
            let rows = entry.batch.num_rows();
            if rows >= min_rows {
                if !run.is_empty() {
                    out.push(self.glue(&mut run)?);
                    run_rows = 0;
                }
                out.push(align::align_batch(entry.batch)?);
                continue;
            }
            run.push(entry.batch);
            run_rows += rows;
            if run_rows >= min_rows {
                out.push(self.glue(&mut run)?);
                run_rows = 0;
            }
        }
        if !run.is_empty() {
            out.push(self.glue(&mut run)?);
        }
        Ok(out)
    }

    /// One aligned batch from `run`, which is left empty (its batches freed).
    fn glue(&self, run: &mut Vec<RecordBatch>) -> Result<RecordBatch, ArrowError> {
        let batch =
            if run.len() == 1 { run.pop().expect("one batch") } else { concat_batches(&self.schema, run.iter())? };
        run.clear();
        align::align_batch(batch)
    }

    /// Every entry buffered, shard by shard, each shard's in append order (so a partition's
    /// entries come back in the order they were appended); they are no longer counted.
    fn take_entries(&self) -> Vec<Entry> {
        let mut entries = Vec::new();
        for shard in &self.shards {
            shard.take_into(&mut entries);
        }
        self.uncount(&entries);
        entries
    }

    fn uncount(&self, entries: &[Entry]) {
        let bytes: usize = entries.iter().map(|e| e.bytes).sum();
        let rows: usize = entries.iter().map(|e| e.batch.num_rows()).sum();
        self.bytes.fetch_sub(bytes, Ordering::AcqRel);
        self.rows.fetch_sub(rows, Ordering::AcqRel);
    }

    fn concat(&self, entries: &[Entry]) -> Result<RecordBatch, ArrowError> {
        let mut batch = concat_batches(&self.schema, entries.iter().map(|e| &e.batch))?;
        if self.options.dedupe_by_key {
            let keep =
                dedupe::last_per_key(entries.iter().map(|e| (e.partition, e.offsets.as_slice(), e.keys.as_ref())));
            batch = arrow::compute::filter_record_batch(&batch, &keep)?;
        }
        align::align_batch(batch)
    }

    /// Drop everything buffered (after a rebalance the records are read again).
    pub fn clear(&self) {
        for shard in &self.shards {
            self.uncount(&shard.take());
        }
    }

    fn reserve(&self, needed: usize) -> Result<(), BufferError> {
        let Some(cap) = self.options.max_bytes else {
            self.bytes.fetch_add(needed, Ordering::AcqRel);
            return Ok(());
        };
        self.bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| (used + needed <= cap).then_some(used + needed))
            .map(|_| ())
            .map_err(|used| BufferError::Full { needed, used, cap })
    }

    pub(crate) fn record_error<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        index: usize,
        field: String,
        reason: String,
    ) -> RecordError {
        RecordError { index, partition: records.partition, offset: records.offsets[index], field, reason }
    }

    fn entry<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        decoded: RecordBatch,
        records: &Records<'_, V, K>,
        rows: &[usize],
    ) -> Result<Entry, ArrowError> {
        let keys = || BinaryArray::from_iter(rows.iter().map(|&i| records.keys[i].as_ref().map(|k| k.as_ref())));
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        let mut from_headers = match records.headers {
            Some(headers) if !self.headers.is_empty() => self.headers.columns(&self.schema, headers, rows)?,
            _ => Vec::new(),
        };
        from_headers.extend(self.keys.columns(&self.schema, records.keys, rows)?);
        let mut next_value_column = 0;
        for (i, field) in self.schema.fields().iter().enumerate() {
            let name = field.name().as_str();
            if let Some(k) = from_headers.iter().position(|(j, _)| *j == i) {
                columns.push(from_headers.swap_remove(k).1);
                continue;
            }
            if !self.options.metadata_columns || !META_COLUMNS.contains(&name) {
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
                _ => Arc::new(keys()),
            };
            columns.push(if column.data_type() == field.data_type() {
                column
            } else {
                cast(&column, field.data_type())?
            });
        }
        let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
        let offsets: Vec<i64> = rows.iter().map(|&i| records.offsets[i]).collect();
        let keys = self.options.dedupe_by_key.then(keys);
        let bytes = batch.get_array_memory_size()
            + offsets.capacity() * std::mem::size_of::<i64>()
            + keys.as_ref().map_or(0, arrow::array::Array::get_array_memory_size);
        Ok(Entry { batch, partition: records.partition, offsets, keys, bytes })
    }
}

/// The records of a fetch that have a value, as the columns an append takes (slices of the
/// fetched bytes, nothing copied).
pub(crate) struct Taken<'f> {
    offsets: Vec<i64>,
    timestamps_ms: Vec<i64>,
    keys: Vec<Option<&'f [u8]>>,
    values: Vec<&'f [u8]>,
    /// Each record's headers, when the buffer fills columns from them.
    headers: Option<Vec<Headers<'f>>>,
}

impl<'f> Taken<'f> {
    pub(crate) fn of(fetched: &'f Fetched, from: usize, with_headers: bool) -> Self {
        let n = fetched.len().saturating_sub(from);
        let mut out = Taken {
            offsets: Vec::with_capacity(n),
            timestamps_ms: Vec::with_capacity(n),
            keys: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
            headers: with_headers.then(|| Vec::with_capacity(n)),
        };
        for i in from..fetched.len() {
            if let Some(value) = fetched.value(i) {
                out.offsets.push(fetched.offsets()[i]);
                out.timestamps_ms.push(fetched.timestamps_ms()[i]);
                out.keys.push(fetched.key(i));
                out.values.push(value);
                if let Some(headers) = &mut out.headers {
                    headers.push(fetched.headers(i).collect());
                }
            }
        }
        out
    }

    /// The records of `fetched` at `indices` (ascending, each with a value), or why not.
    pub(crate) fn at(fetched: &'f Fetched, indices: &[u32], with_headers: bool) -> Result<Self, String> {
        let mut out = Taken {
            offsets: Vec::with_capacity(indices.len()),
            timestamps_ms: Vec::with_capacity(indices.len()),
            keys: Vec::with_capacity(indices.len()),
            values: Vec::with_capacity(indices.len()),
            headers: with_headers.then(|| Vec::with_capacity(indices.len())),
        };
        let mut last = None;
        for &i in indices {
            let i = i as usize;
            if last.is_some_and(|l| l >= i) {
                return Err(format!("indices must ascend: {i} comes after {}", last.unwrap_or_default()));
            }
            last = Some(i);
            if i >= fetched.len() {
                return Err(format!("index {i} is out of range for {} records", fetched.len()));
            }
            let value = fetched
                .value(i)
                .ok_or_else(|| format!("the record at index {i} has no value (a tombstone): it is no row"))?;
            out.offsets.push(fetched.offsets()[i]);
            out.timestamps_ms.push(fetched.timestamps_ms()[i]);
            out.keys.push(fetched.key(i));
            out.values.push(value);
            if let Some(headers) = &mut out.headers {
                headers.push(fetched.headers(i).collect());
            }
        }
        Ok(out)
    }

    pub(crate) fn records<'a>(&'a self, topic: &'a str, partition: i32) -> Records<'a, &'f [u8], &'f [u8]> {
        Records {
            topic,
            partition,
            offsets: &self.offsets,
            timestamps_ms: &self.timestamps_ms,
            keys: &self.keys,
            values: &self.values,
            headers: self.headers.as_deref(),
        }
    }
}

/// The values of one `append` call, some of them rewritten by [`validate::check`].
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

#[cfg(test)]
mod tests;
