//! 64-byte alignment for drained batches. arrow-rs allocations are 64-byte aligned, but arrays
//! built from a `Vec` (as some of arrow-json's are) only have their element's alignment; those
//! buffers are copied once, the rest are passed through untouched.

use std::sync::Arc;

use arrow::array::ArrayData;
use arrow::array::{make_array, ArrayRef, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer};
use arrow::error::ArrowError;

pub const ALIGNMENT: usize = 64;

pub(crate) fn is_aligned(buffer: &Buffer) -> bool {
    buffer.is_empty() || (buffer.as_ptr() as usize).is_multiple_of(ALIGNMENT)
}

fn aligned(buffer: &Buffer) -> Buffer {
    if is_aligned(buffer) {
        return buffer.clone();
    }
    let mut copy = MutableBuffer::with_capacity(buffer.len());
    copy.extend_from_slice(buffer.as_slice());
    copy.into()
}

fn align_data(data: &ArrayData) -> ArrayData {
    let buffers = data.buffers().iter().map(aligned).collect();
    let children = data.child_data().iter().map(align_data).collect();
    let nulls = data.nulls().map(|n| {
        let bits = n.inner();
        NullBuffer::new(BooleanBuffer::new(aligned(bits.inner()), bits.offset(), bits.len()))
    });
    let builder = data.clone().into_builder().buffers(buffers).child_data(children).nulls(nulls);
    // SAFETY: the same bytes, lengths and offsets as `data`, which was valid; only the memory
    // they live in may have moved.
    unsafe { builder.build_unchecked() }
}

pub(crate) fn align_batch(batch: RecordBatch) -> Result<RecordBatch, ArrowError> {
    let columns: Vec<ArrayRef> = batch.columns().iter().map(|c| make_array(align_data(&c.to_data()))).collect();
    RecordBatch::try_new(Arc::clone(&batch.schema()), columns)
}
