//! Avro record values into the same buffered batches as JSON ones (arrow-avro's datum decoder).
//!
//! A value is one Avro binary datum: plain (one writer schema for the whole topic, from a schema
//! file) or in the Confluent wire format (magic byte 0, a big-endian 4-byte schema id, then the
//! datum). Which writer schemas the buffer can read is decided outside (Python, once per schema
//! id, against the table's schema): each is registered with its *reader* schema (the writer's
//! record names, the table's columns in order, columns the writer lacks as null-defaulted
//! unions), or refused with a field and a reason (every record of it is then a bad record). An
//! append naming an id it has neither is refused whole ([`BufferError::UnknownSchemas`]).
//!
//! The decoded columns are cast to the table's Arrow types (int to long, float to double,
//! millisecond to microsecond timestamps, narrower decimals, string to large string, enum to
//! string): only casts the registration allowed, each exact, and any failure is loud.
//!
//! A datum that fails leaves arrow-avro's decoder with some columns a value longer than others,
//! so it is never used again: the records of the current segment are decoded again into a fresh
//! one. Segments are flushed every [`SEGMENT`] records, which bounds that cost.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::{cast_with_options, concat_batches, CastOptions};
use arrow::datatypes::Decimal128Type;
use arrow::datatypes::{DataType, TimeUnit};
use arrow::error::ArrowError;
use arrow::util::display::FormatOptions;
use arrow_avro::codec::Tz;
use arrow_avro::reader::{Decoder, DecoderMode, ReaderBuilder};
use arrow_avro::schema::{AvroSchema, Fingerprint, FingerprintAlgorithm, SchemaStore};

use super::{Appended, BufferError, JsonBuffer, Options, RecordError, Records, UnknownFields};

/// Records decoded by one arrow-avro decoder before it is flushed.
const SEGMENT: usize = 256;
/// The schema id plain values (no framing) are registered under.
pub const PLAIN_ID: u32 = 0;
/// The Confluent wire format's first byte, and the bytes before the payload (it and the schema id):
/// Avro's, and the JSON of a JSON Schema serializer (`JsonBuffer`'s `confluent`).
pub(crate) const CONFLUENT_MAGIC: u8 = 0;
pub(crate) const CONFLUENT_HEADER: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// The value is the datum; its writer schema is registered as [`PLAIN_ID`].
    Plain,
    /// Magic byte 0, a big-endian u32 schema id, the datum.
    Confluent,
}

#[derive(Debug)]
enum Writer {
    Readable { writer: AvroSchema, reader: AvroSchema, ignored: usize },
    Refused { field: String, reason: String },
}

#[derive(Debug)]
pub struct AvroBuffer {
    core: JsonBuffer,
    framing: Framing,
    writers: RwLock<HashMap<u32, Arc<Writer>>>,
}

impl AvroBuffer {
    pub fn new(schema: arrow::datatypes::SchemaRef, options: Options, framing: Framing) -> Result<Self, ArrowError> {
        if options.dedupe_by_key || options.fold_case || options.unknown_fields == UnknownFields::Report {
            // decided per writer schema, not per record: the reader schema does it
            return Err(ArrowError::InvalidArgumentError(
                "an Avro buffer takes no dedupe_by_key, fold_case or unknown_fields = report".into(),
            ));
        }
        Ok(Self { core: JsonBuffer::new(schema, options)?, framing, writers: RwLock::new(HashMap::new()) })
    }

    pub fn core(&self) -> &JsonBuffer {
        &self.core
    }

    /// Records with schema `id` are read with `writer` into `reader`'s fields, which must be the
    /// value columns, in order; `ignored` writer fields are left out (counted per row kept).
    /// Checked now: a pair arrow-avro cannot resolve, or a reader whose decoded columns cannot be
    /// cast to the table's, is an error here, not at append time.
    pub fn register(&self, id: u32, writer: &str, reader: &str, ignored: usize) -> Result<(), ArrowError> {
        let writer = AvroSchema::new(writer.to_string());
        let reader = AvroSchema::new(reader.to_string());
        let mut decoder = build(id, &writer, &reader, 1)?;
        let decoded = decoder.schema();
        let target = self.core.value_schema();
        if decoded.fields().len() != target.fields().len() {
            return Err(ArrowError::SchemaError(format!(
                "the reader schema has {} fields; the table has {} value columns",
                decoded.fields().len(),
                target.fields().len()
            )));
        }
        for (got, want) in decoded.fields().iter().zip(target.fields()) {
            if got.name() != want.name() {
                return Err(ArrowError::SchemaError(format!(
                    "the reader schema has field {:?} where the table has column {:?}",
                    got.name(),
                    want.name()
                )));
            }
            if !exact_cast(got.data_type(), want.data_type()) {
                return Err(ArrowError::SchemaError(format!(
                    "field {:?} decodes as {} and cannot become column type {}",
                    got.name(),
                    got.data_type(),
                    want.data_type()
                )));
            }
        }
        decoder.flush().map_err(ArrowError::from)?;
        self.writers
            .write()
            .expect("writers lock poisoned")
            .insert(id, Arc::new(Writer::Readable { writer, reader, ignored }));
        Ok(())
    }

