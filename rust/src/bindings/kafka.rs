use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use super::errors::{fetch_err, NativeError};
use crate::kafka::{self, FetchOptions};

/// The fetched bytes, kept alive while records point into them.
struct Held(PyBackedBytes);

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Counts over the records of a fetch from one index on.
#[pyclass(module = "frazil._native", frozen, get_all)]
pub struct FetchSummary {
    records: usize,
    tombstones: usize,
    value_bytes: usize,
    first_offset: i64,
    last_offset: i64,
    max_timestamp_ms: i64,
}

/// One partition's fetched record set, read natively: records in offset order, none of them a
/// Python object until asked for.
#[pyclass(module = "frazil._native", frozen)]
pub struct Fetched {
    pub(crate) inner: kafka::Fetched,
}

/// Reads one partition's record set (message format v2) as a fetch response returned it.
#[pyfunction]
#[pyo3(signature = (data, *, fetch_offset, read_committed, aborted, check_crcs = true))]
pub fn read_fetch(
    py: Python<'_>,
    data: PyBackedBytes,
    fetch_offset: i64,
    read_committed: bool,
    aborted: Vec<(i64, i64)>,
    check_crcs: bool,
) -> PyResult<Fetched> {
    let options = FetchOptions { fetch_offset, read_committed, aborted, check_crcs };
    let source: kafka::Source = Arc::new(Held(data));
    let inner = py.detach(|| kafka::Fetched::parse(source, &options)).map_err(fetch_err)?;
    Ok(Fetched { inner })
}

type Columns<'py> = (
    Vec<i64>,
    Vec<i64>,
    Vec<Option<Bound<'py, PyBytes>>>,
    Vec<Option<Bound<'py, PyBytes>>>,
    Vec<Vec<(String, Option<Bound<'py, PyBytes>>)>>,
);

#[pymethods]
impl Fetched {
    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The next offset to fetch: past the last whole batch read.
    #[getter]
    fn next_offset(&self) -> i64 {
        self.inner.next_offset
    }

    #[getter]
    fn batches(&self) -> usize {
        self.inner.stats.batches
    }

    #[getter]
    fn control_batches(&self) -> usize {
        self.inner.stats.control_batches
    }

    #[getter]
    fn aborted_records(&self) -> usize {
        self.inner.stats.aborted_records
    }

    #[getter]
    fn batch_bytes(&self) -> usize {
        self.inner.stats.bytes
    }

    /// The index of the first record at or past ``offset``.
    fn index_of(&self, offset: i64) -> usize {
        self.inner.index_of(offset)
    }

    #[pyo3(signature = (start = 0))]
    fn summary(&self, start: usize) -> FetchSummary {
        let s = self.inner.summary(start);
        FetchSummary {
            records: s.records,
            tombstones: s.tombstones,
            value_bytes: s.value_bytes,
            first_offset: s.first_offset,
            last_offset: s.last_offset,
            max_timestamp_ms: s.max_timestamp_ms,
        }
    }

    /// The offsets of the records from index ``start`` on whose value is null (tombstones).
    #[pyo3(signature = (start = 0))]
    fn tombstones(&self, start: usize) -> Vec<i64> {
        self.inner.tombstone_offsets(start)
    }

    /// The records from index ``start`` on (or those at ``offsets``, sorted, when given) as
    /// columns: offsets, timestamps, keys, values, headers.
    #[pyo3(signature = (start = 0, offsets = None))]
    fn columns<'py>(&self, py: Python<'py>, start: usize, offsets: Option<Vec<i64>>) -> PyResult<Columns<'py>> {
        let f = &self.inner;
        let indices: Vec<usize> = match offsets {
            None => (start.min(f.len())..f.len()).collect(),
            Some(wanted) => wanted
                .iter()
                .map(|&o| (o, f.index_of(o)))
                .filter(|&(o, i)| i < f.len() && f.offsets()[i] == o)
                .map(|(_, i)| i)
                .collect(),
        };
        let bytes = |b: Option<&[u8]>| b.map(|b| PyBytes::new(py, b));
        let mut headers = Vec::with_capacity(indices.len());
        for &i in &indices {
            let mut these = Vec::new();
            for (k, v) in f.headers(i) {
                let key = std::str::from_utf8(k).map_err(|_| {
                    NativeError::new_err(format!(
                        "the record at offset {} has a header key that is not UTF-8",
                        f.offsets()[i]
                    ))
                })?;
                these.push((key.to_owned(), bytes(v)));
            }
            headers.push(these);
        }
        Ok((
            indices.iter().map(|&i| f.offsets()[i]).collect(),
            indices.iter().map(|&i| f.timestamps_ms()[i]).collect(),
            indices.iter().map(|&i| bytes(f.key(i))).collect(),
            indices.iter().map(|&i| bytes(f.value(i))).collect(),
            headers,
        ))
    }

    fn __repr__(&self) -> String {
        format!("Fetched(records={}, next_offset={})", self.inner.len(), self.inner.next_offset)
    }
}
