//! Kafka record headers as columns: a named header into a column of its own (the last header of
//! that name, as Kafka's `lastHeader` reads it; NULL when the record has none or its value is
//! null), and every header of a record into one `map<string, binary>` column (the last value of a
//! name repeated). A header's bytes land as text in a string column (valid UTF-8, or the record
//! is bad), as they are in a binary column, and as the number or boolean their text spells in an
//! int, long, double or boolean column, exactly, or the record is bad naming the header. Pure
//! Rust, no pyo3.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryBuilder, BooleanBuilder, Float64Builder, Int32Builder, Int64Builder, MapArray, MapBuilder,
    MapFieldNames, StringBuilder, StructArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Schema};
use arrow::error::ArrowError;

/// One record's headers in order: (name, value).
pub type Headers<'a> = Vec<(&'a [u8], Option<&'a [u8]>)>;

/// What a header column holds, by its Arrow type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Text,
    Bytes,
    Int,
    Long,
    Double,
    Boolean,
}

impl Kind {
    pub(super) fn of(data_type: &DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Utf8 | DataType::LargeUtf8 => Kind::Text,
            DataType::Binary | DataType::LargeBinary => Kind::Bytes,
            DataType::Int32 => Kind::Int,
            DataType::Int64 => Kind::Long,
            DataType::Float64 => Kind::Double,
            DataType::Boolean => Kind::Boolean,
            _ => return None,
        })
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Text => "string",
            Kind::Bytes => "binary",
            Kind::Int => "int",
            Kind::Long => "long",
            Kind::Double => "double",
            Kind::Boolean => "boolean",
        }
    }
}

/// The header columns of a buffer's schema: which column takes which header, and the column of
/// all headers.
#[derive(Debug, Clone, Default)]
pub struct HeaderColumns {
    /// (index in the schema, header name, what the column holds)
    named: Vec<(usize, Vec<u8>, Kind)>,
    /// The index of the `map<string, binary>` column of every header.
    all: Option<usize>,
}

impl HeaderColumns {
    /// `named`: (column, header name); `all`: the column of every header. Each column must be in
    /// `schema`, a named one of type string, binary, int, long, double or boolean, the other a
    /// map of string to binary.
    pub fn new(schema: &Schema, named: &[(String, Vec<u8>)], all: Option<&str>) -> Result<Self, ArrowError> {
        let index = |column: &str| {
            schema.index_of(column).map_err(|_| {
                ArrowError::SchemaError(format!("header column {column:?} is not in the schema; add it to the table"))
            })
        };
        let mut out = HeaderColumns::default();
        for (column, header) in named {
            let i = index(column)?;
            let kind = Kind::of(schema.field(i).data_type()).ok_or_else(|| {
                ArrowError::SchemaError(format!(
                    "header column {column:?} is {}; a header lands in a string, binary, int, long, double or \
                     boolean column",
                    schema.field(i).data_type()
                ))
            })?;
            out.named.push((i, header.clone(), kind));
        }
        if let Some(column) = all {
            let i = index(column)?;
            let fits = matches!(schema.field(i).data_type(), DataType::Map(entries, _)
                if matches!(entries.data_type(), DataType::Struct(kv) if kv.len() == 2
                    && Kind::of(kv[0].data_type()) == Some(Kind::Text)
                    && Kind::of(kv[1].data_type()) == Some(Kind::Bytes)));
            if !fits {
                return Err(ArrowError::SchemaError(format!(
                    "the column of every header, {column:?}, must be a map<string, binary>, not {}",
                    schema.field(i).data_type()
                )));
            }
            out.all = Some(i);
        }
        Ok(out)
    }

    pub fn is_empty(&self) -> bool {
        self.named.is_empty() && self.all.is_none()
    }

    /// Whether the schema's column `i` is filled from headers.
    pub fn holds(&self, i: usize) -> bool {
        self.all == Some(i) || self.named.iter().any(|(j, _, _)| *j == i)
    }

    /// Why `headers` cannot fill their columns: (the column, the reason naming the header).
    pub fn check(&self, schema: &Schema, headers: &Headers<'_>) -> Result<(), (String, String)> {
        for (i, name, kind) in &self.named {
            if let Some(Some(value)) = last(headers, name) {
                parse(*kind, value).map_err(|why| (schema.field(*i).name().clone(), reason(name, value, why)))?;
            }
        }
        if let Some(i) = self.all {
            if let Some((name, _)) = headers.iter().find(|(name, _)| std::str::from_utf8(name).is_err()) {
                return Err((
                    schema.field(i).name().clone(),
                    format!("a header's name is not UTF-8 text ({}); a map's keys are strings", shown(name)),
                ));
            }
        }
        Ok(())
    }

