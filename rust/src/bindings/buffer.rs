use arrow::datatypes::Schema;
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;
use std::sync::Arc;

use super::errors::{arrow_err, buffer_err, NativeError};
use super::kafka::Fetched;
use crate::buffer::avro::{self, Framing};
use crate::buffer::{self, BufferError, Options, Records, UnknownFields};
use crate::transform::Transforms;

/// A record that could not be decoded; the batch it came in was kept without it.
#[pyclass(module = "frazil._native", frozen, get_all)]
pub struct DecodeError {
    index: usize,
    partition: i32,
    offset: i64,
    field: String,
    reason: String,
}

#[pymethods]
impl DecodeError {
    fn __repr__(&self) -> String {
        format!(
            "DecodeError(index={}, partition={}, offset={}, field={:?}, reason={:?})",
            self.index, self.partition, self.offset, self.field, self.reason
        )
    }
}

/// A field of a record that the schema does not have.
#[pyclass(module = "frazil._native", frozen, get_all)]
pub struct UnknownField {
    index: usize,
    offset: i64,
    path: String,
}

#[pymethods]
impl UnknownField {
    fn __repr__(&self) -> String {
        format!("UnknownField(index={}, offset={}, path={:?})", self.index, self.offset, self.path)
    }
}

/// What one `append` did.
#[pyclass(module = "frazil._native", frozen, get_all)]
pub struct AppendResult {
    rows: usize,
    errors: Vec<Py<DecodeError>>,
    unknown_fields: Vec<Py<UnknownField>>,
    fields_ignored: usize,
    filtered: usize,
}

/// One record's headers as Python hands them: (name, value).
type PyHeaders = Vec<(PyBackedBytes, Option<PyBackedBytes>)>;

/// Each record's headers as the buffer reads them, borrowed from Python's.
fn borrow_headers(headers: &Option<Vec<PyHeaders>>) -> Option<Vec<buffer::Headers<'_>>> {
    headers.as_ref().map(|records| {
        records.iter().map(|h| h.iter().map(|(k, v)| (k.as_ref(), v.as_ref().map(|v| v.as_ref()))).collect()).collect()
    })
}

/// Decodes Kafka record values (JSON objects) into Arrow record batches of one schema.
#[pyclass(module = "frazil._native", frozen)]
pub struct JsonBuffer {
    inner: buffer::JsonBuffer,
}

