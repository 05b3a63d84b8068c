//! Kafka's record batches (message format v2, magic 2) read straight from a fetch response's
//! bytes: the batch header, its CRC-32C, the four compression codecs, the varint records and
//! their headers, control batches, and transactions aborted under read_committed. Pure Rust, no
//! pyo3.
//!
//! [`Fetched::parse`] walks one partition's record set once and keeps, per record, its offset,
//! timestamp and where its key, value and headers are: in the response's own bytes when the batch
//! is not compressed, in a decompressed copy of the batch when it is. Nothing is copied per
//! record; the record buffer decodes values from these slices ([`crate::buffer::JsonBuffer::append_fetched`]).
//!
//! What a consumer must do itself, because the broker does not (as the Java consumer and
//! aiokafka do):
//! - skip control batches (transaction markers), under either isolation level;
//! - under read_committed, skip the transactional batches of a producer whose aborted transaction
//!   the response lists, from the transaction's first offset up to that producer's abort marker;
//! - skip records below the fetch offset (a fetch may start inside a batch);
//! - move the next fetch offset past each whole batch read (its last offset + 1), even when
//!   compaction removed records from it or nothing in it was kept;
//! - drop a batch the response cut short at its end (it comes whole in the next fetch).

mod codec;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::sync::Arc;

pub use codec::Codec;

/// Bytes before a batch's header fields: base offset (8) and batch length (4).
const LOG_OVERHEAD: usize = 12;
/// A v2 batch header, from the base offset to the record count.
const BATCH_HEADER: usize = 61;
/// Where the magic byte is, in every message format.
const MAGIC_AT: usize = 16;
/// The CRC-32C covers the batch from its attributes to its end.
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;

const TIMESTAMP_LOG_APPEND: i16 = 0x08;
const TRANSACTIONAL: i16 = 0x10;
const CONTROL: i16 = 0x20;
/// Control record types (the key of a control batch's one record: version, type).
const ABORT_MARKER: i16 = 0;

/// The bytes a fetch returned for one partition. Kept alive as long as the records found in it.
pub type Source = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// How to read one partition's record set.
#[derive(Debug, Clone, Default)]
pub struct FetchOptions {
    /// The offset the fetch asked for: records below it are skipped.
    pub fetch_offset: i64,
    /// Skip aborted transactions (the consumer's `isolation_level = read_committed`).
    pub read_committed: bool,
    /// The response's aborted transactions: (producer id, first offset), in any order.
    pub aborted: Vec<(i64, i64)>,
    /// Check each batch's CRC-32C (a mismatch is an error, never data).
    pub check_crcs: bool,
}

/// A batch that cannot be read: the fetch is refused whole, nothing of it is taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The batch's CRC-32C does not match its bytes.
    Corrupt { base_offset: i64, stored: u32, computed: u32 },
    /// The bytes are not a well-formed v2 batch.
    Malformed { base_offset: i64, reason: String },
    /// A message format before v2 (magic 0 or 1, Kafka before 0.11).
    Unsupported { base_offset: i64, magic: i8 },
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Corrupt { base_offset, stored, computed } => write!(
                f,
                "the record batch at offset {base_offset} fails its CRC-32C check (stored {stored:#010x}, computed \
                 {computed:#010x}): its bytes were damaged on the broker's disk or on the way; nothing of it was taken"
            ),
            FetchError::Malformed { base_offset, reason } => {
                write!(f, "the record batch at offset {base_offset} is not a valid Kafka record batch: {reason}; nothing of it was taken")
            }
            FetchError::Unsupported { base_offset, magic } => write!(
                f,
                "the record batch at offset {base_offset} is in message format v{magic} (written by a client or broker older \
                 than Kafka 0.11); frazil reads format v2 only: copy the topic with a current client to a new topic"
            ),
        }
    }
}

impl std::error::Error for FetchError {}

/// Where a key, value or header lives: a segment (0: the fetch's bytes, n: the n-th decompressed
/// batch) and a range in it; `len == NULL` for a null.
#[derive(Debug, Clone, Copy)]
struct Slice {
    segment: u32,
    start: u32,
    len: u32,
}

const NULL: u32 = u32::MAX;

impl Slice {
    const NONE: Slice = Slice { segment: 0, start: 0, len: NULL };
}