    /// Every record with schema `id` is a bad record, for `reason` at `field`.
    pub fn refuse(&self, id: u32, field: String, reason: String) {
        self.writers.write().expect("writers lock poisoned").insert(id, Arc::new(Writer::Refused { field, reason }));
    }

    /// The records of `fetched` from index `start` on that have a value, decoded as
    /// [`Self::append`] does, straight from the fetched bytes.
    pub fn append_fetched(
        &self,
        topic: &str,
        partition: i32,
        fetched: &crate::kafka::Fetched,
        start: usize,
    ) -> Result<Appended, BufferError> {
        let taken = super::Taken::of(fetched, start, self.core.takes_headers());
        self.append(&taken.records(topic, partition))
    }

    /// Decode one batch of records of one partition; thread-safe like [`JsonBuffer::append`].
    pub fn append<V: AsRef<[u8]>, K: AsRef<[u8]>>(&self, records: &Records<'_, V, K>) -> Result<Appended, BufferError> {
        let n = records.values.len();
        if records.offsets.len() != n || records.timestamps_ms.len() != n || records.keys.len() != n {
            return Err(ArrowError::InvalidArgumentError(
                "offsets, timestamps, keys and values must have the same length".into(),
            )
            .into());
        }
        let mut out = Appended::default();
        // (index, schema id, datum), in offset order
        let mut framed: Vec<(usize, u32, &[u8])> = Vec::with_capacity(n);
        for (i, value) in records.values.iter().enumerate() {
            let value = value.as_ref();
            match self.framing {
                Framing::Plain => framed.push((i, PLAIN_ID, value)),
                Framing::Confluent => {
                    if value.len() < CONFLUENT_HEADER || value[0] != CONFLUENT_MAGIC {
                        out.errors.push(self.core.record_error(
                            records,
                            i,
                            String::new(),
                            format!(
                                "the value is not in the Confluent wire format (magic byte 0, a 4-byte schema id, the Avro datum): \
                                 it has {} byte(s){}; check the producer's serializer",
                                value.len(),
                                value.first().map(|b| format!(" and starts with byte {b}")).unwrap_or_default()
                            ),
                        ));
                        continue;
                    }
                    let id = u32::from_be_bytes([value[1], value[2], value[3], value[4]]);
                    framed.push((i, id, &value[CONFLUENT_HEADER..]));
                }
            }
        }
        // headers and keys that do not fit their columns make bad records before any decoding
        let mut fitting: Vec<usize> = framed.iter().map(|&(i, _, _)| i).collect();
        self.core.keep_fitting(records, &mut fitting, &mut out.errors)?;
        if fitting.len() < framed.len() {
            let mut kept = fitting.iter().peekable();
            framed.retain(|&(i, _, _)| kept.next_if_eq(&&i).is_some());
        }
        let writers: HashMap<u32, Arc<Writer>> = {
            let known = self.writers.read().expect("writers lock poisoned");
            let mut missing: Vec<u32> = Vec::new();
            let mut found = HashMap::new();
            for &(_, id, _) in &framed {
                if found.contains_key(&id) || missing.contains(&id) {
                    continue;
                }
                match known.get(&id) {
                    Some(w) => {
                        found.insert(id, w.clone());
                    }
                    None => missing.push(id),
                }
            }
            if !missing.is_empty() {
                return Err(BufferError::UnknownSchemas(missing));
            }
            found
        };
        let mut batches = Vec::new();
        let mut good = Vec::with_capacity(framed.len());
        // runs of one schema id, in offset order
        let mut start = 0;
        while start < framed.len() {
            let id = framed[start].1;
            let end = framed[start..].iter().position(|r| r.1 != id).map_or(framed.len(), |k| start + k);
            let run = &framed[start..end];
            match writers[&id].as_ref() {
                Writer::Refused { field, reason } => {
                    for &(i, _, _) in run {
                        out.errors.push(self.core.record_error(records, i, field.clone(), reason.clone()));
                    }
                }
                Writer::Readable { writer, reader, ignored } => {
                    for segment in run.chunks(SEGMENT) {
                        let (batch, kept) =
                            self.decode_segment(id, writer, reader, segment, records, &mut out.errors)?;
                        out.fields_ignored += ignored * kept.len();
                        if !kept.is_empty() {
                            batches.push(batch);
                            good.extend(kept);
                        }
                    }
                }
            }
            start = end;
        }
        out.errors.sort_by_key(|e| e.index);
        if good.is_empty() {
            return Ok(out);
        }
        let target = self.core.value_schema().clone();
        let decoded =
            if batches.len() == 1 { batches.pop().expect("one batch") } else { concat_batches(&target, &batches)? };
        if decoded.num_rows() != good.len() {
            return Err(ArrowError::InvalidArgumentError(format!(
                "decoded {} rows from {} values; refusing the batch",
                decoded.num_rows(),
                good.len()
            ))
            .into());
        }
        out.rows = self.core.store(decoded, records, &good)?;
        Ok(out)
    }