#[pymethods]
impl JsonBuffer {
    #[new]
    #[pyo3(signature = (
        *, schema, metadata_columns = false, max_bytes = None, shards = 16, unknown_fields = "reject",
        dedupe_by_key = false, fold_case = false, single_pass = true, header_columns = Vec::new(),
        headers_column = None, key_columns = Vec::new(), key_schemas = None, confluent = false, protobuf = None,
        transforms = None
    ))]
    #[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
    fn new(
        schema: PyArrowType<Schema>,
        metadata_columns: bool,
        max_bytes: Option<usize>,
        shards: usize,
        unknown_fields: &str,
        dedupe_by_key: bool,
        fold_case: bool,
        single_pass: bool,
        header_columns: Vec<(String, Vec<u8>)>,
        headers_column: Option<String>,
        key_columns: Vec<(String, String)>,
        key_schemas: Option<PyRef<'_, super::KeySchemas>>,
        confluent: bool,
        protobuf: Option<PyRef<'_, super::ProtoSchemas>>,
        transforms: Option<&str>,
    ) -> PyResult<Self> {
        let unknown_fields = unknown_fields.parse::<UnknownFields>().map_err(PyValueError::new_err)?;
        let transforms = transforms.map(Transforms::parse).transpose().map_err(NativeError::new_err)?;
        let options = Options {
            metadata_columns,
            max_bytes,
            shards,
            unknown_fields,
            dedupe_by_key,
            fold_case,
            single_pass,
            header_columns,
            headers_column,
            key_columns,
            key_schemas: key_schemas.map(|k| k.inner.clone()),
            confluent,
            protobuf: protobuf.map(|p| p.inner.clone()),
            transforms: transforms.map(Arc::new),
        };
        let inner = buffer::JsonBuffer::new(Arc::new(schema.0), options).map_err(arrow_err)?;
        Ok(Self { inner })
    }

    #[pyo3(signature = (*, topic, partition, offsets, timestamps_ms, keys, values, headers = None))]
    #[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
    fn append(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        offsets: Vec<i64>,
        timestamps_ms: Vec<i64>,
        keys: Vec<Option<PyBackedBytes>>,
        values: Vec<PyBackedBytes>,
        headers: Option<Vec<PyHeaders>>,
    ) -> PyResult<AppendResult> {
        let inner = &self.inner;
        let done = py
            .detach(|| {
                let borrowed = borrow_headers(&headers);
                inner.append(&Records {
                    topic,
                    partition,
                    offsets: &offsets,
                    timestamps_ms: &timestamps_ms,
                    keys: &keys,
                    values: &values,
                    headers: borrowed.as_deref(),
                })
            })
            .map_err(buffer_err)?;
        to_result(py, done)
    }

    /// The records of ``fetched`` from index ``start`` on that have a value, or those at ``at``
    /// (ascending indices of records with a value: a routed share), decoded without the GIL.
    #[pyo3(signature = (*, topic, partition, fetched, start = 0, at = None))]
    fn append_fetched(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        fetched: &Fetched,
        start: usize,
        at: Option<Vec<u32>>,
    ) -> PyResult<AppendResult> {
        if at.is_some() && start != 0 {
            return Err(NativeError::new_err("append_fetched takes start or at, not both"));
        }
        let (inner, fetched) = (&self.inner, &fetched.inner);
        let done = py
            .detach(|| match &at {
                None => inner.append_fetched(topic, partition, fetched, start),
                Some(indices) => inner.append_fetched_at(topic, partition, fetched, indices),
            })
            .map_err(buffer_err)?;
        to_result(py, done)
    }

    fn drain(&self, py: Python<'_>) -> PyResult<Option<PyArrowType<RecordBatch>>> {
        let inner = &self.inner;
        Ok(py.detach(|| inner.drain()).map_err(arrow_err)?.map(PyArrowType))
    }

    #[pyo3(signature = (*, min_rows = 0))]
    fn drain_batches(&self, py: Python<'_>, min_rows: usize) -> PyResult<Vec<PyArrowType<RecordBatch>>> {
        let inner = &self.inner;
        Ok(py.detach(|| inner.drain_batches(min_rows)).map_err(arrow_err)?.into_iter().map(PyArrowType).collect())
    }

    fn clear(&self) {
        self.inner.clear();
    }

    #[getter]
    fn rows(&self) -> usize {
        self.inner.rows()
    }

    #[getter]
    fn bytes(&self) -> usize {
        self.inner.bytes()
    }

    #[getter]
    fn max_bytes(&self) -> Option<usize> {
        self.inner.max_bytes()
    }

    #[getter]
    fn single_pass_rows(&self) -> usize {
        self.inner.single_pass_rows()
    }

    #[getter]
    fn schema(&self) -> PyArrowType<Schema> {
        PyArrowType(self.inner.schema().as_ref().clone())
    }
}

