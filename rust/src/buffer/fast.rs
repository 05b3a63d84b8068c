//! A single-pass decoder of JSON values straight into the table's columns, for the common shapes:
//! strings, integers, floats, booleans, ISO-8601 timestamps, and structs and lists of them.
//!
//! arrow-json first tokenizes every value into a tape, then each column decoder walks the tape and
//! finds its field by name; with frazil's exact decoders on top, a wide record (42 fields) cost
//! about 7.6 us. Here the bytes are read once: each field name is matched against the column the
//! producer's order predicts, and its value is parsed into that column's builder.
//!
//! It only ever takes a value it reads plainly and returns exactly the rows the arrow-json path
//! would (`tests.rs` holds the property test that compares the two). Anything else in a batch (a
//! value with an unknown or repeated field, a type it does not read here, a number written as a
//! string, a missing required field, malformed JSON, a lone escaped surrogate) makes it give the
//! batch up: the arrow-json path then decodes it, and names the bad records as it always did.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int16Array, Int32Array, Int64Array, Int8Array, LargeListArray,
    LargeStringArray, ListArray, NullBufferBuilder, RecordBatch, StringArray, StructArray, TimestampMicrosecondArray,
    TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray,
};
use arrow::buffer::{BooleanBuffer, Buffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, FieldRef, Fields, SchemaRef, TimeUnit};

use super::decoders::ROUNDING_KEY;
use super::temporal::Timestamps;

/// What the decoder reads for one field.
enum Kind {
    /// Text, with 64-bit offsets when `large` (pyiceberg's tables use large strings).
    Utf8 {
        large: bool,
    },
    /// An integer of `bits` bits (8, 16, 32, 64), exactly.
    Int(u8),
    F64,
    F32,
    Bool,
    Timestamp(Timestamps, TimeUnit, Option<Arc<str>>),
    Struct(Vec<Spec>),
    List {
        item: Box<Spec>,
        field: FieldRef,
        large: bool,
    },
}

struct Spec {
    name: Box<[u8]>,
    nullable: bool,
    /// A struct with a required field somewhere below it: a null of it is given up (Arrow needs
    /// its required children masked, which the arrow-json path handles).
    has_required: bool,
    kind: Kind,
    field: FieldRef,
}

impl Spec {
    fn of(field: &FieldRef) -> Option<Self> {
        if field.metadata().contains_key(ROUNDING_KEY) {
            return None;
        }
        let kind = match field.data_type() {
            DataType::Utf8 => Kind::Utf8 { large: false },
            DataType::LargeUtf8 => Kind::Utf8 { large: true },
            DataType::Int8 => Kind::Int(8),
            DataType::Int16 => Kind::Int(16),
            DataType::Int32 => Kind::Int(32),
            DataType::Int64 => Kind::Int(64),
            DataType::Float64 => Kind::F64,
            DataType::Float32 => Kind::F32,
            DataType::Boolean => Kind::Bool,
            DataType::Timestamp(unit, tz) => Kind::Timestamp(Timestamps::of(field).ok()??, *unit, tz.clone()),
            DataType::Struct(children) => Kind::Struct(children.iter().map(Spec::of).collect::<Option<_>>()?),
            DataType::List(item) => Kind::List { item: Box::new(Spec::of(item)?), field: item.clone(), large: false },
            DataType::LargeList(item) => {
                Kind::List { item: Box::new(Spec::of(item)?), field: item.clone(), large: true }
            }
            _ => return None,
        };
        let has_required = match &kind {
            Kind::Struct(children) => children.iter().any(|c| !c.nullable || c.has_required),
            _ => false,
        };
        Some(Spec {
            name: field.name().as_bytes().into(),
            nullable: field.is_nullable(),
            has_required,
            kind,
            field: field.clone(),
        })
    }
}

/// The decoder of one table schema (its value columns).
pub(crate) struct FastDecoder {
    columns: Vec<Spec>,
    /// How field names are matched: unknown ones refused or skipped, case folded or not.
    how: How,
}

impl std::fmt::Debug for FastDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FastDecoder").field("columns", &self.columns.len()).field("strict", &self.how.strict).finish()
    }
}