    /// The header columns of the records at `rows` (each checked): (index in the schema, array).
    pub fn columns(
        &self,
        schema: &Schema,
        headers: &[Headers<'_>],
        rows: &[usize],
    ) -> Result<Vec<(usize, ArrayRef)>, ArrowError> {
        let mut out = Vec::with_capacity(self.named.len() + 1);
        for (i, name, kind) in &self.named {
            let values = rows.iter().map(|&r| last(&headers[r], name).flatten());
            let built = column(*kind, values)?;
            let wanted = schema.field(*i).data_type();
            out.push((*i, if built.data_type() == wanted { built } else { cast(&built, wanted)? }));
        }
        if let Some(i) = self.all {
            let DataType::Map(entries, sorted) = schema.field(i).data_type() else { unreachable!("checked in new") };
            let DataType::Struct(kv) = entries.data_type() else { unreachable!("checked in new") };
            let names =
                MapFieldNames { entry: entries.name().clone(), key: kv[0].name().clone(), value: kv[1].name().clone() };
            let mut builder = MapBuilder::new(Some(names), StringBuilder::new(), BinaryBuilder::new());
            for &r in rows {
                let record = &headers[r];
                for (k, (name, value)) in record.iter().enumerate() {
                    if record[k + 1..].iter().any(|(later, _)| later == name) {
                        continue; // the last value of a repeated name
                    }
                    let key = std::str::from_utf8(name)
                        .map_err(|_| ArrowError::InvalidArgumentError("a header name is not UTF-8".into()))?;
                    builder.keys().append_value(key);
                    builder.values().append_option(*value);
                }
                builder.append(true)?;
            }
            // as the schema spells it (large or not): the keys and values cast, the offsets kept
            let built = builder.finish();
            let children: Vec<ArrayRef> =
                vec![cast(built.keys(), kv[0].data_type())?, cast(built.values(), kv[1].data_type())?];
            let entries_array = StructArray::try_new(kv.clone(), children, None)?;
            let map = MapArray::try_new(entries.clone(), built.offsets().clone(), entries_array, None, *sorted)?;
            out.push((i, Arc::new(map)));
        }
        Ok(out)
    }
}

/// The last header named `name`: None when there is none, Some(None) when its value is null.
fn last<'h>(headers: &'h Headers<'_>, name: &[u8]) -> Option<Option<&'h [u8]>> {
    headers.iter().rev().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

fn text(value: &[u8]) -> Result<&str, &'static str> {
    std::str::from_utf8(value).map_err(|_| "not UTF-8 text")
}

/// Checks that `value` fits `kind`, exactly.
pub(super) fn parse(kind: Kind, value: &[u8]) -> Result<(), &'static str> {
    match kind {
        Kind::Bytes => Ok(()),
        Kind::Text => text(value).map(|_| ()),
        Kind::Int => text(value)?.parse::<i32>().map(|_| ()).map_err(|_| "not an int (32-bit) written in digits"),
        Kind::Long => text(value)?.parse::<i64>().map(|_| ()).map_err(|_| "not a long (64-bit) written in digits"),
        Kind::Double => match text(value)?.parse::<f64>() {
            Ok(v) if v.is_finite() || matches!(text(value)?, "NaN" | "Infinity" | "-Infinity" | "inf" | "-inf") => {
                Ok(())
            }
            Ok(_) => Err("a number beyond a double's range"),
            Err(_) => Err("not a number"),
        },
        Kind::Boolean => match text(value)? {
            "true" | "false" => Ok(()),
            _ => Err("not \"true\" or \"false\""),
        },
    }
}

pub(super) fn shown(value: &[u8]) -> String {
    match std::str::from_utf8(value) {
        Ok(s) if s.len() <= 64 => format!("{s:?}"),
        Ok(s) => format!("{:?}...", &s[..s.char_indices().nth(61).map_or(s.len(), |(i, _)| i)]),
        Err(_) => format!("{} bytes that are not UTF-8", value.len()),
    }
}

fn reason(name: &[u8], value: &[u8], why: &str) -> String {
    format!("header {} is {}: {why}", shown(name), shown(value))
}