/// What a walk over a record set met besides the records it kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Complete batches read (control and aborted ones included).
    pub batches: usize,
    pub control_batches: usize,
    /// Transactional batches of aborted transactions, and their records, skipped.
    pub aborted_batches: usize,
    pub aborted_records: usize,
    /// Records of a batch below the fetch offset (a fetch that starts inside a batch).
    pub below_fetch_offset: usize,
    /// Bytes of the batches read, as fetched (compressed).
    pub bytes: usize,
    /// Bytes at the end of the record set that are not a whole batch (fetched again next time).
    pub truncated_bytes: usize,
}

/// The records of one fetched partition, in offset order, and where its next fetch starts.
pub struct Fetched {
    source: Source,
    inflated: Vec<Vec<u8>>,
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    keys: Vec<Slice>,
    values: Vec<Slice>,
    /// Record i's headers are `header_slices[header_starts[i]..header_starts[i + 1]]`.
    header_starts: Vec<u32>,
    header_slices: Vec<(Slice, Slice)>,
    /// The next offset to fetch: past the last whole batch read.
    pub next_offset: i64,
    pub stats: FetchStats,
}

/// Counts over the records from one index on: what taking them means.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub records: usize,
    /// Records with a null value.
    pub tombstones: usize,
    /// Bytes of the non-null values.
    pub value_bytes: usize,
    pub first_offset: i64,
    pub last_offset: i64,
    pub max_timestamp_ms: i64,
}

impl std::fmt::Debug for Fetched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetched")
            .field("records", &self.offsets.len())
            .field("next_offset", &self.next_offset)
            .field("stats", &self.stats)
            .finish()
    }
}

