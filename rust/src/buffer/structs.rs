//! arrow-json's struct decoder (objects only, as frazil reads them) with each field once per
//! object (`unique.rs` says why). arrow-json's own walks each object's keys to find its fields'
//! values, by name; this one walks them once too, and tries the fields in the order of the last
//! object first, so a key costs one comparison while the producer keeps its order, and the check
//! rides along: an object whose keys follow the last one's order (or a prefix of it) has each
//! once, since that one had. Any other object is read by name, each field marked seen.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, NullBufferBuilder, StructArray};
use arrow::datatypes::{DataType, FieldRef, Fields};
use arrow::error::ArrowError;
use arrow::json::reader::{ArrayDecoder, DecoderContext, Tape, TapeElement};
use arrow::json::StructMode;

use super::unique::twice;

/// The decoder of one struct type.
pub(crate) struct Structs {
    fields: Fields,
    decoders: Vec<Box<dyn ArrayDecoder>>,
    nullable: bool,
    strict: bool,
    ignore_type_conflicts: bool,
    top_level: bool,
    /// Per field, per row, where its value is on the tape (0, a null, where the row has none).
    positions: Vec<u32>,
    names: Vec<Box<[u8]>>,
    /// Wide structs find a field out of order by hash (arrow-json's own threshold).
    index: Option<HashMap<Box<str>, usize>>,
    /// The fields of the last object read by name, in its order: `first`, then `next` of each,
    /// `order` of them, all distinct. An object whose keys follow it (or a prefix of it) has each
    /// once; any other is read by name ([`Self::by_name`]).
    first: usize,
    next: Vec<usize>,
    order: usize,
    /// Per field, the object read by name it was last seen in (`object`): in this one when equal.
    seen: Vec<u32>,
    object: u32,
}

impl Structs {
    /// The decoder of a struct `field` (None for another type, or for structs read as lists,
    /// which frazil does not ask for). A nameless field is the record itself (arrow-json's root).
    pub(crate) fn of(ctx: &DecoderContext, field: &FieldRef, nullable: bool) -> Result<Option<Self>, ArrowError> {
        let DataType::Struct(fields) = field.data_type() else { return Ok(None) };
        if ctx.struct_mode() != StructMode::ObjectOnly {
            return Ok(None);
        }
        // a nullable struct may hold nulls for its required children (masked by its own)
        let decoders =
            fields.iter().map(|f| ctx.make_decoder(f, f.is_nullable() || nullable)).collect::<Result<_, _>>()?;
        let names: Vec<Box<[u8]>> = fields.iter().map(|f| f.name().as_bytes().into()).collect();
        let n = names.len();
        let index = (n >= 16).then(|| fields.iter().enumerate().map(|(k, f)| (f.name().as_str().into(), k)).collect());
        Ok(Some(Structs {
            fields: fields.clone(),
            decoders,
            nullable,
            strict: ctx.strict_mode(),
            ignore_type_conflicts: ctx.ignore_type_conflicts(),
            top_level: field.name().is_empty(),
            positions: Vec::new(),
            names,
            index,
            first: 0,
            next: vec![0; n],
            order: 0,
            seen: vec![0; n],
            object: 0,
        }))
    }

    /// The values of the object at `p` (which ends at `end`) into `positions` for `row` of `rows`.
    #[inline]
    fn object(&mut self, tape: &Tape<'_>, p: u32, end: u32, row: usize, rows: usize) -> Result<(), ArrowError> {
        let (mut cur, mut k, mut n) = (p + 1, self.first, 0);
        while cur < end {
            let name = key(tape, cur)?;
            if n == self.order || !same(&self.names[k], name.as_bytes()) {
                return self.by_name(tape, cur, end, n, row, rows);
            }
            self.positions[k * rows + row] = cur + 1;
            (k, n) = (self.next[k], n + 1);
            cur = after(tape, cur + 1)?;
        }
        Ok(())
    }

