//! Thin pyo3 adapters over the pure core: convert arguments, release the GIL, convert results.

mod buffer;
mod changes;
mod errors;
mod kafka;
mod keyindex;
mod protobuf;
mod route;

pub use buffer::{append_routed, transform_values, AppendResult, AvroBuffer, DecodeError, JsonBuffer, UnknownField};
pub use changes::split_changes;
pub use errors::{BufferFullError, CorruptBatchError, NativeError, UnknownSchemaError};
pub use kafka::{read_fetch, FetchSummary, Fetched};
pub use keyindex::KeyIndex;
pub use protobuf::{protobuf_frame, KeySchemas, ProtoSchemas};
pub use route::{route_fetched, route_groups};
