//! Protobuf schemas for the JSON buffer, shared by every buffer of a pipeline.

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use super::errors::NativeError;
use crate::protobuf;

/// The compiled Protobuf schemas of a pipeline by schema id (each a ``.proto`` file's text, as the
/// registry keeps it), read by every :class:`JsonBuffer` made with them.
#[pyclass(module = "frazil._native", frozen)]
pub struct ProtoSchemas {
    pub(crate) inner: Arc<protobuf::ProtoSchemas>,
}

#[pymethods]
impl ProtoSchemas {
    #[new]
    fn new() -> Self {
        Self { inner: Arc::new(protobuf::ProtoSchemas::default()) }
    }

    /// Records of schema ``id`` are read with ``text``; NativeError when it does not compile.
    fn register(&self, id: u32, text: &str) -> PyResult<()> {
        self.inner.register(id, text).map_err(NativeError::new_err)
    }

    /// Every record of schema ``id`` is a bad record, for ``reason``.
    fn refuse(&self, id: u32, reason: String) {
        self.inner.refuse(id, reason);
    }

    /// Plain values' schema from a descriptor set (``protoc --include_imports
    /// --descriptor_set_out``, ``buf build -o``): the file defining ``message`` (or with "" the
    /// set's last file), registered under id 0. NativeError when it is not a descriptor set or
    /// has no such message.
    fn register_descriptor_set(&self, data: &[u8], message: &str) -> PyResult<()> {
        self.inner.register_descriptor_set(data, message).map_err(NativeError::new_err)
    }

    /// Every value is a bare ``message`` (its full name, or "" for the first) of the file
    /// registered under id 0, read without a frame: its full name and message indexes.
    /// NativeError when the file has no such message.
    fn read_plain(&self, message: &str) -> PyResult<(String, Vec<i64>)> {
        self.inner.read_plain(message).map_err(NativeError::new_err)
    }

    fn known(&self, id: u32) -> bool {
        self.inner.known(id)
    }

    /// The columns of the message of schema ``id`` at ``indexes``: (field, column type in the
    /// declared-column grammar). NativeError naming the field that cannot be a column.
    fn columns(&self, id: u32, indexes: Vec<i64>) -> PyResult<Vec<(String, String)>> {
        self.inner.columns(id, &indexes).map_err(NativeError::new_err)
    }
}

/// The key schemas of a pipeline by registry id (Avro, Protobuf, JSON Schema), read by every
/// buffer made with them whose key columns take fields of keys in the Confluent wire format.
#[pyclass(module = "frazil._native", frozen)]
pub struct KeySchemas {
    pub(crate) inner: Arc<crate::buffer::KeySchemas>,
}

#[pymethods]
impl KeySchemas {
    #[new]
    fn new() -> Self {
        Self { inner: Arc::new(crate::buffer::KeySchemas::default()) }
    }

    /// Keys of schema ``id`` are read as ``kind`` ("AVRO", "PROTOBUF" or "JSON", the registry's
    /// schemaType) with ``text``; NativeError when it cannot be read.
    fn register(&self, id: u32, kind: &str, text: &str) -> PyResult<()> {
        match kind {
            "AVRO" => self.inner.register_avro(id, text),
            "PROTOBUF" => self.inner.register_protobuf(id, text),
            "JSON" => {
                self.inner.register_json(id);
                Ok(())
            }
            other => Err(format!("schema type {other:?} is not one of AVRO, PROTOBUF, JSON")),
        }
        .map_err(NativeError::new_err)
    }

    /// Every key of schema ``id`` is unreadable, for ``reason`` (its records are bad records).
    fn refuse(&self, id: u32, reason: String) {
        self.inner.refuse(id, reason);
    }

    fn known(&self, id: u32) -> bool {
        self.inner.known(id)
    }
}

/// The schema id and message indexes of a Protobuf value in the Confluent wire format;
/// ValueError when it is not in that format.
#[pyfunction]
pub fn protobuf_frame(value: &[u8]) -> PyResult<(u32, Vec<i64>)> {
    let (id, indexes, _) = protobuf::split(value).map_err(PyValueError::new_err)?;
    Ok((id, indexes))
}