/// One batch of one topic-partition appended to several buffers, each taking the records at its
/// indices (routing: a record may go to several). The columns are converted once; the decoding
/// runs without the GIL. Returns one result per target, in order. Buffers shared by several
/// targets, or a buffer that is full, fail the call after the targets before it were appended:
/// give each buffer once, without a byte cap.
#[pyfunction]
#[pyo3(signature = (*, topic, partition, offsets, timestamps_ms, keys, values, targets))]
#[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
pub fn append_routed(
    py: Python<'_>,
    topic: &str,
    partition: i32,
    offsets: Vec<i64>,
    timestamps_ms: Vec<i64>,
    keys: Vec<Option<PyBackedBytes>>,
    values: Vec<PyBackedBytes>,
    targets: Vec<(Bound<'_, JsonBuffer>, Vec<u32>)>,
) -> PyResult<Vec<AppendResult>> {
    let n = values.len();
    if offsets.len() != n || timestamps_ms.len() != n || keys.len() != n {
        return Err(NativeError::new_err("offsets, timestamps, keys and values must have the same length"));
    }
    if let Some(bad) = targets.iter().flat_map(|(_, idx)| idx.iter()).find(|&&i| i as usize >= n) {
        return Err(NativeError::new_err(format!("index {bad} is out of range for {n} records")));
    }
    let buffers: Vec<(&buffer::JsonBuffer, &[u32])> =
        targets.iter().map(|(b, idx)| (&b.get().inner, idx.as_slice())).collect();
    let done = py.detach(|| {
        let mut out = Vec::with_capacity(buffers.len());
        for (buf, idx) in &buffers {
            let sel_offsets: Vec<i64> = idx.iter().map(|&i| offsets[i as usize]).collect();
            let sel_times: Vec<i64> = idx.iter().map(|&i| timestamps_ms[i as usize]).collect();
            let sel_keys: Vec<Option<&[u8]>> = idx.iter().map(|&i| keys[i as usize].as_deref()).collect();
            let sel_values: Vec<&[u8]> = idx.iter().map(|&i| values[i as usize].as_ref()).collect();
            out.push(buf.append(&Records {
                topic,
                partition,
                offsets: &sel_offsets,
                timestamps_ms: &sel_times,
                keys: &sel_keys,
                values: &sel_values,
                headers: None,
            })?);
        }
        Ok::<_, BufferError>(out)
    });
    done.map_err(buffer_err)?.into_iter().map(|d| to_result(py, d)).collect()
}

/// What one append did, as Python objects.
fn to_result(py: Python<'_>, done: buffer::Appended) -> PyResult<AppendResult> {
    let errors = done
        .errors
        .into_iter()
        .map(|e| {
            Py::new(
                py,
                DecodeError {
                    index: e.index,
                    partition: e.partition,
                    offset: e.offset,
                    field: e.field,
                    reason: e.reason,
                },
            )
        })
        .collect::<PyResult<_>>()?;
    let unknown_fields = done
        .unknown_fields
        .into_iter()
        .map(|u| Py::new(py, UnknownField { index: u.index, offset: u.offset, path: u.path }))
        .collect::<PyResult<_>>()?;
    Ok(AppendResult {
        rows: done.rows,
        errors,
        unknown_fields,
        fields_ignored: done.fields_ignored,
        filtered: done.filtered,
    })
}

/// Each value (a JSON object) through the transforms of `spec` (see `transform.rs`): its
/// transformed JSON, or None when they filter it out or it does not fit them (a bad record when
/// it is appended). For what a table's schema is made or changed from.
#[pyfunction]
pub fn transform_values(py: Python<'_>, spec: &str, values: Vec<PyBackedBytes>) -> PyResult<Vec<Option<Py<PyBytes>>>> {
    use crate::transform::Outcome;
    let transforms = Transforms::parse(spec).map_err(NativeError::new_err)?;
    let out: Vec<Option<Vec<u8>>> = py.detach(|| {
        values
            .iter()
            .map(|v| match transforms.apply(v.as_ref()) {
                Outcome::Json(json) => Some(json),
                Outcome::Filtered | Outcome::Bad { .. } => None,
            })
            .collect()
    });
    Ok(out.into_iter().map(|v| v.map(|json| PyBytes::new(py, &json).unbind())).collect())
}

/// Decodes Kafka record values (Avro datums, plain or in the Confluent wire format) into Arrow
/// record batches of one schema; each writer schema is registered (or refused) first.
#[pyclass(module = "frazil._native", frozen)]
pub struct AvroBuffer {
    inner: avro::AvroBuffer,
}

#[pymethods]
impl AvroBuffer {
    #[new]
    #[pyo3(signature = (
        *, schema, confluent, metadata_columns = false, max_bytes = None, shards = 16, header_columns = Vec::new(),
        headers_column = None, key_columns = Vec::new(), key_schemas = None
    ))]
    #[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
    fn new(
        schema: PyArrowType<Schema>,
        confluent: bool,
        metadata_columns: bool,
        max_bytes: Option<usize>,
        shards: usize,
        header_columns: Vec<(String, Vec<u8>)>,
        headers_column: Option<String>,
        key_columns: Vec<(String, String)>,
        key_schemas: Option<PyRef<'_, super::KeySchemas>>,
    ) -> PyResult<Self> {
        let options = Options {
            metadata_columns,
            max_bytes,
            shards,
            header_columns,
            headers_column,
            key_columns,
            key_schemas: key_schemas.map(|k| k.inner.clone()),
            ..Options::default()
        };
        let framing = if confluent { Framing::Confluent } else { Framing::Plain };
        let inner = avro::AvroBuffer::new(Arc::new(schema.0), options, framing).map_err(arrow_err)?;
        Ok(Self { inner })
    }

    #[pyo3(signature = (id, writer, reader, ignored = 0))]
    fn register(&self, id: u32, writer: &str, reader: &str, ignored: usize) -> PyResult<()> {
        self.inner.register(id, writer, reader, ignored).map_err(arrow_err)
    }

    fn refuse(&self, id: u32, field: String, reason: String) {
        self.inner.refuse(id, field, reason);
    }

    #[pyo3(signature = (*, topic, partition, offsets, timestamps_ms, keys, values, headers = None))]
    #[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
    fn append(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        offsets: Vec<i64>,
        timestamps_ms: Vec<i64>,
        keys: Vec<Option<PyBackedBytes>>,
        values: Vec<PyBackedBytes>,
        headers: Option<Vec<PyHeaders>>,
    ) -> PyResult<AppendResult> {
        let inner = &self.inner;
        let done = py
            .detach(|| {
                let borrowed = borrow_headers(&headers);
                inner.append(&Records {
                    topic,
                    partition,
                    offsets: &offsets,
                    timestamps_ms: &timestamps_ms,
                    keys: &keys,
                    values: &values,
                    headers: borrowed.as_deref(),
                })
            })
            .map_err(buffer_err)?;
        to_result(py, done)
    }

    /// The records of ``fetched`` from index ``start`` on that have a value, decoded without the GIL.
    #[pyo3(signature = (*, topic, partition, fetched, start = 0))]
    fn append_fetched(
        &self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        fetched: &Fetched,
        start: usize,
    ) -> PyResult<AppendResult> {
        let (inner, fetched) = (&self.inner, &fetched.inner);
        let done = py.detach(|| inner.append_fetched(topic, partition, fetched, start)).map_err(buffer_err)?;
        to_result(py, done)
    }

    #[pyo3(signature = (*, min_rows = 0))]
    fn drain_batches(&self, py: Python<'_>, min_rows: usize) -> PyResult<Vec<PyArrowType<RecordBatch>>> {
        let inner = self.inner.core();
        Ok(py.detach(|| inner.drain_batches(min_rows)).map_err(arrow_err)?.into_iter().map(PyArrowType).collect())
    }

    fn clear(&self) {
        self.inner.core().clear();
    }

    #[getter]
    fn rows(&self) -> usize {
        self.inner.core().rows()
    }

    #[getter]
    fn bytes(&self) -> usize {
        self.inner.core().bytes()
    }

    #[getter]
    fn schema(&self) -> PyArrowType<Schema> {
        PyArrowType(self.inner.core().schema().as_ref().clone())
    }
}
