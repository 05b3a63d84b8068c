use arrow::datatypes::Schema;
use arrow::error::ArrowError;
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use std::sync::Arc;

use crate::buffer::{self, Records};

create_exception!(_native, NativeError, PyException, "An error raised by frazil's native core.");

fn to_py(e: ArrowError) -> PyErr {
    NativeError::new_err(e.to_string())
}

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

/// Decodes Kafka record values (JSON objects) into Arrow record batches of one schema.
#[pyclass(module = "frazil._native")]
pub struct JsonBuffer {
    inner: buffer::JsonBuffer,
}

#[pymethods]
impl JsonBuffer {
    #[new]
    #[pyo3(signature = (*, schema, metadata_columns = false))]
    fn new(schema: PyArrowType<Schema>, metadata_columns: bool) -> PyResult<Self> {
        let inner = buffer::JsonBuffer::new(Arc::new(schema.0), metadata_columns).map_err(to_py)?;
        Ok(Self { inner })
    }

    #[pyo3(signature = (*, topic, partition, offsets, timestamps_ms, keys, values))]
    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        py: Python<'_>,
        topic: &str,
        partition: i32,
        offsets: Vec<i64>,
        timestamps_ms: Vec<i64>,
        keys: Vec<Option<PyBackedBytes>>,
        values: Vec<PyBackedBytes>,
    ) -> PyResult<Vec<DecodeError>> {
        let inner = &mut self.inner;
        let errors = py
            .detach(|| {
                inner.append(&Records {
                    topic,
                    partition,
                    offsets: &offsets,
                    timestamps_ms: &timestamps_ms,
                    keys: &keys,
                    values: &values,
                })
            })
            .map_err(to_py)?;
        Ok(errors
            .into_iter()
            .map(|e| DecodeError { index: e.index, partition: e.partition, offset: e.offset, field: e.field, reason: e.reason })
            .collect())
    }

    fn drain(&mut self, py: Python<'_>) -> PyResult<Option<PyArrowType<RecordBatch>>> {
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.drain()).map_err(to_py)?.map(PyArrowType))
    }

    fn clear(&mut self) {
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
    fn schema(&self) -> PyArrowType<Schema> {
        PyArrowType(self.inner.schema().as_ref().clone())
    }
}