    /// [`Self::object`] from the key at `cur` on, the `done` keys before it having followed the
    /// last object's order: each key found by name and marked seen, a second time refused; the
    /// order of the fields is kept for the next objects.
    fn by_name(
        &mut self,
        tape: &Tape<'_>,
        mut cur: u32,
        end: u32,
        done: usize,
        row: usize,
        rows: usize,
    ) -> Result<(), ArrowError> {
        self.object = self.object.wrapping_add(1);
        if self.object == 0 {
            self.seen.fill(0);
            self.object = 1;
        }
        let mut previous = None;
        for _ in 0..done {
            let k = previous.map_or(self.first, |before: usize| self.next[before]);
            self.seen[k] = self.object;
            previous = Some(k);
        }
        self.order = 0; // until the object is read: a repeat breaks the chain
        let mut count = done;
        while cur < end {
            let name = key(tape, cur)?;
            let found = match &self.index {
                Some(index) => index.get(name).copied(),
                None => self.names.iter().position(|n| **n == *name.as_bytes()),
            };
            match found {
                Some(k) => {
                    if std::mem::replace(&mut self.seen[k], self.object) == self.object {
                        // named as arrow-json names a field, so the path of the struct around it is added
                        return Err(ArrowError::JsonError(format!(
                            "whilst decoding field '{name}': {}",
                            twice(self.top_level)
                        )));
                    }
                    self.positions[k * rows + row] = cur + 1;
                    match previous {
                        Some(before) => self.next[before] = k,
                        None => self.first = k,
                    }
                    previous = Some(k);
                    count += 1;
                }
                None if self.strict => {
                    return Err(ArrowError::JsonError(format!("column '{name}' missing from schema")));
                }
                None => {}
            }
            cur = after(tape, cur + 1)?;
        }
        self.order = count;
        Ok(())
    }
}

impl ArrayDecoder for Structs {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let rows = pos.len();
        self.positions.clear();
        self.positions.resize(self.fields.len() * rows, 0);
        let mut nulls = self.nullable.then(|| NullBufferBuilder::new(rows));
        for (row, &p) in pos.iter().enumerate() {
            let end = match (tape.get(p), nulls.as_mut()) {
                (TapeElement::StartObject(end), None) => end,
                (TapeElement::StartObject(end), Some(nulls)) => {
                    nulls.append_non_null();
                    end
                }
                (TapeElement::Null, Some(nulls)) => {
                    nulls.append_null();
                    continue;
                }
                (_, Some(nulls)) if self.ignore_type_conflicts => {
                    nulls.append_null();
                    continue;
                }
                _ => return Err(tape.error(p, "{")),
            };
            self.object(tape, p, end, row, rows)?;
        }
        let positions = &self.positions;
        let children = self
            .decoders
            .iter_mut()
            .zip(self.fields.iter())
            .enumerate()
            .map(|(k, (decoder, field))| {
                decoder.decode(tape, &positions[k * rows..(k + 1) * rows]).map_err(|e| match e {
                    ArrowError::JsonError(s) => {
                        ArrowError::JsonError(format!("whilst decoding field '{}': {s}", field.name()))
                    }
                    e => e,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let nulls = nulls.as_mut().and_then(NullBufferBuilder::finish);
        for (child, field) in children.iter().zip(self.fields.iter()) {
            // arrow-json's words, which validate::split_field reads as "is required"
            if child.nulls().is_some_and(|c| !field.is_nullable() && !nulls.as_ref().is_some_and(|n| n.contains(c))) {
                return Err(ArrowError::JsonError(format!(
                    "Encountered unmasked nulls in non-nullable StructArray child: {field}"
                )));
            }
        }
        Ok(Arc::new(StructArray::try_new_with_length(self.fields.clone(), children, nulls, rows)?))
    }
}

/// The key at `at`.
#[inline(always)]
fn key<'t>(tape: &Tape<'t>, at: u32) -> Result<&'t str, ArrowError> {
    match tape.get(at) {
        TapeElement::String(s) => Ok(tape.get_string(s)),
        _ => Err(tape.error(at, "field name")),
    }
}

/// The element after the value at `at` (arrow-json's `Tape::next`, inlined: it runs for every
/// key).
#[inline(always)]
fn after(tape: &Tape<'_>, at: u32) -> Result<u32, ArrowError> {
    match tape.get(at) {
        TapeElement::StartObject(end) | TapeElement::StartList(end) => Ok(end + 1),
        TapeElement::I64(_) | TapeElement::F64(_) => Ok(at + 2),
        TapeElement::EndObject(_) | TapeElement::EndList(_) => Err(tape.error(at, "field value")),
        _ => Ok(at + 1),
    }
}

/// Whether two byte strings (field names) are equal: those of up to 16 bytes by two overlapping
/// loads each, without a call to memcmp, which cost more than the comparison itself.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let u32_at = |s: &[u8], at: usize| u32::from_le_bytes([s[at], s[at + 1], s[at + 2], s[at + 3]]);
    let u64_at = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => u32_at(a, 0) == u32_at(b, 0) && u32_at(a, n - 4) == u32_at(b, n - 4),
        8..=16 => u64_at(a, 0) == u64_at(b, 0) && u64_at(a, n - 8) == u64_at(b, n - 8),
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::decoders::Factory;
    use arrow::datatypes::{Field, Schema};
    use arrow::json::reader::{DecoderFactory, ReaderBuilder};

