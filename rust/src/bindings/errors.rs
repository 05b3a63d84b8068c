//! The native exception classes and the one place the core's errors become them. Every other
//! binding imports from here, and nothing here imports another binding.

use arrow::error::ArrowError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;

use crate::buffer::BufferError;
use crate::kafka::FetchError;

create_exception!(_native, NativeError, PyException, "An error raised by frazil's native core.");

create_exception!(
    _native,
    BufferFullError,
    NativeError,
    "Appending would pass the buffer's byte cap; nothing was appended. Drain, then try again."
);

create_exception!(
    _native,
    UnknownSchemaError,
    NativeError,
    "Avro values name writer schemas the buffer has not been given; nothing was appended. \
     Register or refuse them, then append again."
);

create_exception!(
    _native,
    CorruptBatchError,
    NativeError,
    "A fetched record batch cannot be read (a CRC-32C mismatch, a malformed batch, an older message format); \
     nothing of the fetch was taken."
);

/// An Arrow error (a schema the buffer cannot use, a bad argument) as a NativeError.
pub(crate) fn arrow_err(e: ArrowError) -> PyErr {
    NativeError::new_err(e.to_string())
}

/// A refused append: BufferFullError with `(message, needed, used, cap)`, UnknownSchemaError
/// with `(message, schema_ids, of_keys)`, or a NativeError.
pub(crate) fn buffer_err(e: BufferError) -> PyErr {
    match e {
        BufferError::Full { needed, used, cap } => BufferFullError::new_err((e.to_string(), needed, used, cap)),
        BufferError::UnknownSchemas(ref ids) => UnknownSchemaError::new_err((e.to_string(), ids.clone(), false)),
        BufferError::UnknownKeySchemas(ref ids) => UnknownSchemaError::new_err((e.to_string(), ids.clone(), true)),
        BufferError::Arrow(e) => arrow_err(e),
    }
}

/// A fetch that cannot be read: CorruptBatchError with `(message, base_offset)` of the batch at fault.
pub(crate) fn fetch_err(e: FetchError) -> PyErr {
    let offset = match &e {
        FetchError::Corrupt { base_offset, .. }
        | FetchError::Malformed { base_offset, .. }
        | FetchError::Unsupported { base_offset, .. } => *base_offset,
    };
    CorruptBatchError::new_err((e.to_string(), offset))
}