    /// One segment of one writer schema: its rows (cast to the table's types) and the indices
    /// they came from; the records that do not decode are pushed to `errors`.
    fn decode_segment<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        id: u32,
        writer: &AvroSchema,
        reader: &AvroSchema,
        segment: &[(usize, u32, &[u8])],
        records: &Records<'_, V, K>,
        errors: &mut Vec<RecordError>,
    ) -> Result<(RecordBatch, Vec<usize>), BufferError> {
        let mut kept: Vec<(usize, &[u8])> = Vec::with_capacity(segment.len());
        let mut decoder = build(id, writer, reader, segment.len())?;
        for &(i, _, datum) in segment {
            match decode_one(&mut decoder, datum) {
                Ok(()) => kept.push((i, datum)),
                Err(reason) => {
                    errors.push(self.core.record_error(records, i, String::new(), self.reason(id, reason)));
                    // the failed datum may have left columns uneven: start again without it
                    decoder = build(id, writer, reader, segment.len())?;
                    for &(_, good) in &kept {
                        decode_one(&mut decoder, good).map_err(ArrowError::InvalidArgumentError)?;
                    }
                }
            }
        }
        let flushed = match flush_cast(&mut decoder, self.core.value_schema()) {
            Ok(batch) => batch,
            Err(_) => {
                // found only when the arrays are built (text that is not UTF-8), or a value the
                // cast refuses: each record alone, for its reason
                let mut alone = Vec::with_capacity(kept.len());
                for &(i, datum) in &kept {
                    let mut single = build(id, writer, reader, 1)?;
                    let result = decode_one(&mut single, datum)
                        .and_then(|()| flush_cast(&mut single, self.core.value_schema()).map_err(|e| e.to_string()));
                    match result {
                        Ok(_) => alone.push((i, datum)),
                        Err(reason) => {
                            errors.push(self.core.record_error(records, i, String::new(), self.reason(id, reason)))
                        }
                    }
                }
                kept = alone;
                let mut decoder = build(id, writer, reader, kept.len().max(1))?;
                for &(_, datum) in &kept {
                    decode_one(&mut decoder, datum).map_err(ArrowError::InvalidArgumentError)?;
                }
                flush_cast(&mut decoder, self.core.value_schema())?
            }
        };
        Ok((flushed, kept.into_iter().map(|(i, _)| i).collect()))
    }

    fn reason(&self, id: u32, why: String) -> String {
        match self.framing {
            Framing::Plain => format!("not a valid Avro datum of the configured writer schema: {why}"),
            Framing::Confluent => format!("not a valid Avro datum of writer schema id {id}: {why}"),
        }
    }
}

