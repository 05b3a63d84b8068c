//! Decoders for the Iceberg types arrow-json does not read the way Kafka producers write them,
//! or reads by changing the value:
//! - UUIDs as text (`8-4-4-4-12` or 32 hex digits) into `arrow.uuid` / FixedSizeBinary(16), and
//!   binary / fixed values as base64 text (arrow-json expects hex, and panics on a non-string
//!   token for fixed-size binary);
//! - integers and decimals exactly: arrow-json truncates `7.9` into a long and rounds digits past
//!   a decimal's scale; here a value that does not fit exactly is a record error;
//! - dates, times and timestamps (`temporal.rs`): ISO-8601 text, with a UTC offset for a timestamp
//!   with zone and without one for a timestamp without zone; a number only for a timestamp, with
//!   the unit the column declares;
//! - structs (`structs.rs`) and maps (`unique.rs`): each key once per object (arrow-json keeps
//!   the last value of a repeated field, and both entries of a repeated map key).
//!
//! Any other token is a record error naming what was expected.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Decimal128Builder, FixedSizeBinaryBuilder, GenericBinaryBuilder, Int16Builder, Int32Builder,
    Int64Builder, Int8Builder, OffsetSizeTrait, PrimitiveBuilder,
};
use arrow::datatypes::{ArrowPrimitiveType, DataType, FieldRef, Float32Type, Float64Type};
use arrow::error::ArrowError;
use arrow::json::reader::{ArrayDecoder, DecoderContext, DecoderFactory, Tape, TapeElement};
use base64::Engine;

use super::structs::Structs;
use super::temporal::{Dates, Times, Timestamps};
use super::unique::UniqueKeys;

const UUID_EXTENSION: &str = "arrow.uuid";
/// Field metadata: the unit of a number sent for a timestamp or time column (`s`, `ms`, `us`,
/// `ns`: since the epoch, since midnight) or a date column (`d`: days since 1970-01-01).
pub const UNIT_KEY: &str = "frazil.unit";
/// Field metadata: `half_even` lets an integer or decimal column round digits past its scale
/// (a fraction into an integer, too many decimal places) instead of refusing the record.
pub const ROUNDING_KEY: &str = "frazil.rounding";

#[derive(Debug, Default)]
pub(crate) struct Factory;

impl DecoderFactory for Factory {
    fn make_default_decoder(
        &self,
        ctx: &DecoderContext,
        field: &FieldRef,
        is_nullable: bool,
    ) -> Result<Option<Box<dyn ArrayDecoder>>, ArrowError> {
        let is_uuid = field.metadata().get("ARROW:extension:name").map(String::as_str) == Some(UUID_EXTENSION);
        let round = match field.metadata().get(ROUNDING_KEY).map(String::as_str) {
            None => false,
            Some("half_even") => true,
            Some(other) => {
                return Err(ArrowError::SchemaError(format!(
                    "field {:?}: rounding {other:?} is not half_even",
                    field.name()
                )))
            }
        };
        Ok(match field.data_type() {
            // arrow-json keeps the last of a repeated field, and both entries of a repeated map key
            DataType::Struct(_) => Structs::of(ctx, field, is_nullable)?.map(|s| Box::new(s) as Box<dyn ArrayDecoder>),
            DataType::Map(..) => Some(Box::new(UniqueKeys::new(ctx.make_builtin_decoder(field, is_nullable)?))),
            DataType::Int8 => Some(Box::new(ExactInt::<Int8Builder>::new("an int8", round))),
            DataType::Int16 => Some(Box::new(ExactInt::<Int16Builder>::new("an int16", round))),
            DataType::Int32 => Some(Box::new(ExactInt::<Int32Builder>::new("an int (32-bit)", round))),
            DataType::Int64 => Some(Box::new(ExactInt::<Int64Builder>::new("a long (64-bit)", round))),
            DataType::Decimal128(precision, scale) => {
                Some(Box::new(ExactDecimal { precision: *precision, scale: *scale, round }))
            }
            DataType::Float32 => Some(Box::new(Floats::<Float32Type>::new("a float (32-bit)"))),
            DataType::Float64 => Some(Box::new(Floats::<Float64Type>::new("a double (64-bit)"))),
            DataType::Timestamp(_, _) => Some(Box::new(Timestamps::of(field)?.expect("a timestamp field"))),
            DataType::Date32 | DataType::Date64 => Some(Box::new(Dates::of(field)?.expect("a date field"))),
            DataType::Time32(_) | DataType::Time64(_) => Some(Box::new(Times::of(field)?.expect("a time field"))),
            DataType::FixedSizeBinary(16) if is_uuid => Some(Box::new(Uuid)),
            DataType::FixedSizeBinary(len) => Some(Box::new(FixedBase64(*len))),
            DataType::Binary => Some(Box::new(Base64::<i32>::default())),
            DataType::LargeBinary => Some(Box::new(Base64::<i64>::default())),
            _ => None,
        })
    }
}