pub(super) fn column<'v>(kind: Kind, values: impl Iterator<Item = Option<&'v [u8]>>) -> Result<ArrayRef, ArrowError> {
    let bad =
        |why: &str| ArrowError::InvalidArgumentError(format!("a value unchecked for a {} column: {why}", kind.name()));
    let as_text = |v: &'v [u8]| std::str::from_utf8(v).map_err(|_| bad("not UTF-8"));
    Ok(match kind {
        Kind::Bytes => Arc::new(values.collect::<arrow::array::BinaryArray>()),
        Kind::Text => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(v.map(as_text).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Int => {
            let mut b = Int32Builder::new();
            for v in values {
                b.append_option(v.map(|v| as_text(v)?.parse::<i32>().map_err(|_| bad("not an int"))).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Long => {
            let mut b = Int64Builder::new();
            for v in values {
                b.append_option(v.map(|v| as_text(v)?.parse::<i64>().map_err(|_| bad("not a long"))).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Double => {
            let mut b = Float64Builder::new();
            for v in values {
                b.append_option(v.map(|v| as_text(v)?.parse::<f64>().map_err(|_| bad("not a number"))).transpose()?);
            }
            Arc::new(b.finish())
        }
        Kind::Boolean => {
            let mut b = BooleanBuilder::new();
            for v in values {
                b.append_option(v.map(|v| Ok::<_, ArrowError>(as_text(v)? == "true")).transpose()?);
            }
            Arc::new(b.finish())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Field;
    use arrow::datatypes::{Int32Type, Int64Type};

    fn schema() -> Schema {
        let map = DataType::Map(
            Arc::new(Field::new(
                "key_value",
                DataType::Struct(
                    vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Binary, true)].into(),
                ),
                false,
            )),
            false,
        );
        Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("trace", DataType::Utf8, true),
            Field::new("attempt", DataType::Int32, true),
            Field::new("size", DataType::Int64, true),
            Field::new("headers", map, true),
        ])
    }

    fn hs<'a>(pairs: &[(&'a str, Option<&'a [u8]>)]) -> Headers<'a> {
        pairs.iter().map(|(k, v)| (k.as_bytes(), *v)).collect()
    }

    fn spec(schema: &Schema) -> HeaderColumns {
        let named = [
            ("trace".to_string(), b"trace-id".to_vec()),
            ("attempt".to_string(), b"attempt".to_vec()),
            ("size".to_string(), b"size".to_vec()),
        ];
        HeaderColumns::new(schema, &named, Some("headers")).unwrap()
    }

    #[test]
    fn named_headers_land_typed_the_last_one_wins_and_every_header_lands_in_the_map() {
        let schema = schema();
        let spec = spec(&schema);
        assert!(spec.holds(1) && spec.holds(4) && !spec.holds(0));
        let headers: Vec<Headers<'_>> = vec![
            hs(&[("trace-id", Some(b"t1")), ("attempt", Some(b"1")), ("attempt", Some(b"2"))]),
            hs(&[("size", None), ("other", Some(b"\xff"))]),
            vec![],
        ];
        for h in &headers {
            spec.check(&schema, h).unwrap();
        }
        let columns = spec.columns(&schema, &headers, &[0, 1, 2]).unwrap();
        let trace = columns[0].1.as_string::<i32>();
        assert_eq!((trace.value(0), trace.is_null(1), trace.is_null(2)), ("t1", true, true));
        let attempt = columns[1].1.as_primitive::<Int32Type>();
        assert_eq!((attempt.value(0), attempt.is_null(1)), (2, true));
        assert!(columns[2].1.as_primitive::<Int64Type>().is_null(1)); // a null value: NULL
        let map = columns[3].1.as_map();
        assert_eq!(map.value_offsets(), &[0, 2, 4, 4]); // "attempt" once, with its last value
        assert_eq!(map.keys().as_string::<i32>().value(1), "attempt");
        assert_eq!(map.values().as_binary::<i32>().value(1), b"2");
        assert!(map.values().is_null(2) && map.values().as_binary::<i32>().value(3) == b"\xff");
    }

    #[test]
    fn a_header_that_does_not_fit_its_column_is_named_with_its_value() {
        let schema = schema();
        let spec = spec(&schema);
        let bad = |h: Headers<'_>| spec.check(&schema, &h).unwrap_err();
        assert_eq!(
            bad(hs(&[("attempt", Some(b"x"))])),
            ("attempt".into(), "header \"attempt\" is \"x\": not an int (32-bit) written in digits".into())
        );
        assert_eq!(
            bad(hs(&[("size", Some(b"1.5"))])).1,
            "header \"size\" is \"1.5\": not a long (64-bit) written in digits"
        );
        assert_eq!(
            bad(hs(&[("trace-id", Some(b"\xff\xfe"))])).1,
            "header \"trace-id\" is 2 bytes that are not UTF-8: not UTF-8 text"
        );
        assert_eq!(bad(vec![(&b"\xff"[..], Some(&b"1"[..]))]).0, "headers");
        assert!(spec.check(&schema, &hs(&[("attempt", Some(b"-7"))])).is_ok());
    }

    #[test]
    fn a_header_column_of_another_type_is_refused_when_the_buffer_is_made() {
        let schema = Schema::new(vec![Field::new("at", DataType::Date32, true)]);
        let err = HeaderColumns::new(&schema, &[("at".into(), b"at".to_vec())], None).unwrap_err();
        assert!(err.to_string().contains("a header lands in a string, binary, int, long, double or boolean column"));
        let err = HeaderColumns::new(&schema, &[], Some("at")).unwrap_err();
        assert!(err.to_string().contains("must be a map<string, binary>"));
        assert!(HeaderColumns::new(&schema, &[("nope".into(), b"x".to_vec())], None).is_err());
    }
}
