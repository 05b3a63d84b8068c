use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::{Array, ArrayRef, UInt32Array};
use arrow::datatypes::Schema;
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::prelude::*;

use super::errors::{arrow_err, NativeError};
use crate::keyindex;

/// Per committed key of a keyed table (its identifier columns), the data file and row position
/// holding it. Keys cross as record batches of the key columns, in the schema given at creation;
/// the work runs without the GIL.
#[pyclass(module = "frazil._native", frozen)]
pub struct KeyIndex {
    inner: Mutex<keyindex::KeyIndex>,
    schema: Arc<Schema>,
}

impl KeyIndex {
    fn lock(&self) -> MutexGuard<'_, keyindex::KeyIndex> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn columns(&self, keys: &RecordBatch) -> PyResult<Vec<ArrayRef>> {
        if keys.schema().fields().len() != self.schema.fields().len()
            || keys.schema().fields().iter().zip(self.schema.fields()).any(|(a, b)| a.data_type() != b.data_type())
        {
            return Err(NativeError::new_err(format!(
                "keys must have the index's key columns {:?}, got {:?}",
                self.schema.fields().iter().map(|f| (f.name(), f.data_type())).collect::<Vec<_>>(),
                keys.schema().fields().iter().map(|f| (f.name(), f.data_type())).collect::<Vec<_>>()
            )));
        }
        Ok(keys.columns().to_vec())
    }
}

#[pymethods]
impl KeyIndex {
    #[new]
    fn new(schema: PyArrowType<Schema>) -> PyResult<Self> {
        let schema = Arc::new(schema.0);
        let inner = keyindex::KeyIndex::new(&schema).map_err(arrow_err)?;
        Ok(Self { inner: Mutex::new(inner), schema })
    }

    /// The rows of ``keys`` are at ``positions`` of data file ``path``.
    fn add(&self, py: Python<'_>, keys: PyArrowType<RecordBatch>, path: &str, positions: Vec<u32>) -> PyResult<()> {
        let columns = self.columns(&keys.0)?;
        py.detach(|| self.lock().add(&columns, path, &positions)).map_err(arrow_err)
    }

    /// Every committed position of ``keys`` as ``[(path, positions), ...]``, sorted.
    fn positions(&self, py: Python<'_>, keys: PyArrowType<RecordBatch>) -> PyResult<Vec<(String, Vec<u32>)>> {
        let columns = self.columns(&keys.0)?;
        py.detach(|| self.lock().positions(&columns)).map_err(arrow_err)
    }

    /// ``keys`` are no longer in the table.
    fn forget(&self, py: Python<'_>, keys: PyArrowType<RecordBatch>) -> PyResult<()> {
        let columns = self.columns(&keys.0)?;
        py.detach(|| self.lock().forget(&columns)).map_err(arrow_err)
    }

    /// Rows no longer where the index has them, in one pass: every row of the data files in
    /// ``files``, and those at the positions listed per file in ``positions`` (``[(path,
    /// [pos, ...]), ...]``). Keys found elsewhere keep their other positions. Returns how many
    /// positions were dropped.
    fn forget_at(&self, py: Python<'_>, files: Vec<String>, positions: Vec<(String, Vec<u32>)>) -> usize {
        py.detach(|| self.lock().forget_at(&files, &positions))
    }

    /// Every entry, for a checkpoint: ``(files, batches)``, each batch of at most ``batch_rows``
    /// rows: the key columns, ``file`` (an index into ``files``) and ``pos``.
    fn export(&self, py: Python<'_>, batch_rows: usize) -> PyResult<(Vec<String>, Vec<PyArrowType<RecordBatch>>)> {
        let (files, batches) = py.detach(|| self.lock().export(&self.schema, batch_rows)).map_err(arrow_err)?;
        Ok((files, batches.into_iter().map(PyArrowType).collect()))
    }

    /// A batch of an :meth:`export` (``files`` its file list) back into the index.
    fn load(&self, py: Python<'_>, files: Vec<String>, batch: PyArrowType<RecordBatch>) -> PyResult<()> {
        let batch = batch.0;
        let width = self.schema.fields().len();
        if batch.num_columns() != width + 2 {
            return Err(NativeError::new_err(format!(
                "a key index batch has the {width} key column(s), file and pos; got {} columns",
                batch.num_columns()
            )));
        }
        let keys = RecordBatch::try_new(
            Arc::new(Schema::new(batch.schema().fields()[..width].to_vec())),
            batch.columns()[..width].to_vec(),
        )
        .map_err(arrow_err)?;
        let columns = self.columns(&keys)?;
        let ids = |i: usize| -> PyResult<Vec<u32>> {
            batch
                .column(i)
                .as_any()
                .downcast_ref::<UInt32Array>()
                .map(|a| a.values().to_vec())
                .ok_or_else(|| NativeError::new_err("a key index batch's file and pos are uint32"))
        };
        let (file, pos) = (ids(width)?, ids(width + 1)?);
        py.detach(|| self.lock().load(&columns, &files, &file, &pos)).map_err(arrow_err)
    }

    fn __len__(&self) -> usize {
        self.lock().len()
    }

    /// Keys found more than once.
    #[getter]
    fn duplicated(&self) -> usize {
        self.lock().duplicated()
    }

    /// An estimate of the heap the index holds.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.lock().memory_bytes()
    }
}