fn string_at<'a>(tape: &Tape<'a>, p: u32, expected: &str) -> Result<Option<&'a str>, ArrowError> {
    match tape.get(p) {
        TapeElement::String(idx) => Ok(Some(tape.get_string(idx))),
        TapeElement::Null => Ok(None),
        _ => Err(tape.error(p, expected)),
    }
}

fn base64_bytes(text: &str) -> Result<Vec<u8>, ArrowError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| ArrowError::JsonError(format!("expected base64 text, got {text:?} ({e})")))
}

/// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (any case) or 32 hex digits.
pub(crate) fn parse_uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    let hex: Vec<u8> = match bytes.len() {
        36 if [8, 13, 18, 23].iter().all(|&i| bytes[i] == b'-') => {
            bytes.iter().enumerate().filter(|(i, _)| ![8, 13, 18, 23].contains(i)).map(|(_, b)| *b).collect()
        }
        32 => bytes.to_vec(),
        _ => return None,
    };
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

struct Uuid;

impl ArrayDecoder for Uuid {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = FixedSizeBinaryBuilder::with_capacity(pos.len(), 16);
        for &p in pos {
            match string_at(tape, p, "a UUID string")? {
                Some(text) => builder.append_value(parse_uuid(text).ok_or_else(|| {
                    ArrowError::JsonError(format!(
                        "expected a UUID like 123e4567-e89b-12d3-a456-426614174000, got {text:?}"
                    ))
                })?)?,
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

struct FixedBase64(i32);

impl ArrayDecoder for FixedBase64 {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = FixedSizeBinaryBuilder::with_capacity(pos.len(), self.0);
        for &p in pos {
            match string_at(tape, p, "base64 text")? {
                Some(text) => {
                    let bytes = base64_bytes(text)?;
                    if bytes.len() != self.0 as usize {
                        return Err(ArrowError::JsonError(format!(
                            "expected {} bytes, got {} from {text:?}",
                            self.0,
                            bytes.len()
                        )));
                    }
                    builder.append_value(&bytes)?;
                }
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

#[derive(Default)]
struct Base64<O>(std::marker::PhantomData<O>);

impl<O: OffsetSizeTrait> ArrayDecoder for Base64<O> {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = GenericBinaryBuilder::<O>::with_capacity(pos.len(), pos.len() * 16);
        for &p in pos {
            match string_at(tape, p, "base64 text")? {
                Some(text) => builder.append_value(base64_bytes(text)?),
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

/// The text of a number or string token (None for null); anything else is an error.
fn number_text<'a>(tape: &Tape<'a>, p: u32, expected: &str) -> Result<Option<&'a str>, ArrowError> {
    match tape.get(p) {
        TapeElement::Number(idx) | TapeElement::String(idx) => Ok(Some(tape.get_string(idx))),
        TapeElement::Null => Ok(None),
        _ => Err(tape.error(p, expected)),
    }
}

/// `text` (a JSON number, or a string holding one) times 10^`scale`, exactly: an error when a
/// non-zero digit would be cut off, or when it does not fit an i128.
pub(crate) fn exact_scaled(text: &str, scale: i8) -> Result<i128, String> {
    scaled(text, scale, false)
}

/// [`exact_scaled`], or with `round` the digits past `scale` rounded half to even (`2.5` to 2,
/// `3.5` to 4, `-2.5` to -2) instead of refused. An overflow is an error either way.
pub(crate) fn scaled(text: &str, scale: i8, round: bool) -> Result<i128, String> {
    if scale == 0 {
        if let Ok(v) = text.parse::<i64>() {
            return Ok(v as i128); // the common case: a plain integer, no scan below
        }
    }
    let t = text.trim();
    let (negative, body) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().map_err(|_| format!("{text:?} is not a number"))?),
        None => (body, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if whole.is_empty() && fraction.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(format!("{text:?} is not a number"));
    }
    // the digits of whole and fraction as one integer d: the value is d * 10^shift
    let shift = exponent.saturating_sub(fraction.len() as i32).saturating_add(scale as i32);
    let count = whole.len() + fraction.len();
    let kept = if shift >= 0 { count } else { count.saturating_sub(shift.unsigned_abs() as usize) };
    let overflow = || format!("{text} is too large");
    let mut value: i128 = 0;
    let (mut first_dropped, mut rest_nonzero) = (None, false);
    for (i, b) in whole.bytes().chain(fraction.bytes()).enumerate() {
        if i < kept {
            value = value.checked_mul(10).and_then(|v| v.checked_add((b - b'0') as i128)).ok_or_else(overflow)?;
        } else if !round {
            if b != b'0' {
                return Err(if scale == 0 {
                    format!("{text} has a fractional part")
                } else {
                    format!("{text} has more than {scale} digit(s) after the decimal point")
                });
            }
        } else if first_dropped.is_none() {
            first_dropped = Some(b - b'0');
        } else if b != b'0' {
            rest_nonzero = true;
        }
    }
    if let Some(d) = first_dropped {
        if d > 5 || (d == 5 && (rest_nonzero || value % 2 == 1)) {
            value = value.checked_add(1).ok_or_else(overflow)?;
        }
    }
    if shift > 0 && value != 0 {
        let factor = 10i128.checked_pow(shift as u32).ok_or_else(overflow)?;
        value = value.checked_mul(factor).ok_or_else(overflow)?;
    }
    Ok(if negative { -value } else { value })
}

/// Integers that fit the column exactly; a fraction or an overflow is an error, never a cut.
struct ExactInt<B> {
    what: &'static str,
    round: bool,
    _builder: std::marker::PhantomData<B>,
}

impl<B> ExactInt<B> {
    fn new(what: &'static str, round: bool) -> Self {
        Self { what, round, _builder: std::marker::PhantomData }
    }
}

impl<T: ArrowPrimitiveType> ArrayDecoder for ExactInt<PrimitiveBuilder<T>>
where
    T::Native: TryFrom<i128>,
{
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = PrimitiveBuilder::<T>::with_capacity(pos.len());
        for &p in pos {
            match number_text(tape, p, "an integer")? {
                Some(text) => {
                    let value = scaled(text, 0, self.round)
                        .map_err(|e| ArrowError::JsonError(format!("{e}; the column is {}", self.what)))?;
                    let value = T::Native::try_from(value)
                        .map_err(|_| ArrowError::JsonError(format!("{text} does not fit {}", self.what)))?;
                    builder.append_value(value);
                }
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

/// How a float column's type narrows a double: `None` when a finite double is beyond its range.
trait FloatNative: ArrowPrimitiveType + Send {
    fn narrow(v: f64) -> Option<Self::Native>;
}

impl FloatNative for Float32Type {
    fn narrow(v: f64) -> Option<f32> {
        let f = v as f32;
        (f.is_finite() || !v.is_finite()).then_some(f)
    }
}

impl FloatNative for Float64Type {
    fn narrow(v: f64) -> Option<f64> {
        Some(v)
    }
}

/// Floats and doubles: the nearest IEEE value of a number, or of a string holding one (what a
/// float column means; `"NaN"` and `"Infinity"` as text are taken as such). A finite number
/// beyond the type's range is an error, never an infinity.
struct Floats<T> {
    what: &'static str,
    _type: std::marker::PhantomData<T>,
}

impl<T> Floats<T> {
    fn new(what: &'static str) -> Self {
        Self { what, _type: std::marker::PhantomData }
    }
}

impl<T: FloatNative> ArrayDecoder for Floats<T> {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut builder = PrimitiveBuilder::<T>::with_capacity(pos.len());
        for &p in pos {
            let is_text = matches!(tape.get(p), TapeElement::String(_));
            match number_text(tape, p, "a number")? {
                Some(text) => {
                    // a number's text is exactly the token; only a string holding one may carry spaces
                    let v: f64 = if is_text { text.trim() } else { text }
                        .parse()
                        .map_err(|_| ArrowError::JsonError(format!("{text:?} is not a number")))?;
                    let named = is_text && !v.is_finite(); // "NaN", "Infinity" written as text
                    if !v.is_finite() && !named {
                        return Err(ArrowError::JsonError(format!("{text} is out of range for {}", self.what)));
                    }
                    let value = T::narrow(v)
                        .ok_or_else(|| ArrowError::JsonError(format!("{text} is out of range for {}", self.what)))?;
                    builder.append_value(value);
                }
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish()))
    }
}

/// Decimals with at most the column's scale and precision; anything else is an error, never a
/// rounding.
struct ExactDecimal {
    precision: u8,
    scale: i8,
    round: bool,
}

impl ArrayDecoder for ExactDecimal {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let (precision, scale) = (self.precision, self.scale);
        let mut builder = Decimal128Builder::with_capacity(pos.len());
        let limit = 10i128.pow(precision as u32);
        for &p in pos {
            match number_text(tape, p, "a decimal number")? {
                Some(text) => {
                    let value = scaled(text, scale, self.round).map_err(|e| {
                        ArrowError::JsonError(format!("{e}; the column is decimal({precision}, {scale})"))
                    })?;
                    if value.abs() >= limit {
                        return Err(ArrowError::JsonError(format!(
                            "{text} has more than {} digit(s) before the decimal point; the column is decimal({precision}, {scale})",
                            precision as i16 - scale as i16
                        )));
                    }
                    builder.append_value(value);
                }
                None => builder.append_null(),
            }
        }
        Ok(Arc::new(builder.finish().with_precision_and_scale(precision, scale)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_scale_exactly_or_not_at_all() {
        assert_eq!(exact_scaled("7", 0), Ok(7));
        assert_eq!(exact_scaled("-7.000", 0), Ok(-7));
        assert_eq!(exact_scaled("1e3", 0), Ok(1000));
        assert_eq!(exact_scaled("1.5E1", 0), Ok(15));
        assert_eq!(exact_scaled("0.0", 0), Ok(0));
        assert_eq!(exact_scaled("12.34", 2), Ok(1234));
        assert_eq!(exact_scaled("12.3400", 2), Ok(1234));
        assert_eq!(exact_scaled("12", 2), Ok(1200));
        assert_eq!(exact_scaled("-0.05", 2), Ok(-5));
        assert_eq!(exact_scaled("1234e-2", 2), Ok(1234));
        assert_eq!(exact_scaled("7.9", 0), Err("7.9 has a fractional part".to_string()));
        assert_eq!(exact_scaled("1e-1", 0), Err("1e-1 has a fractional part".to_string()));
        assert_eq!(exact_scaled("1.239", 2), Err("1.239 has more than 2 digit(s) after the decimal point".to_string()));
        assert!(exact_scaled("1e400", 0).unwrap_err().contains("too large"));
        for bad in ["", "-", "1.2.3", "abc", "1e", "0x10", "."] {
            assert!(exact_scaled(bad, 0).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn rounding_is_half_to_even_and_only_when_asked() {
        for (text, scale, want) in [
            ("2.5", 0, 2),
            ("3.5", 0, 4),
            ("-2.5", 0, -2),
            ("-3.5", 0, -4),
            ("2.51", 0, 3),
            ("2.4999", 0, 2),
            ("7.9", 0, 8),
            ("0.005", 2, 0),
            ("0.015", 2, 2),
            ("1.2350001", 2, 124),
            ("1.239", 2, 124),
            ("12.34", 2, 1234),
            ("25e-1", 0, 2),
        ] {
            assert_eq!(scaled(text, scale, true), Ok(want), "{text} at scale {scale}");
        }
        assert!(scaled("1e400", 0, true).unwrap_err().contains("too large"));
        assert!(scaled("7.9", 0, false).unwrap_err().contains("fractional"));
    }

    #[test]
    fn floats_take_the_nearest_value_and_refuse_what_their_range_cannot_hold() {
        use crate::buffer::{JsonBuffer, Options, Records};
        use arrow::array::AsArray;
        use arrow::datatypes::{Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("f", DataType::Float32, true),
            Field::new("d", DataType::Float64, true),
        ]));
        let buf = JsonBuffer::new(schema, Options::default()).unwrap();
        let values = [
            r#"{"f": 0.5, "d": 0.1}"#,
            r#"{"f": 1e39}"#,
            r#"{"d": 1e400}"#,
            r#"{"f": "2.5", "d": "-0"}"#,
            r#"{"f": "NaN", "d": "Infinity"}"#,
            r#"{"f": "x"}"#,
            r#"{"f": true}"#,
        ];
        let offsets: Vec<i64> = (0..values.len() as i64).collect();
        let keys: Vec<Option<Vec<u8>>> = vec![None; values.len()];
        let ts = vec![0; values.len()];
        let out = buf
            .append(&Records {
                topic: "t",
                partition: 0,
                offsets: &offsets,
                timestamps_ms: &ts,
                keys: &keys,
                values: &values,
                headers: None,
            })
            .unwrap();
        let got: Vec<(i64, &str, &str)> =
            out.errors.iter().map(|e| (e.offset, e.field.as_str(), e.reason.as_str())).collect();
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!((got[0].0, got[0].1), (1, "f"));
        assert!(got[0].2.contains("1e39 is out of range for a float (32-bit)"), "{}", got[0].2);
        assert_eq!((got[1].0, got[1].1), (2, "d"), "{got:?}"); // beyond any double
        assert!(got[1].2.contains("out of range"), "{}", got[1].2);
        assert_eq!((got[2].0, got[3].0), (5, 6));
        let batch = buf.drain().unwrap().unwrap();
        let f = batch.column(0).as_primitive::<Float32Type>();
        let d = batch.column(1).as_primitive::<Float64Type>();
        assert_eq!((f.value(0), d.value(0)), (0.5, 0.1));
        assert_eq!((f.value(1), d.value(1).to_bits()), (2.5, (-0.0f64).to_bits()));
        assert!(f.value(2).is_nan() && d.value(2) == f64::INFINITY);
    }

    #[test]
    fn uuids_parse_in_both_forms_and_nothing_else() {
        let want = [0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00];
        assert_eq!(parse_uuid("123e4567-e89b-12d3-a456-426614174000"), Some(want));
        assert_eq!(parse_uuid("123E4567E89B12D3A456426614174000"), Some(want));
        for bad in [
            "",
            "123e4567-e89b-12d3-a456-42661417400",
            "123e4567ze89b-12d3-a456-426614174000",
            "g23e4567e89b12d3a456426614174000",
        ] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }
}