impl FastDecoder {
    /// None when a column has a type (or an option) only the arrow-json path reads. With
    /// `fold_case`, a field that matches no column exactly takes the column that differs from it
    /// only in ASCII case, as `validate::check` renames it; None when two columns of one struct
    /// differ only in case (the rules for such names are `validate.rs`'s alone).
    pub(crate) fn for_fields(fields: &Fields, strict: bool, fold_case: bool) -> Option<Self> {
        let columns: Vec<Spec> = fields.iter().map(Spec::of).collect::<Option<_>>()?;
        if fold_case && !folds_uniquely(&columns) {
            return None;
        }
        Some(FastDecoder { columns, how: How { strict, fold_case } })
    }

    /// The rows of `values` at `indices` this decoder reads plainly, in order, and the indices it
    /// left for the arrow-json path (each rolled back, so a row never holds half a record); None
    /// when it would leave more than `max_left` (the batch is then the arrow-json path's).
    pub(crate) fn decode<'v>(
        &self,
        value: impl Fn(usize) -> &'v [u8],
        indices: &[usize],
        schema: &SchemaRef,
        max_left: usize,
    ) -> Option<Decoded> {
        let mut state = Object::new(&self.columns, indices.len());
        let how = self.how;
        let mut rows = 0;
        let mut left = Vec::new();
        for &i in indices {
            let mut p = Parser { s: value(i), at: 0 };
            if read_whole(&mut state, &mut p, &self.columns, how).is_some() {
                rows += 1;
            } else {
                if left.len() == max_left {
                    return None;
                }
                state.truncate(rows);
                left.push(i);
            }
        }
        let columns = state.finish(&self.columns)?;
        let batch = RecordBatch::try_new(schema.clone(), columns).ok()?;
        Some(Decoded { batch, left })
    }
}

/// What the single pass made of a batch.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// One row per index it read, in order.
    pub(crate) batch: RecordBatch,
    /// The indices it did not read plainly, in order.
    pub(crate) left: Vec<usize>,
}

/// How names are matched: unknown fields refused (`strict`), case folded (`fold_case`: only where
/// no two columns of a struct differ only in case, so a field matches one column at most).
#[derive(Clone, Copy)]
struct How {
    strict: bool,
    fold_case: bool,
}

/// Whether no two columns at any level differ only in ASCII case.
fn folds_uniquely(specs: &[Spec]) -> bool {
    specs.iter().enumerate().all(|(k, spec)| {
        let alone = specs[..k].iter().all(|other| !other.name.eq_ignore_ascii_case(&spec.name));
        alone
            && match &spec.kind {
                Kind::Struct(children) => folds_uniquely(children),
                Kind::List { item, .. } => folds_uniquely(std::slice::from_ref(item.as_ref())),
                _ => true,
            }
    })
}

/// One value: exactly one object, nothing after it but whitespace.
fn read_whole(state: &mut Object, p: &mut Parser<'_>, specs: &[Spec], how: How) -> Option<()> {
    p.ws();
    state.read(p, specs, how)?;
    p.ws();
    (p.at == p.s.len()).then_some(())
}

/// The builders of an object's fields, and the order the producer writes them in.
struct Object {
    columns: Vec<Column>,
    seen: Vec<bool>,
    /// After field k, the field that followed it in the last object read.
    next: Vec<usize>,
    first: usize,
}

impl Object {
    fn new(specs: &[Spec], rows: usize) -> Self {
        let n = specs.len();
        Object {
            columns: specs.iter().map(|s| Column::new(s, rows)).collect(),
            seen: vec![false; n],
            next: (1..=n).collect(),
            first: 0,
        }
    }