/// Whether every value of `from` becomes the same value of `to` (or an error, never a NULL or a
/// guess): the widenings Iceberg allows and Arrow's representations of one Avro type.
fn exact_cast(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    match (from, to) {
        _ if from == to => true,
        (Int32, Int64) | (Float32, Float64) | (Time32(TimeUnit::Millisecond), Time64(TimeUnit::Microsecond)) => true,
        (Utf8 | LargeUtf8, Utf8 | LargeUtf8 | Utf8View) | (Binary | LargeBinary, Binary | LargeBinary | BinaryView) => {
            true
        }
        (Dictionary(_, value), Utf8 | LargeUtf8 | Utf8View) => matches!(value.as_ref(), Utf8 | LargeUtf8),
        (Timestamp(a, tz_a), Timestamp(TimeUnit::Microsecond, tz_b)) => {
            matches!(a, TimeUnit::Millisecond | TimeUnit::Microsecond) && tz_a.is_some() == tz_b.is_some()
        }
        (Decimal128(p, s), Decimal128(q, t)) => s == t && p <= q,
        (List(a) | LargeList(a), List(b) | LargeList(b)) => exact_cast(a.data_type(), b.data_type()),
        (Struct(a), Struct(b)) => {
            a.len() == b.len()
                && a.iter().zip(b.iter()).all(|(x, y)| x.name() == y.name() && exact_cast(x.data_type(), y.data_type()))
        }
        (Map(a, _), Map(b, _)) => exact_cast(a.data_type(), b.data_type()),
        _ => false,
    }
}

pub(crate) fn build(id: u32, writer: &AvroSchema, reader: &AvroSchema, capacity: usize) -> Result<Decoder, ArrowError> {
    let mut store = SchemaStore::new_with_type(FingerprintAlgorithm::Id);
    store.set(Fingerprint::Id(id), writer.clone())?;
    ReaderBuilder::new()
        .with_writer_schema_store(store)
        .with_reader_schema(reader.clone())
        .with_active_fingerprint(Fingerprint::Id(id))
        .with_decoder_mode(DecoderMode::UnframedDatum)
        .with_tz(Tz::Utc)
        .with_batch_size(capacity.max(1))
        .build_decoder()
}

/// One datum, which must be exactly the value's bytes; a panic inside arrow-avro is an error.
fn decode_one(decoder: &mut Decoder, datum: &[u8]) -> Result<(), String> {
    let used = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder.decode(datum)))
        .map_err(|panic| {
            let what =
                panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned());
            format!("the Avro decoder failed on it ({})", what.unwrap_or_default())
        })?
        .map_err(|e| e.to_string())?;
    if used != datum.len() {
        return Err(format!(
            "the datum ends after {used} of the value's {} bytes: the rest is not part of any field (a different writer schema?)",
            datum.len()
        ));
    }
    Ok(())
}

/// The decoder's rows with each column cast (exactly: a value that does not fit is an error,
/// never a NULL) to the table's type.
fn flush_cast(decoder: &mut Decoder, target: &arrow::datatypes::SchemaRef) -> Result<RecordBatch, ArrowError> {
    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder.flush()))
        .map_err(|_| ArrowError::InvalidArgumentError("the Avro decoder failed building the batch".into()))?
        .map_err(ArrowError::from)?;
    let Some(batch) = batch else { return Ok(RecordBatch::new_empty(target.clone())) };
    let exact = CastOptions { safe: false, format_options: FormatOptions::default() };
    let columns = batch
        .columns()
        .iter()
        .zip(target.fields())
        .map(|(column, field)| {
            if column.data_type() == field.data_type() {
                Ok(column.clone())
            } else {
                cast_with_options(column, field.data_type(), &exact)
                    .map_err(|e| ArrowError::CastError(format!("field {}: {e}", field.name())))
            }
        })
        .collect::<Result<Vec<ArrayRef>, ArrowError>>()?;
    for (column, field) in columns.iter().zip(target.fields()) {
        fits_precision(column.as_ref()).map_err(|e| ArrowError::CastError(format!("field {}: {e}", field.name())))?;
    }
    RecordBatch::try_new(target.clone(), columns)
}

/// Every decimal (nested ones too) has at most its type's precision in digits: arrow-avro does
/// not check the writer's declared precision, and a Parquet decimal column stores too many
/// digits wrongly (12345678 at precision 4 reads back as another number).
fn fits_precision(array: &dyn Array) -> Result<(), ArrowError> {
    match array.data_type() {
        DataType::Decimal128(precision, _) => {
            array.as_primitive::<Decimal128Type>().validate_decimal_precision(*precision)
        }
        DataType::Struct(_) => array.as_struct().columns().iter().try_for_each(|c| fits_precision(c.as_ref())),
        DataType::List(_) => fits_precision(array.as_list::<i32>().values().as_ref()),
        DataType::LargeList(_) => fits_precision(array.as_list::<i64>().values().as_ref()),
        DataType::Map(_, _) => fits_precision(array.as_map().entries()),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
