//! From checked values to one batch of rows: the single pass (`fast.rs`) for every value it reads
//! plainly, arrow-json for the few it leaves, and, where the single pass cannot run at all, the
//! arrow-json path over the whole chunk with probes that find its bad records.
//!
//! A record the single pass leaves is decoded alone by arrow-json: a row when arrow-json reads it
//! (a shape the single pass does not take), a bad record with arrow-json's reason when it does
//! not. So one bad record costs one small decode, not a decode of its chunk.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::{concat_batches, interleave_record_batch};
use arrow::error::ArrowError;
use arrow::json::reader::{Decoder, ReaderBuilder};

use super::fast::Decoded;
use super::validate::{self, Checked};
use super::{decoders, Appended, BufferError, JsonBuffer, RecordError, Records, UnknownFields, Values};

/// Records per probe on the arrow-json path, level by level: a failing block of 64 is probed as
/// blocks of 8, a failing block of 8 record by record. Good blocks cost about one decode.
const PROBE_BLOCKS: [usize; 3] = [64, 8, 1];

/// How many records of a chunk the single pass may leave before the chunk is arrow-json's whole:
/// each one left costs a decoder of its own.
fn most_left(rows: usize) -> usize {
    16 + rows / 16
}

impl JsonBuffer {
    /// The rows of `good` (indices into `records` that passed `validate::check`, values replaced
    /// by `rewritten`, sorted by index) as one batch, and the indices they came from, in order;
    /// the records found bad on the way are pushed to `out.errors`, sorted by index.
    pub(super) fn decode<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        mut good: Vec<usize>,
        mut rewritten: Vec<(usize, Vec<u8>)>,
        out: &mut Appended,
    ) -> Result<(RecordBatch, Vec<usize>), BufferError> {
        if let Some(fast) = &self.fast {
            let values = Values { original: records.values, rewritten: &rewritten };
            if let Some(Decoded { batch, left }) =
                fast.decode(|i| values.get(i), &good, &self.value_schema, most_left(good.len()))
            {
                self.single_pass_rows.fetch_add(batch.num_rows(), Ordering::Relaxed);
                if left.is_empty() {
                    return Ok((batch, good));
                }
                return self.rescue(records, good, batch, left, rewritten, out);
            }
            if self.options.fold_case {
                good = self.fold(records, good, &mut rewritten, out);
            }
        }
        self.exact(records, good, &rewritten, out)
    }

    /// The single pass's `batch` (the rows of `good` but `left`) with the rows arrow-json reads
    /// of `left`, in the order of `good`; the others of `left` are bad records.
    fn rescue<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        good: Vec<usize>,
        batch: RecordBatch,
        left: Vec<usize>,
        mut rewritten: Vec<(usize, Vec<u8>)>,
        out: &mut Appended,
    ) -> Result<(RecordBatch, Vec<usize>), BufferError> {
        let tried =
            if self.options.fold_case { self.fold(records, left.clone(), &mut rewritten, out) } else { left.clone() };
        let values = Values { original: records.values, rewritten: &rewritten };
        let mut rescued: Vec<(usize, RecordBatch)> = Vec::new();
        for i in tried {
            match self.decode_all(&values, &[i]) {
                Ok(row) => rescued.push((i, row)),
                Err(e) => out.errors.push(self.bad(records, &values, i, &e)),
            }
        }
        out.errors.sort_by_key(|e| e.index);
        // good, left and rescued are each in index order: walk them together
        let mut order: Vec<(usize, usize)> = Vec::with_capacity(good.len());
        let mut kept = Vec::with_capacity(good.len());
        let (mut next_left, mut next_rescued, mut row) = (0, 0, 0);
        for &i in &good {
            if left.get(next_left) == Some(&i) {
                next_left += 1;
                if rescued.get(next_rescued).is_some_and(|(r, _)| *r == i) {
                    order.push((1, next_rescued));
                    next_rescued += 1;
                    kept.push(i);
                }
            } else {
                order.push((0, row));
                row += 1;
                kept.push(i);
            }
        }
        if rescued.is_empty() {
            return Ok((batch, kept));
        }
        let rows: Vec<RecordBatch> = rescued.into_iter().map(|(_, b)| b).collect();
        let rescued = concat_batches(&self.value_schema, &rows)?;
        Ok((interleave_record_batch(&[&batch, &rescued], &order)?, kept))
    }

    /// `indices` with their fields renamed to the columns they match but for case (into
    /// `rewritten`, kept sorted); a record with two spellings of one column is a bad record.
    fn fold<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        indices: Vec<usize>,
        rewritten: &mut Vec<(usize, Vec<u8>)>,
        out: &mut Appended,
    ) -> Vec<usize> {
        let mut kept = Vec::with_capacity(indices.len());
        let mut renamed = Vec::new();
        let values = Values { original: records.values, rewritten: &rewritten[..] };
        for i in indices {
            match validate::check(values.get(i), self.value_schema.fields(), None, true) {
                Ok(Checked::Ok) => kept.push(i),
                Ok(Checked::Rewritten(value)) => {
                    renamed.push((i, value));
                    kept.push(i);
                }
                Err((field, reason)) => out.errors.push(self.record_error(records, i, field, reason)),
            }
        }
        for (i, value) in renamed {
            match rewritten.binary_search_by_key(&i, |(j, _)| *j) {
                Ok(k) => rewritten[k].1 = value,
                Err(k) => rewritten.insert(k, (i, value)),
            }
        }
        out.errors.sort_by_key(|e| e.index);
        kept
    }

    /// The arrow-json path over `good`: one decode when every record reads; otherwise probes find
    /// the records that do not, which become bad records, and the rest are decoded again.
    fn exact<V: AsRef<[u8]>, K: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        good: Vec<usize>,
        rewritten: &[(usize, Vec<u8>)],
        out: &mut Appended,
    ) -> Result<(RecordBatch, Vec<usize>), BufferError> {
        let values = Values { original: records.values, rewritten };
        if let Ok(batch) = self.decode_all(&values, &good) {
            return Ok((batch, good));
        }
        // Probe blocks of records with one reused decoder, then the records of a failing block
        // one by one; keep the others. Bad records cost a few block-sized decodes each, not a
        // decode of the whole chunk per halving.
        let mut kept = Vec::with_capacity(good.len());
        let mut bad = Vec::new();
        let mut prober = Prober { buffer: self, decoder: None, capacity: PROBE_BLOCKS[0] + 1 };
        prober.split(&values, &good, &PROBE_BLOCKS, &mut kept, &mut bad); // bad: decoded alone below, for the reason
        for i in bad {
            match self.decode_all(&values, &[i]) {
                Ok(_) => kept.push(i),
                Err(e) => out.errors.push(self.bad(records, &values, i, &e)),
            }
        }
        out.errors.sort_by_key(|e| e.index);
        kept.sort_unstable();
        Ok((self.decode_all(&values, &kept)?, kept))
    }

    /// Record `i` as a bad record, with the reason `error` (arrow-json's, decoding it alone) gives.
    fn bad<V: AsRef<[u8]>, K: AsRef<[u8]>, W: AsRef<[u8]>>(
        &self,
        records: &Records<'_, V, K>,
        values: &Values<'_, W>,
        i: usize,
        error: &ArrowError,
    ) -> RecordError {
        let (field, reason) = match validate::explain_syntax(values.get(i)) {
            Some(reason) => (String::new(), reason),
            None => validate::split_field(&error.to_string()),
        };
        let (field, reason) = validate::explain_unknown(self.value_schema.fields(), field, reason);
        self.record_error(records, i, field, reason)
    }

    fn decoder(&self, capacity: usize) -> Result<Decoder, ArrowError> {
        ReaderBuilder::new(self.value_schema.clone())
            .with_batch_size(capacity.max(1))
            .with_decoder_factory(Arc::new(decoders::Factory))
            .with_strict_mode(self.options.unknown_fields == UnknownFields::Reject)
            .build_decoder()
    }

    /// Decodes `indices` of `values`; a panic inside arrow-json becomes an error, so the slow
    /// path can pin it on the record that caused it instead of taking the process down.
    pub(super) fn decode_all<V: AsRef<[u8]>>(
        &self,
        values: &Values<'_, V>,
        indices: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.decode_unchecked(values, indices)))
            .unwrap_or_else(|panic| {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned());
                Err(ArrowError::JsonError(format!(
                    "the JSON decoder failed on this value ({})",
                    what.unwrap_or_default()
                )))
            })
    }

    /// Feeds the values to one arrow-json decoder, checking after each that it added exactly one
    /// complete row: a value holding two objects, or one whose text runs into the next value,
    /// fails the call (the slow path then finds it) instead of shifting rows against offsets.
    fn decode_unchecked<V: AsRef<[u8]>>(
        &self,
        values: &Values<'_, V>,
        indices: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        // One spare row, so a value with a second object is seen rather than left unconsumed.
        let mut decoder = self.decoder(indices.len() + 1)?;
        self.feed(&mut decoder, values, indices)
    }

    /// [`Self::decode_unchecked`] with a decoder of at least `indices.len() + 1` rows that holds
    /// nothing; after an error it holds a partial tape and must not be used again.
    fn feed<V: AsRef<[u8]>>(
        &self,
        decoder: &mut Decoder,
        values: &Values<'_, V>,
        indices: &[usize],
    ) -> Result<RecordBatch, ArrowError> {
        let not_one = || ArrowError::JsonError("value is not exactly one JSON object".into());
        for (k, &i) in indices.iter().enumerate() {
            let value = values.get(i);
            let mut pos = 0;
            while pos < value.len() {
                let used = decoder.decode(&value[pos..])?;
                if used == 0 {
                    return Err(not_one());
                }
                pos += used;
            }
            decoder.decode(b"\n")?;
            if decoder.has_partial_record() || decoder.len() != k + 1 {
                return Err(not_one());
            }
        }
        Ok(decoder.flush()?.unwrap_or_else(|| RecordBatch::new_empty(self.value_schema.clone())))
    }
}