    /// One object into the columns (the parser is at its `{`).
    fn read(&mut self, p: &mut Parser<'_>, specs: &[Spec], how: How) -> Option<()> {
        p.expect(b'{')?;
        self.seen.iter_mut().for_each(|s| *s = false);
        p.ws();
        if p.peek()? == b'}' {
            p.at += 1;
        } else {
            let mut guess = self.first;
            let mut previous: Option<usize> = None;
            loop {
                let (name, ascii) = p.key()?;
                p.ws();
                p.expect(b':')?;
                p.ws();
                let found = if how.fold_case {
                    // one column at most matches without regard to case, and an exact match is one
                    if specs.get(guess).is_some_and(|s| s.name.eq_ignore_ascii_case(name)) {
                        Some(guess)
                    } else {
                        specs.iter().position(|s| s.name.eq_ignore_ascii_case(name))
                    }
                } else if specs.get(guess).is_some_and(|s| *s.name == *name) {
                    Some(guess)
                } else {
                    specs.iter().position(|s| *s.name == *name)
                };
                match found {
                    Some(k) => {
                        if std::mem::replace(&mut self.seen[k], true) {
                            return None; // a field twice: a bad record, which the arrow-json path names (unique.rs)
                        }
                        match previous {
                            Some(before) => self.next[before] = k,
                            None => self.first = k,
                        }
                        previous = Some(k);
                        self.columns[k].value(p, &specs[k], how)?;
                        guess = self.next[k];
                    }
                    None if how.strict => return None,
                    None => {
                        if !ascii {
                            std::str::from_utf8(name).ok()?;
                        }
                        p.skip_value()?
                    }
                }
                p.ws();
                match p.next()? {
                    b',' => p.ws(),
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        for (k, spec) in specs.iter().enumerate() {
            if !self.seen[k] {
                if !spec.nullable || spec.has_required {
                    return None;
                }
                self.columns[k].null(spec);
            }
        }
        Some(())
    }

    /// A null object: every field null below it.
    fn null(&mut self, specs: &[Spec]) {
        for (column, spec) in self.columns.iter_mut().zip(specs) {
            column.null(spec);
        }
    }

    /// Back to its first `rows` rows: what a record given up left in the builders is dropped.
    fn truncate(&mut self, rows: usize) {
        self.columns.iter_mut().for_each(|c| c.truncate(rows));
    }

    fn finish(self, specs: &[Spec]) -> Option<Vec<ArrayRef>> {
        self.columns.into_iter().zip(specs).map(|(c, s)| c.finish(s)).collect()
    }
}

enum Values {
    Utf8 { offsets: Vec<i64>, data: Vec<u8> },
    Int(Vec<i64>),
    F64(Vec<f64>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    Timestamp(Vec<i64>),
    Struct(Box<Object>),
    List { offsets: Vec<i64>, item: Box<Column> },
}

struct Column {
    values: Values,
    nulls: NullBufferBuilder,
}

impl Column {
    fn new(spec: &Spec, rows: usize) -> Self {
        let values = match &spec.kind {
            Kind::Utf8 { .. } => Values::Utf8 {
                offsets: {
                    let mut o = Vec::with_capacity(rows + 1);
                    o.push(0);
                    o
                },
                data: Vec::with_capacity(rows * 16),
            },
            Kind::Int(_) => Values::Int(Vec::with_capacity(rows)),
            Kind::F64 => Values::F64(Vec::with_capacity(rows)),
            Kind::F32 => Values::F32(Vec::with_capacity(rows)),
            Kind::Bool => Values::Bool(Vec::with_capacity(rows)),
            Kind::Timestamp(..) => Values::Timestamp(Vec::with_capacity(rows)),
            Kind::Struct(children) => Values::Struct(Box::new(Object::new(children, rows))),
            Kind::List { item, .. } => Values::List {
                offsets: {
                    let mut o = Vec::with_capacity(rows + 1);
                    o.push(0);
                    o
                },
                item: Box::new(Column::new(item, rows)),
            },
        };
        Column { values, nulls: NullBufferBuilder::new(rows) }
    }

    fn null(&mut self, spec: &Spec) {
        self.nulls.append_null();
        match (&mut self.values, &spec.kind) {
            (Values::Utf8 { offsets, data }, _) => offsets.push(data.len() as i64),
            (Values::Int(v), _) | (Values::Timestamp(v), _) => v.push(0),
            (Values::F64(v), _) => v.push(0.0),
            (Values::F32(v), _) => v.push(0.0),
            (Values::Bool(v), _) => v.push(false),
            (Values::Struct(object), Kind::Struct(children)) => object.null(children),
            (Values::List { offsets, .. }, _) => offsets.push(*offsets.last().expect("starts at 0")),
            (Values::Struct(_), _) => unreachable!("a struct column has a struct spec"),
        }
    }

    /// Back to its first `rows` values (every builder holds at least that many).
    fn truncate(&mut self, rows: usize) {
        self.nulls.truncate(rows);
        match &mut self.values {
            Values::Utf8 { offsets, data } => {
                offsets.truncate(rows + 1);
                data.truncate(offsets[rows] as usize);
            }
            Values::Int(v) | Values::Timestamp(v) => v.truncate(rows),
            Values::F64(v) => v.truncate(rows),
            Values::F32(v) => v.truncate(rows),
            Values::Bool(v) => v.truncate(rows),
            Values::Struct(object) => object.truncate(rows),
            Values::List { offsets, item } => {
                offsets.truncate(rows + 1);
                item.truncate(offsets[rows] as usize);
            }
        }
    }

    /// One value (the parser is at its first byte).
    fn value(&mut self, p: &mut Parser<'_>, spec: &Spec, how: How) -> Option<()> {
        if p.peek()? == b'n' {
            p.literal(b"null")?;
            if !spec.nullable || spec.has_required {
                return None;
            }
            self.null(spec);
            return Some(());
        }
        match (&mut self.values, &spec.kind) {
            (Values::Utf8 { offsets, data }, _) => {
                p.string_into(data)?;
                offsets.push(data.len() as i64);
            }
            (Values::Int(v), Kind::Int(bits)) => {
                let n = p.integer()?;
                let fits = match bits {
                    8 => i8::try_from(n).is_ok(),
                    16 => i16::try_from(n).is_ok(),
                    32 => i32::try_from(n).is_ok(),
                    _ => true,
                };
                if !fits {
                    return None;
                }
                v.push(n);
            }
            (Values::F64(v), _) => {
                let f = p.float()?;
                v.push(f);
            }
            (Values::F32(v), _) => {
                let f = p.float()? as f32;
                if !f.is_finite() {
                    return None;
                }
                v.push(f);
            }
            (Values::Bool(v), _) => match p.peek()? {
                b't' => {
                    p.literal(b"true")?;
                    v.push(true);
                }
                b'f' => {
                    p.literal(b"false")?;
                    v.push(false);
                }
                _ => return None,
            },
            (Values::Timestamp(v), Kind::Timestamp(decoder, ..)) => {
                let text = p.plain_string()?;
                v.push(decoder.parse_text(text).ok()?);
            }
            (Values::Struct(object), Kind::Struct(children)) => {
                object.read(p, children, How { strict: true, ..how })?
            }
            (Values::List { offsets, item }, Kind::List { item: item_spec, .. }) => {
                p.expect(b'[')?;
                p.ws();
                let mut count = 0usize;
                if p.peek()? == b']' {
                    p.at += 1;
                } else {
                    loop {
                        item.value(p, item_spec, how)?;
                        count += 1;
                        p.ws();
                        match p.next()? {
                            b',' => p.ws(),
                            b']' => break,
                            _ => return None,
                        }
                    }
                }
                let end = *offsets.last().expect("starts at 0") + count as i64;
                offsets.push(end);
            }
            _ => return None,
        }
        self.nulls.append_non_null();
        Some(())
    }

    fn finish(mut self, spec: &Spec) -> Option<ArrayRef> {
        let nulls = self.nulls.finish();
        let array: ArrayRef = match (self.values, &spec.kind) {
            (Values::Utf8 { offsets, data }, Kind::Utf8 { large }) => {
                let data = Buffer::from_vec(data);
                if *large {
                    // SAFETY: every string was checked UTF-8 when read (Parser::string_into), and the
                    // offsets start at 0 and only grow up to the data's length
                    Arc::new(unsafe {
                        LargeStringArray::new_unchecked(
                            OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
                            data,
                            nulls,
                        )
                    })
                } else {
                    let offsets: Vec<i32> = offsets.into_iter().map(i32::try_from).collect::<Result<_, _>>().ok()?;
                    // SAFETY: as above
                    Arc::new(unsafe {
                        StringArray::new_unchecked(
                            OffsetBuffer::new_unchecked(ScalarBuffer::from(offsets)),
                            data,
                            nulls,
                        )
                    })
                }
            }
            (Values::Int(v), Kind::Int(bits)) => match bits {
                8 => Arc::new(Int8Array::new(v.into_iter().map(|x| x as i8).collect(), nulls)),
                16 => Arc::new(Int16Array::new(v.into_iter().map(|x| x as i16).collect(), nulls)),
                32 => Arc::new(Int32Array::new(v.into_iter().map(|x| x as i32).collect(), nulls)),
                _ => Arc::new(Int64Array::new(ScalarBuffer::from(v), nulls)),
            },
            (Values::F64(v), _) => Arc::new(Float64Array::new(ScalarBuffer::from(v), nulls)),
            (Values::F32(v), _) => Arc::new(Float32Array::new(ScalarBuffer::from(v), nulls)),
            (Values::Bool(v), _) => Arc::new(BooleanArray::new(BooleanBuffer::from(v), nulls)),
            (Values::Timestamp(v), Kind::Timestamp(_, unit, tz)) => {
                let v = ScalarBuffer::from(v);
                match unit {
                    TimeUnit::Second => Arc::new(TimestampSecondArray::new(v, nulls).with_timezone_opt(tz.clone())),
                    TimeUnit::Millisecond => {
                        Arc::new(TimestampMillisecondArray::new(v, nulls).with_timezone_opt(tz.clone()))
                    }
                    TimeUnit::Microsecond => {
                        Arc::new(TimestampMicrosecondArray::new(v, nulls).with_timezone_opt(tz.clone()))
                    }
                    TimeUnit::Nanosecond => {
                        Arc::new(TimestampNanosecondArray::new(v, nulls).with_timezone_opt(tz.clone()))
                    }
                }
            }
            (Values::Struct(object), Kind::Struct(children)) => {
                let DataType::Struct(fields) = spec.field.data_type() else { return None };
                Arc::new(StructArray::try_new(fields.clone(), object.finish(children)?, nulls).ok()?)
            }
            (Values::List { offsets, item }, Kind::List { item: item_spec, field, large }) => {
                let values = item.finish(item_spec)?;
                if *large {
                    Arc::new(
                        LargeListArray::try_new(
                            field.clone(),
                            OffsetBuffer::new(ScalarBuffer::from(offsets)),
                            values,
                            nulls,
                        )
                        .ok()?,
                    )
                } else {
                    let offsets: Vec<i32> = offsets.into_iter().map(i32::try_from).collect::<Result<_, _>>().ok()?;
                    Arc::new(
                        ListArray::try_new(
                            field.clone(),
                            OffsetBuffer::new(ScalarBuffer::from(offsets)),
                            values,
                            nulls,
                        )
                        .ok()?,
                    )
                }
            }
            _ => return None,
        };
        (array.data_type() == spec.field.data_type()).then_some(array)
    }
}

/// A cursor over one value's bytes. Every method returns None on anything it does not read
/// plainly, leaving the value to the arrow-json path.
struct Parser<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    #[inline]
    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    #[inline]
    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    #[inline]
    fn expect(&mut self, b: u8) -> Option<()> {
        (self.next()? == b).then_some(())
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        if self.s.get(self.at..self.at + word.len())? != word {
            return None;
        }
        self.at += word.len();
        // a literal runs into the next token only through a delimiter
        match self.peek() {
            None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') => Some(()),
            _ => None,
        }
    }

    /// The bytes of a string without escapes or control characters up to its closing quote,
    /// and whether they are all ASCII (the parser at its opening quote; left past the closing one).
    #[inline]
    fn raw_string(&mut self) -> Option<(&'a [u8], bool)> {
        self.expect(b'"')?;
        let rest = &self.s[self.at..];
        let (end, flags) = scan(rest)?;
        if rest[end] != b'"' || flags & CONTROL != 0 {
            return None;
        }
        self.at += end + 1;
        Some((&rest[..end], flags & NON_ASCII == 0))
    }

    /// A string without escapes or control characters, as checked UTF-8 text: timestamps.
    fn plain_string(&mut self) -> Option<&'a str> {
        let (body, ascii) = self.raw_string()?;
        if ascii {
            // SAFETY: ASCII is UTF-8
            return Some(unsafe { std::str::from_utf8_unchecked(body) });
        }
        std::str::from_utf8(body).ok()
    }

    /// A field name's bytes. Checked UTF-8 only when it matches no column (a match equals a
    /// column name, which is text).
    fn key(&mut self) -> Option<(&'a [u8], bool)> {
        self.raw_string()
    }

    /// A string value, unescaped, appended to `out` as checked UTF-8 (the parser at its opening
    /// quote). A raw control character (not JSON) or a lone escaped surrogate is given up.
    fn string_into(&mut self, out: &mut Vec<u8>) -> Option<()> {
        self.expect(b'"')?;
        let start = out.len();
        let mut ascii = true;
        loop {
            let rest = &self.s[self.at..];
            let (k, flags) = scan(rest)?;
            if flags & CONTROL != 0 {
                return None;
            }
            ascii &= flags & NON_ASCII == 0;
            out.extend_from_slice(&rest[..k]);
            self.at += k + 1;
            if rest[k] == b'"' {
                break;
            }
            ascii = false; // an escape may write any character: checked below
            let c = match self.next()? {
                b'"' => '"',
                b'\\' => '\\',
                b'/' => '/',
                b'b' => '\u{8}',
                b'f' => '\u{c}',
                b'n' => '\n',
                b'r' => '\r',
                b't' => '\t',
                b'u' => {
                    let high = self.hex4()?;
                    match high {
                        0xD800..=0xDBFF => {
                            self.expect(b'\\')?;
                            self.expect(b'u')?;
                            let low = self.hex4()?;
                            if !(0xDC00..=0xDFFF).contains(&low) {
                                return None;
                            }
                            char::from_u32(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))?
                        }
                        0xDC00..=0xDFFF => return None,
                        _ => char::from_u32(high)?,
                    }
                }
                _ => return None,
            };
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
        if !ascii {
            std::str::from_utf8(&out[start..]).ok()?;
        }
        Some(())
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.s.get(self.at..self.at + 4)?;
        let mut v = 0u32;
        for &d in digits {
            v = v * 16 + (d as char).to_digit(16)?;
        }
        self.at += 4;
        Some(v)
    }

    /// The extent of a JSON number token (checked against the grammar), and whether it is a plain
    /// integer (no fraction, no exponent).
    fn number(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.at;
        let s = self.s;
        let mut i = start;
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                while s.get(i).is_some_and(u8::is_ascii_digit) {
                    i += 1;
                }
            }
            _ => return None,
        }
        let mut integer = true;
        if s.get(i) == Some(&b'.') {
            integer = false;
            i += 1;
            let digits = i;
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return None;
            }
        }
        if let Some(b'e' | b'E') = s.get(i) {
            integer = false;
            i += 1;
            if let Some(b'+' | b'-') = s.get(i) {
                i += 1;
            }
            let digits = i;
            while s.get(i).is_some_and(u8::is_ascii_digit) {
                i += 1;
            }
            if i == digits {
                return None;
            }
        }
        match s.get(i) {
            None | Some(b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') => {}
            _ => return None,
        }
        self.at = i;
        Some((&s[start..i], integer))
    }

