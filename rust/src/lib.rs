//! frazil's native core. `buffer` and `kafka` are pure Rust; `bindings` adapts them to Python.

pub mod buffer;
pub mod changes;
mod envelope;
pub mod kafka;
pub mod keyindex;
pub mod protobuf;
pub mod route;
pub mod transform;

#[cfg(feature = "python")]
mod bindings;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _native(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    use pyo3::prelude::*;
    m.add_class::<bindings::JsonBuffer>()?;
    m.add_class::<bindings::AvroBuffer>()?;
    m.add_class::<bindings::KeyIndex>()?;
    m.add_class::<bindings::ProtoSchemas>()?;
    m.add_class::<bindings::KeySchemas>()?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::protobuf_frame, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::route_groups, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::route_fetched, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::append_routed, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::transform_values, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::split_changes, m)?)?;
    m.add_function(pyo3::wrap_pyfunction!(bindings::read_fetch, m)?)?;
    m.add_class::<bindings::Fetched>()?;
    m.add_class::<bindings::FetchSummary>()?;
    m.add_class::<bindings::AppendResult>()?;
    m.add_class::<bindings::DecodeError>()?;
    m.add_class::<bindings::UnknownField>()?;
    m.add("NativeError", m.py().get_type::<bindings::NativeError>())?;
    m.add("BufferFullError", m.py().get_type::<bindings::BufferFullError>())?;
    m.add("UnknownSchemaError", m.py().get_type::<bindings::UnknownSchemaError>())?;
    m.add("CorruptBatchError", m.py().get_type::<bindings::CorruptBatchError>())?;
    m.add("ALIGNMENT", buffer::ALIGNMENT)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
