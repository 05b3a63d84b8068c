//! Thin pyo3 adapters over the pure core: convert arguments, release the GIL, convert results.

mod buffer;
mod changes;
mod kafka;
mod keyindex;
mod route;

pub use buffer::{
    append_routed, AppendResult, AvroBuffer, BufferFullError, DecodeError, JsonBuffer, NativeError, UnknownField,
    UnknownSchemaError,
};
pub use changes::split_changes;
pub use kafka::{read_fetch, CorruptBatchError, FetchSummary, Fetched};
pub use keyindex::KeyIndex;
pub use route::route_groups;