/// The arrow-json path's probes: one decoder, reused while its probes succeed (a failed probe
/// leaves arrow-json's tape half-filled, so the next one builds a fresh decoder).
struct Prober<'b> {
    buffer: &'b JsonBuffer,
    decoder: Option<Decoder>,
    capacity: usize,
}

impl Prober<'_> {
    /// `indices` into those that decode (`kept`, in order) and single records that do not (`bad`),
    /// probing blocks of `sizes[0]`, then the records of a failing block in blocks of `sizes[1]`...
    fn split<V: AsRef<[u8]>>(
        &mut self,
        values: &Values<'_, V>,
        indices: &[usize],
        sizes: &[usize],
        kept: &mut Vec<usize>,
        bad: &mut Vec<usize>,
    ) {
        let Some((&size, smaller)) = sizes.split_first() else { return };
        for block in indices.chunks(size) {
            if self.fits(values, block) {
                kept.extend_from_slice(block);
            } else if block.len() == 1 {
                bad.push(block[0]);
            } else {
                self.split(values, block, smaller, kept, bad);
            }
        }
    }

    /// Whether `indices` (at most `capacity - 1` of them) decode together; a panic is a no.
    fn fits<V: AsRef<[u8]>>(&mut self, values: &Values<'_, V>, indices: &[usize]) -> bool {
        let decoder = match self.decoder.take() {
            Some(decoder) => decoder,
            None => match self.buffer.decoder(self.capacity) {
                Ok(decoder) => decoder,
                Err(_) => return false,
            },
        };
        let buffer = self.buffer;
        let probed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let mut decoder = decoder;
            buffer.feed(&mut decoder, values, indices).map(|_| decoder)
        }));
        match probed {
            Ok(Ok(decoder)) => {
                self.decoder = Some(decoder);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
