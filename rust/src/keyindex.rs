//! The key index of a keyed table: per committed key (the identifier columns' values, row-encoded
//! by arrow-row so any key types compare as bytes), the data file and row position holding it.
//! One entry costs the key's encoded bytes plus about 40 bytes of table; a key found more than
//! once (a table written before it was keyed) keeps its other positions on the side. Pure Rust,
//! no pyo3.

use std::collections::{HashMap, HashSet};

use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::row::{RowConverter, SortField};

/// The keys' hasher: foldhash (hashbrown's own default; the index hashes keys it was given by the
/// table, not by an adversary), several times faster than std's SipHash on short keys.
type Fast = foldhash::fast::RandomState;

/// Where a committed row is: an index into the index's file list, and the row's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    file: u32,
    pos: u32,
}

pub struct KeyIndex {
    converter: RowConverter,
    rows: HashMap<Box<[u8]>, Loc, Fast>,
    more: HashMap<Box<[u8]>, Vec<Loc>, Fast>,
    files: Vec<String>,
    file_ids: HashMap<String, u32>,
    key_bytes: usize,
}

impl KeyIndex {
    pub fn new(schema: &SchemaRef) -> Result<Self, ArrowError> {
        let fields = schema.fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
        Ok(Self {
            converter: RowConverter::new(fields)?,
            rows: HashMap::default(),
            more: HashMap::default(),
            files: Vec::new(),
            file_ids: HashMap::new(),
            key_bytes: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Keys found more than once.
    pub fn duplicated(&self) -> usize {
        self.more.len()
    }

    /// An estimate of the heap the index holds: keys, table slots, side entries and file paths.
    pub fn memory_bytes(&self) -> usize {
        let slot = std::mem::size_of::<(Box<[u8]>, Loc)>() + 1;
        self.key_bytes
            + self.rows.capacity() * slot
            + self.more.values().map(|v| v.capacity() * std::mem::size_of::<Loc>() + slot).sum::<usize>()
            + self.files.iter().map(|f| 2 * f.len() + 48).sum::<usize>()
    }

    fn encode(&self, columns: &[ArrayRef]) -> Result<arrow::row::Rows, ArrowError> {
        self.converter.convert_columns(columns)
    }

    fn file_id(&mut self, path: &str) -> Result<u32, ArrowError> {
        if let Some(&id) = self.file_ids.get(path) {
            return Ok(id);
        }
        let id = u32::try_from(self.files.len())
            .map_err(|_| ArrowError::ComputeError("more than 2^32 data files".into()))?;
        self.files.push(path.to_owned());
        self.file_ids.insert(path.to_owned(), id);
        Ok(id)
    }

    /// The rows of `columns` (the key columns of some rows of `path`) are at `positions`.
    pub fn add(&mut self, columns: &[ArrayRef], path: &str, positions: &[u32]) -> Result<(), ArrowError> {
        let rows = self.encode(columns)?;
        if rows.num_rows() != positions.len() {
            return Err(ArrowError::InvalidArgumentError(format!(
                "{} keys but {} positions",
                rows.num_rows(),
                positions.len()
            )));
        }
        let file = self.file_id(path)?;
        self.rows.reserve(positions.len());
        for (row, &pos) in rows.iter().zip(positions) {
            self.insert(row.as_ref(), Loc { file, pos });
        }
        Ok(())
    }

    /// Every committed position of the keys in `columns`, grouped by data file, positions in
    /// ascending order; keys not in the index are left out.
    pub fn positions(&self, columns: &[ArrayRef]) -> Result<Vec<(String, Vec<u32>)>, ArrowError> {
        let rows = self.encode(columns)?;
        let mut by_file: HashMap<u32, Vec<u32>> = HashMap::new();
        for row in rows.iter() {
            let key = row.as_ref();
            let Some(loc) = self.rows.get(key) else { continue };
            by_file.entry(loc.file).or_default().push(loc.pos);
            for more in self.more.get(key).into_iter().flatten() {
                by_file.entry(more.file).or_default().push(more.pos);
            }
        }
        let mut out: Vec<(String, Vec<u32>)> = by_file
            .into_iter()
            .map(|(file, mut positions)| {
                positions.sort_unstable();
                positions.dedup();
                (self.files[file as usize].clone(), positions)
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// Rows no longer where the index has them, in one pass over the index: every row of the
    /// data files in `files` (they left the table: rewritten by a compaction, say), and those at
    /// the positions listed per file in `positions` (deleted by another writer). A key also found
    /// elsewhere keeps its other positions; a key found nowhere else leaves the index. Returns how
    /// many positions were dropped.
    pub fn forget_at(&mut self, files: &[String], positions: &[(String, Vec<u32>)]) -> usize {
        let whole: HashSet<u32> = files.iter().filter_map(|p| self.file_ids.get(p).copied()).collect();
        let some: HashMap<u32, HashSet<u32>> = positions
            .iter()
            .filter_map(|(p, pos)| self.file_ids.get(p).map(|&id| (id, pos.iter().copied().collect())))
            .collect();
        if whole.is_empty() && some.is_empty() {
            return 0;
        }
        let gone =
            |loc: &Loc| whole.contains(&loc.file) || some.get(&loc.file).is_some_and(|set| set.contains(&loc.pos));
        let mut dropped = 0;
        self.more.retain(|_, locs| {
            let before = locs.len();
            locs.retain(|loc| !gone(loc));
            dropped += before - locs.len();
            !locs.is_empty()
        });
        let (rows, more) = (&mut self.rows, &mut self.more);
        let mut emptied: Vec<Box<[u8]>> = Vec::new();
        for (key, loc) in rows.iter_mut() {
            if !gone(loc) {
                continue;
            }
            dropped += 1;
            match more.get_mut(key) {
                Some(others) => {
                    *loc = others.pop().expect("side entries are never empty");
                    if others.is_empty() {
                        more.remove(key);
                    }
                }
                None => emptied.push(key.clone()),
            }
        }
        for key in emptied {
            self.key_bytes -= key.len();
            rows.remove(&key);
        }
        dropped
    }

    /// Every entry, for a checkpoint: the data files by id, and batches of at most `batch_rows`
    /// rows of the key columns (as `schema` names them), the file id (`file`, into the list) and
    /// the position (`pos`). Reading them back with [`KeyIndex::load`] gives this index.
    pub fn export(&self, schema: &SchemaRef, batch_rows: usize) -> Result<(Vec<String>, Vec<RecordBatch>), ArrowError> {
        let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new("file", DataType::UInt32, false));
        fields.push(Field::new("pos", DataType::UInt32, false));
        let out_schema = Arc::new(Schema::new(fields));
        let parser = self.converter.parser();
        let entries = self
            .rows
            .iter()
            .map(|(key, loc)| (key.as_ref(), *loc))
            .chain(self.more.iter().flat_map(|(key, locs)| locs.iter().map(move |loc| (key.as_ref(), *loc))));
        let mut batches = Vec::new();
        let mut chunk: Vec<(&[u8], Loc)> = Vec::with_capacity(batch_rows.min(1 << 20));
        let mut flush = |chunk: &mut Vec<(&[u8], Loc)>| -> Result<(), ArrowError> {
            if chunk.is_empty() {
                return Ok(());
            }
            let mut columns = self.converter.convert_rows(chunk.iter().map(|(key, _)| parser.parse(key)))?;
            columns.push(Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|(_, loc)| loc.file))));
            columns.push(Arc::new(UInt32Array::from_iter_values(chunk.iter().map(|(_, loc)| loc.pos))));
            batches.push(RecordBatch::try_new(out_schema.clone(), columns)?);
            chunk.clear();
            Ok(())
        };
        for entry in entries {
            chunk.push(entry);
            if chunk.len() >= batch_rows.max(1) {
                flush(&mut chunk)?;
            }
        }
        flush(&mut chunk)?;
        Ok((self.files.clone(), batches))
    }

    /// Entries of an [`KeyIndex::export`]: `columns` the key columns, `file` ids into `files`,
    /// `pos` the positions.
    pub fn load(
        &mut self,
        columns: &[ArrayRef],
        files: &[String],
        file: &[u32],
        pos: &[u32],
    ) -> Result<(), ArrowError> {
        let rows = self.encode(columns)?;
        if rows.num_rows() != file.len() || file.len() != pos.len() {
            return Err(ArrowError::InvalidArgumentError("keys, files and positions differ in length".into()));
        }
        let mut ids = Vec::with_capacity(files.len());
        for path in files {
            ids.push(self.file_id(path)?);
        }
        self.rows.reserve(pos.len());
        for ((row, &f), &p) in rows.iter().zip(file).zip(pos) {
            let Some(&id) = ids.get(f as usize) else {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "file id {f} is not one of {} files",
                    files.len()
                )));
            };
            self.insert(row.as_ref(), Loc { file: id, pos: p });
        }
        Ok(())
    }

    fn insert(&mut self, key: &[u8], loc: Loc) {
        match self.rows.get_mut(key) {
            Some(old) => {
                let previous = std::mem::replace(old, loc);
                self.more.entry(key.into()).or_default().push(previous);
            }
            None => {
                self.key_bytes += key.len();
                self.rows.insert(key.into(), loc);
            }
        }
    }

    /// The keys in `columns` are no longer in the table.
    pub fn forget(&mut self, columns: &[ArrayRef]) -> Result<(), ArrowError> {
        let rows = self.encode(columns)?;
        for row in rows.iter() {
            if let Some((key, _)) = self.rows.remove_entry(row.as_ref()) {
                self.key_bytes -= key.len();
            }
            self.more.remove(row.as_ref());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn ids(values: &[i64]) -> Vec<ArrayRef> {
        vec![Arc::new(Int64Array::from(values.to_vec()))]
    }

    #[test]
    fn finds_every_position_of_a_key_and_forgets_it() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let mut index = KeyIndex::new(&schema).unwrap();
        index.add(&ids(&[1, 2, 3]), "a", &[0, 1, 2]).unwrap();
        index.add(&ids(&[3, 4]), "b", &[5, 9]).unwrap();
        assert_eq!((index.len(), index.duplicated()), (4, 1));
        let found = index.positions(&ids(&[3, 1, 7])).unwrap();
        assert_eq!(found, vec![("a".into(), vec![0, 2]), ("b".into(), vec![5])]);
        index.forget(&ids(&[3, 7])).unwrap();
        assert_eq!(index.positions(&ids(&[3])).unwrap(), vec![]);
        assert_eq!((index.len(), index.duplicated()), (3, 0));
        assert!(index.add(&ids(&[5]), "c", &[]).is_err());
    }

    #[test]
    fn rows_gone_from_a_file_or_from_positions_of_it_leave_and_keys_found_elsewhere_stay() {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let mut index = KeyIndex::new(&schema).unwrap();
        index.add(&ids(&[1, 2, 3]), "a", &[0, 1, 2]).unwrap();
        index.add(&ids(&[3, 4, 5]), "b", &[0, 1, 2]).unwrap();
        let b = |pos: &[u32]| vec![("b".to_string(), pos.to_vec())];
        assert_eq!(index.forget_at(&[], &b(&[1, 7])), 1); // another writer deleted b@1 (and nothing at 7)
        assert_eq!(index.positions(&ids(&[4])).unwrap(), vec![]);
        assert_eq!(index.forget_at(&["a".into()], &[]), 3); // a compacted away: 3 stays at b@0
        assert_eq!(index.positions(&ids(&[1, 2, 3, 5])).unwrap(), vec![("b".into(), vec![0, 2])]);
        assert_eq!((index.len(), index.duplicated()), (2, 0));
        assert_eq!(index.forget_at(&["nowhere".into()], &[]), 0);
        let before = index.memory_bytes();
        assert_eq!(index.forget_at(&["b".into()], &b(&[0])), 2); // both at once, one pass
        assert!(index.is_empty() && index.memory_bytes() < before);
    }

    #[test]
    fn an_export_loads_back_into_the_same_index() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let mut index = KeyIndex::new(&schema).unwrap();
        let keys = |a: &[i64], b: &[&str]| -> Vec<ArrayRef> {
            vec![Arc::new(Int64Array::from(a.to_vec())), Arc::new(StringArray::from(b.to_vec()))]
        };
        index.add(&keys(&[1, 2, 3], &["x", "y", "z"]), "f0", &[0, 1, 2]).unwrap();
        index.add(&keys(&[3, 4], &["z", "w"]), "f1", &[7, 8]).unwrap(); // (3, z) twice
        let (files, batches) = index.export(&schema, 2).unwrap();
        assert_eq!(batches.iter().map(RecordBatch::num_rows).collect::<Vec<_>>(), vec![2, 2, 1]);
        let mut back = KeyIndex::new(&schema).unwrap();
        for batch in &batches {
            let file = batch.column(2).as_any().downcast_ref::<UInt32Array>().unwrap().values().to_vec();
            let pos = batch.column(3).as_any().downcast_ref::<UInt32Array>().unwrap().values().to_vec();
            back.load(&batch.columns()[..2], &files, &file, &pos).unwrap();
        }
        assert_eq!((back.len(), back.duplicated()), (4, 1));
        let probe = keys(&[1, 2, 3, 4, 9], &["x", "y", "z", "w", "q"]);
        assert_eq!(back.positions(&probe).unwrap(), index.positions(&probe).unwrap());
        assert!(back.load(&keys(&[5], &["v"]), &files, &[9], &[0]).is_err());
    }

    #[test]
    fn composite_keys_compare_by_every_column() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, false),
        ]));
        let mut index = KeyIndex::new(&schema).unwrap();
        let cols: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from(vec![1, 1])), Arc::new(StringArray::from(vec!["x", "y"]))];
        index.add(&cols, "f", &[0, 1]).unwrap();
        let probe: Vec<ArrayRef> = vec![Arc::new(Int64Array::from(vec![1])), Arc::new(StringArray::from(vec!["y"]))];
        assert_eq!(index.positions(&probe).unwrap(), vec![("f".into(), vec![1])]);
        assert!(index.memory_bytes() > 0);
    }
}
