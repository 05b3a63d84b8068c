use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::changes::{self, Change, Spec};

/// What [`split_changes`] returns: the kinds, the rows, the bad records.
type Split<'py> = (Bound<'py, PyBytes>, Vec<Option<Bound<'py, PyBytes>>>, Vec<(usize, String, String)>);

/// Per record: its kind (``b"\x01"`` upsert, ``b"\x02"`` delete, ``b"\x00"`` bad) in one bytes
/// object, its row as a slice of the value (None when bad), and the bad ones as
/// ``(index, field, reason)``. Runs without the GIL; only the rows are copied out.
#[pyfunction]
#[pyo3(signature = (values, *, op, after, before, upsert_ops, delete_ops, unwrap_envelope, units = vec![], decimals = vec![], keys = vec![], case_insensitive = false))]
#[allow(clippy::too_many_arguments)] // one argument per keyword of the Python signature
pub fn split_changes<'py>(
    py: Python<'py>,
    values: Vec<PyBackedBytes>,
    op: Vec<String>,
    after: Vec<String>,
    before: Vec<String>,
    upsert_ops: Vec<String>,
    delete_ops: Vec<String>,
    unwrap_envelope: bool,
    units: Vec<(String, String)>,
    decimals: Vec<String>,
    keys: Vec<String>,
    case_insensitive: bool,
) -> Split<'py> {
    let spec =
        Spec { op, after, before, upsert_ops, delete_ops, unwrap_envelope, units, decimals, keys, case_insensitive };
    let found: Vec<Change> = py.detach(|| changes::split_all(&values, &spec));
    let mut kinds = Vec::with_capacity(found.len());
    let mut rows = Vec::with_capacity(found.len());
    let mut bad = Vec::new();
    for (i, change) in found.into_iter().enumerate() {
        match change {
            Change::Upsert(row) => {
                kinds.push(1u8);
                rows.push(Some(PyBytes::new(py, &row)));
            }
            Change::Delete(row) => {
                kinds.push(2u8);
                rows.push(Some(PyBytes::new(py, &row)));
            }
            Change::Bad { field, reason } => {
                kinds.push(0u8);
                rows.push(None);
                bad.push((i, field, reason));
            }
        }
    }
    (PyBytes::new(py, &kinds), rows, bad)
}
