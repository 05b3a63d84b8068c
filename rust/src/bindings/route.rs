use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;

use super::kafka::Fetched;
use crate::route::{self, Key};

/// What [`route_groups`] returns: the groups (keys, indices), the malformed values (index, why).
type Grouped = (Vec<(Vec<Key>, Vec<u32>)>, Vec<(u32, String)>);

/// Records grouped by the values at ``paths`` (each a list of field names) of their JSON values:
/// ``([(keys, indices), ...], [(index, reason), ...])``, groups in order of first appearance, a key
/// being the value as text, or None when missing, null, an object or an array; then the values
/// that are not one JSON object, with why. Runs without the GIL.
#[pyfunction]
#[pyo3(signature = (values, paths))]
pub fn route_groups(py: Python<'_>, values: Vec<PyBackedBytes>, paths: Vec<Vec<String>>) -> Grouped {
    let found = py.detach(|| route::group(&values, &paths));
    (found.groups, found.malformed)
}

/// What [`route_fetched`] returns: the groups (keys, indices, value bytes), the malformed values.
type FetchedGrouped = (Vec<(Vec<Key>, Vec<u32>, u64)>, Vec<(u32, String)>);

/// As [`route_groups`], over the records of ``fetched`` from index ``start`` on that have a value,
/// read straight from the fetched bytes: indices are the fetch's, and each group carries the
/// value bytes of its records. Runs without the GIL.
#[pyfunction]
#[pyo3(signature = (fetched, start, paths))]
pub fn route_fetched(py: Python<'_>, fetched: &Fetched, start: usize, paths: Vec<Vec<String>>) -> FetchedGrouped {
    let inner = &fetched.inner;
    let found = py.detach(|| route::group_fetched(inner, start, &paths));
    (found.groups, found.malformed)
}