/// Reads `data` (one batch's records, or a whole record set) as big-endian and varint fields.
struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn varint_u64(&mut self, max_bytes: usize) -> Result<u64, String> {
        let mut out = 0u64;
        for i in 0..max_bytes {
            let b = *self.data.get(self.at).ok_or("a varint runs past the end of the records")?;
            self.at += 1;
            out |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err("a varint is longer than its type allows".into())
    }

    /// A zigzag varint of at most 32 bits.
    fn varint(&mut self) -> Result<i64, String> {
        let n = self.varint_u64(5)?;
        if n > u64::from(u32::MAX) {
            return Err("a varint is longer than its type allows".into());
        }
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    /// A zigzag varint of at most 64 bits.
    fn varlong(&mut self) -> Result<i64, String> {
        let n = self.varint_u64(10)?;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    /// A length-prefixed byte string (-1: null) as a slice of `segment`.
    fn bytes(&mut self, segment: u32, what: &str) -> Result<Slice, String> {
        let len = self.varint()?;
        if len == -1 {
            return Ok(Slice::NONE);
        }
        if len < 0 {
            return Err(format!("a record's {what} has length {len}"));
        }
        let len = len as usize;
        if self.data.len() - self.at < len {
            return Err(format!("a record's {what} runs past the end of the records"));
        }
        let slice = Slice { segment, start: self.at as u32, len: len as u32 };
        self.at += len;
        Ok(slice)
    }
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}

fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be_i64(b: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// What the records of a batch are read against, from its header.
#[derive(Clone, Copy)]
struct BatchHead {
    count: usize,
    base_offset: i64,
    base_timestamp: i64,
    max_timestamp: i64,
    /// Every record's timestamp is the batch's max timestamp (the broker's append time).
    log_append: bool,
}

impl Fetched {
    /// Reads one partition's record set as fetched. A batch that fails its checksum, is not well
    /// formed or is in an older message format refuses the whole fetch.
    pub fn parse(source: Source, options: &FetchOptions) -> Result<Self, FetchError> {
        let mut out = Fetched {
            source,
            inflated: Vec::new(),
            offsets: Vec::new(),
            timestamps: Vec::new(),
            keys: Vec::new(),
            values: Vec::new(),
            header_starts: vec![0],
            header_slices: Vec::new(),
            next_offset: options.fetch_offset,
            stats: FetchStats::default(),
        };
        let source = out.source.clone();
        let data: &[u8] = (*source).as_ref();
        let mut aborted = options.aborted.clone();
        aborted.sort_by_key(|&(_, first)| first);
        let mut aborted = aborted.into_iter().peekable();
        let mut aborting: HashSet<i64> = HashSet::new();
        let mut inflated = Vec::new();
        let mut at = 0usize;
        while data.len() - at >= LOG_OVERHEAD {
            let base_offset = be_i64(data, at);
            let length = be_i32(data, at + 8);
            let malformed = |reason: String| FetchError::Malformed { base_offset, reason };
            if length < 0 {
                return Err(malformed(format!("its length is {length}")));
            }
            let end = at + LOG_OVERHEAD + length as usize;
            if end > data.len() {
                out.stats.truncated_bytes = data.len() - at;
                break;
            }
            let batch = &data[at..end];
            if batch.len() <= MAGIC_AT {
                return Err(malformed(format!("it is {} bytes long", batch.len())));
            }
            let magic = batch[MAGIC_AT] as i8;
            if magic != 2 {
                return Err(FetchError::Unsupported { base_offset, magic });
            }
            if batch.len() < BATCH_HEADER {
                return Err(malformed(format!("it is {} bytes long, shorter than its header", batch.len())));
            }
            if options.check_crcs {
                let stored = u32::from_be_bytes(batch[CRC_AT..CRC_AT + 4].try_into().expect("4 bytes"));
                let computed = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
                if stored != computed {
                    return Err(FetchError::Corrupt { base_offset, stored, computed });
                }
            }
            let attributes = be_i16(batch, ATTRIBUTES_AT);
            let last_offset_delta = be_i32(batch, 23);
            let base_timestamp = be_i64(batch, 27);
            let max_timestamp = be_i64(batch, 35);
            let producer_id = be_i64(batch, 43);
            let count = be_i32(batch, 57);
            if count < 0 || last_offset_delta < 0 {
                return Err(malformed(format!(
                    "it says it holds {count} records up to offset delta {last_offset_delta}"
                )));
            }
            let batch_next = base_offset + i64::from(last_offset_delta) + 1;
            out.stats.batches += 1;
            out.stats.bytes += batch.len();
            at = end;

            if options.read_committed && producer_id >= 0 {
                while let Some((producer, _)) = aborted.next_if(|&(_, first)| first <= base_offset) {
                    aborting.insert(producer);
                }
                if attributes & CONTROL != 0 && control_type(&batch[BATCH_HEADER..]).map_err(malformed)? == ABORT_MARKER
                {
                    aborting.remove(&producer_id);
                }
                if attributes & TRANSACTIONAL != 0 && aborting.contains(&producer_id) {
                    out.stats.aborted_batches += 1;
                    out.stats.aborted_records += count as usize;
                    out.next_offset = out.next_offset.max(batch_next);
                    continue;
                }
            }
            if attributes & CONTROL != 0 {
                out.stats.control_batches += 1;
                out.next_offset = out.next_offset.max(batch_next);
                continue;
            }

            let codec = Codec::from_attributes(attributes).map_err(malformed)?;
            let (segment, records, start): (u32, &[u8], usize) = if codec == Codec::None {
                (0, data, end - batch.len() + BATCH_HEADER)
            } else {
                let mut buf = Vec::new();
                codec::decompress(codec, &batch[BATCH_HEADER..], batch.len() * 4, &mut buf).map_err(malformed)?;
                inflated.push(buf);
                (inflated.len() as u32, inflated.last().expect("just pushed").as_slice(), 0)
            };
            let stop = if codec == Codec::None { end } else { records.len() };
            let log_append = attributes & TIMESTAMP_LOG_APPEND != 0;
            let head = BatchHead { count: count as usize, base_offset, base_timestamp, max_timestamp, log_append };
            out.read_records(records, start, stop, segment, head).map_err(malformed)?;
            out.next_offset = out.next_offset.max(batch_next);
        }
        out.inflated = inflated;
        Ok(out)
    }

    /// The records of one batch, `records[start..stop]`; `segment` names those bytes (0: the fetched
    /// ones, n: the n-th inflated batch).
    fn read_records(
        &mut self,
        records: &[u8],
        start: usize,
        stop: usize,
        segment: u32,
        head: BatchHead,
    ) -> Result<(), String> {
        let BatchHead { count, base_offset, base_timestamp, max_timestamp, log_append } = head;
        let mut r = Reader { data: &records[..stop], at: start };
        // a count no bigger than the bytes allow (one record takes at least 7 bytes)
        let room = count.min((stop - start) / 7 + 1);
        self.offsets.reserve(room);
        self.timestamps.reserve(room);
        self.keys.reserve(room);
        self.values.reserve(room);
        self.header_starts.reserve(room);
        for _ in 0..count {
            let length = r.varint()?;
            if length < 0 || (length as usize) > r.data.len() - r.at {
                return Err(format!("a record's length ({length}) runs past the end of the batch"));
            }
            let record_end = r.at + length as usize;
            let mut rec = Reader { data: &r.data[..record_end], at: r.at };
            rec.at += 1; // attributes: unused
            let timestamp_delta = rec.varlong()?;
            let offset_delta = rec.varint()?;
            let key = rec.bytes(segment, "key")?;
            let value = rec.bytes(segment, "value")?;
            let header_count = rec.varint()?;
            if header_count < 0 {
                return Err(format!("a record has {header_count} headers"));
            }
            let offset = base_offset + offset_delta;
            let keep = offset >= self.next_offset;
            for _ in 0..header_count {
                let name = rec.bytes(segment, "header key")?;
                if name.len == NULL {
                    return Err("a record header has a null key".into());
                }
                let value = rec.bytes(segment, "header value")?;
                if keep {
                    self.header_slices.push((name, value));
                }
            }
            if rec.at != record_end {
                return Err(format!("a record's fields end {} bytes before its length says", record_end - rec.at));
            }
            r.at = record_end;
            if !keep {
                self.stats.below_fetch_offset += 1;
                continue;
            }
            self.offsets.push(offset);
            self.timestamps.push(if log_append { max_timestamp } else { base_timestamp + timestamp_delta });
            self.keys.push(key);
            self.values.push(value);
            self.header_starts.push(self.header_slices.len() as u32);
            self.next_offset = offset + 1;
        }
        if r.at != r.data.len() {
            return Err(format!("{} bytes follow the batch's {count} records", r.data.len() - r.at));
        }
        Ok(())
    }

    /// Records kept (at or past the fetch offset, not aborted, not control).
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    pub fn offsets(&self) -> &[i64] {
        &self.offsets
    }

    pub fn timestamps_ms(&self) -> &[i64] {
        &self.timestamps
    }

    fn segment(&self, segment: u32) -> &[u8] {
        if segment == 0 {
            (*self.source).as_ref()
        } else {
            &self.inflated[segment as usize - 1]
        }
    }

    fn get(&self, s: Slice) -> Option<&[u8]> {
        (s.len != NULL).then(|| &self.segment(s.segment)[s.start as usize..s.start as usize + s.len as usize])
    }

    pub fn key(&self, i: usize) -> Option<&[u8]> {
        self.get(self.keys[i])
    }

    pub fn value(&self, i: usize) -> Option<&[u8]> {
        self.get(self.values[i])
    }

    /// Record `i`'s headers in order: (key, value), a key being UTF-8 text as producers write it.
    pub fn headers(&self, i: usize) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        let (from, to) = (self.header_starts[i] as usize, self.header_starts[i + 1] as usize);
        self.header_slices[from..to].iter().map(|&(k, v)| (self.get(k).unwrap_or_default(), self.get(v)))
    }

    /// The index of the first record at or past `offset` (`len()` when there is none).
    pub fn index_of(&self, offset: i64) -> usize {
        self.offsets.partition_point(|&o| o < offset)
    }

    /// The offsets of the records from index `from` on whose value is null (tombstones).
    pub fn tombstone_offsets(&self, from: usize) -> Vec<i64> {
        (from.min(self.len())..self.len()).filter(|&i| self.values[i].len == NULL).map(|i| self.offsets[i]).collect()
    }

    /// Counts over the records from index `from` on.
    pub fn summary(&self, from: usize) -> Summary {
        let mut s = Summary { max_timestamp_ms: i64::MIN, ..Summary::default() };
        if from >= self.len() {
            return Summary::default();
        }
        s.records = self.len() - from;
        s.first_offset = self.offsets[from];
        s.last_offset = *self.offsets.last().expect("not empty");
        for i in from..self.len() {
            let v = self.values[i];
            if v.len == NULL {
                s.tombstones += 1;
            } else {
                s.value_bytes += v.len as usize;
            }
            s.max_timestamp_ms = s.max_timestamp_ms.max(self.timestamps[i]);
        }
        s
    }
}

/// The type of a control batch's record (its key is a version and a type, both 16-bit).
fn control_type(records: &[u8]) -> Result<i16, String> {
    let mut r = Reader { data: records, at: 0 };
    let _length = r.varint()?;
    r.at += 1;
    r.varlong()?;
    r.varint()?;
    let key = r.bytes(0, "control key")?;
    if key.len == NULL || key.len < 4 {
        return Err("a control record's key is shorter than a version and a type".into());
    }
    Ok(be_i16(records, key.start as usize + 2))
}