    /// The buffer's factory, less this decoder: arrow-json's own structs.
    #[derive(Debug)]
    struct Builtin;

    impl DecoderFactory for Builtin {
        fn make_default_decoder(
            &self,
            ctx: &DecoderContext,
            field: &FieldRef,
            nullable: bool,
        ) -> Result<Option<Box<dyn ArrayDecoder>>, ArrowError> {
            match field.data_type() {
                DataType::Struct(_) => Ok(None),
                _ => Factory.make_default_decoder(ctx, field, nullable),
            }
        }
    }

    fn decode(schema: &Arc<Schema>, factory: Arc<dyn DecoderFactory>, strict: bool, values: &[String]) -> String {
        let decoder = ReaderBuilder::new(schema.clone())
            .with_batch_size(values.len() + 1)
            .with_strict_mode(strict)
            .with_decoder_factory(factory)
            .build_decoder();
        let result = decoder.and_then(|mut d| {
            for v in values {
                d.decode(v.as_bytes())?;
                d.decode(b"\n")?;
            }
            d.flush()
        });
        match result {
            Ok(Some(batch)) => format!("{:?}", batch.columns()),
            Ok(None) => "nothing".into(),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn names_are_the_same_exactly_when_their_bytes_are() {
        let names: Vec<Vec<u8>> =
            (0..=20).flat_map(|n| (0..n).map(move |i| (0..n).map(|j| b'a' + u8::from(i == j)).collect())).collect();
        for a in &names {
            for b in &names {
                assert_eq!(same(a, b), a == b, "{a:?} {b:?}");
            }
        }
        assert!(same(b"", b""));
    }

    #[test]
    fn objects_without_a_repeated_key_decode_as_arrow_jsons_own_decoder_decodes_them() {
        let inner = Fields::from(vec![Field::new("k", DataType::Int64, false), Field::new("v", DataType::Utf8, true)]);
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("opt", DataType::Struct(inner.clone()), true),
            Field::new("req", DataType::Struct(inner.clone()), false),
            Field::new("items", DataType::List(Arc::new(Field::new("item", DataType::Struct(inner), true))), true),
        ]));
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let inner_value = |next: &mut dyn FnMut(u64) -> u64| -> String {
            match next(8) {
                0 => "null".into(),
                1 => "7".into(),
                2 => "{}".into(),
                _ => {
                    let k = if next(6) == 0 { "null".to_string() } else { next(5).to_string() };
                    let mut keys = vec![format!(r#""k": {k}"#), r#""v": "x""#.to_string()];
                    if next(4) == 0 {
                        keys.swap(0, 1);
                    }
                    if next(5) == 0 {
                        keys.pop();
                    }
                    if next(6) == 0 {
                        keys.push(r#""z": 1"#.into());
                    }
                    format!("{{{}}}", keys.join(", "))
                }
            }
        };
        let mut checked = 0;
        for round in 0..1000 {
            let rows = 1 + next(6) as usize;
            let mut values = Vec::new();
            for _ in 0..rows {
                let mut keys: Vec<String> = Vec::new();
                for (name, value) in [
                    ("id", if next(10) == 0 { "\"x\"".to_string() } else { next(100).to_string() }),
                    ("name", if next(3) == 0 { "null".into() } else { "\"n\"".into() }),
                    ("opt", inner_value(&mut next)),
                    ("req", inner_value(&mut next)),
                    (
                        "items",
                        format!("[{}]", (0..next(3)).map(|_| inner_value(&mut next)).collect::<Vec<_>>().join(",")),
                    ),
                    ("extra", "1".into()),
                ] {
                    let skip = if name == "extra" { next(8) != 0 } else { next(7) == 0 };
                    if !skip {
                        keys.push(format!(r#""{name}": {value}"#));
                    }
                }
                if next(3) == 0 {
                    let i = next(keys.len().max(1) as u64) as usize;
                    let j = next(keys.len().max(1) as u64) as usize;
                    if i < keys.len() && j < keys.len() {
                        keys.swap(i, j);
                    }
                }
                values.push(format!("{{{}}}", keys.join(", ")));
            }
            let strict = round % 2 == 0;
            let batches = std::iter::once(values.clone()).chain(values.iter().map(|v| vec![v.clone()]));
            for values in batches {
                let ours = decode(&schema, Arc::new(Factory), strict, &values);
                assert_eq!(ours, decode(&schema, Arc::new(Builtin), strict, &values), "{values:?}");
                checked += usize::from(!ours.starts_with("error"));
            }
        }
        assert!(checked > 400, "only {checked} batches decoded");
    }
}