    /// A plain integer that fits an i64 (a fraction or an exponent is left to the exact path).
    fn integer(&mut self) -> Option<i64> {
        let (text, integer) = self.number()?;
        if !integer {
            return None;
        }
        lexical_core::parse::<i64>(text).ok()
    }

    /// A finite double from a number token (the nearest, as Rust's and arrow-json's parsers give).
    fn float(&mut self) -> Option<f64> {
        let (text, _) = self.number()?;
        let v = lexical_core::parse::<f64>(text).ok()?;
        v.is_finite().then_some(v)
    }

    /// Any JSON value, checked and discarded (a field the schema does not have, not strict).
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => {
                let mut sink = Vec::new();
                self.string_into(&mut sink)
            }
            b'{' => {
                self.at += 1;
                self.ws();
                if self.peek()? == b'}' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    let mut sink = Vec::new();
                    self.string_into(&mut sink)?;
                    self.ws();
                    self.expect(b':')?;
                    self.ws();
                    self.skip_value()?;
                    self.ws();
                    match self.next()? {
                        b',' => {}
                        b'}' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.at += 1;
                    return Some(());
                }
                loop {
                    self.ws();
                    self.skip_value()?;
                    self.ws();
                    match self.next()? {
                        b',' => {}
                        b']' => return Some(()),
                        _ => return None,
                    }
                }
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }
}

const CONTROL: u8 = 1;
const NON_ASCII: u8 = 2;

/// The first `"` or `\\` in `s`, and what the bytes before it hold (`CONTROL`, `NON_ASCII`
/// bits), in one pass: short strings (most field names and values) byte by byte, the rest of a
/// longer one by memchr.
#[inline]
fn scan(s: &[u8]) -> Option<(usize, u8)> {
    const SHORT: usize = 32;
    let mut flags = 0u8;
    for (i, &b) in s.iter().take(SHORT).enumerate() {
        if b == b'"' || b == b'\\' {
            return Some((i, flags));
        }
        flags |= u8::from(b < 0x20) | (u8::from(b >= 0x80) << 1);
    }
    if s.len() <= SHORT {
        return None;
    }
    let end = memchr::memchr2(b'"', b'\\', &s[SHORT..])? + SHORT;
    let tail = &s[SHORT..end];
    flags |= u8::from(tail.iter().any(|&b| b < 0x20)) | (u8::from(!tail.is_ascii()) << 1);
    Some((end, flags))
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
