//! Decoders for the Iceberg types arrow-json does not read the way Kafka producers write them:
//! UUIDs as text (`8-4-4-4-12` or 32 hex digits) into `arrow.uuid` / FixedSizeBinary(16), and
//! binary / fixed values as base64 text (arrow-json expects hex, and panics on a non-string
//! token for fixed-size binary). Any other token is a record error naming what was expected.

use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeBinaryBuilder, GenericBinaryBuilder, OffsetSizeTrait};
use arrow::datatypes::{DataType, FieldRef};
use arrow::error::ArrowError;
use arrow::json::reader::{ArrayDecoder, DecoderContext, DecoderFactory, Tape, TapeElement};
use base64::Engine;

const UUID_EXTENSION: &str = "arrow.uuid";

#[derive(Debug, Default)]
pub(crate) struct Factory;

impl DecoderFactory for Factory {
    fn make_default_decoder(
        &self,
        _ctx: &DecoderContext,
        field: &FieldRef,
        _is_nullable: bool,
    ) -> Result<Option<Box<dyn ArrayDecoder>>, ArrowError> {
        let is_uuid = field.metadata().get("ARROW:extension:name").map(String::as_str) == Some(UUID_EXTENSION);
        Ok(match field.data_type() {
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
                    ArrowError::JsonError(format!("expected a UUID like 123e4567-e89b-12d3-a456-426614174000, got {text:?}"))
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
                        return Err(ArrowError::JsonError(format!("expected {} bytes, got {} from {text:?}", self.0, bytes.len())));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_parse_in_both_forms_and_nothing_else() {
        let want = [0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00];
        assert_eq!(parse_uuid("123e4567-e89b-12d3-a456-426614174000"), Some(want));
        assert_eq!(parse_uuid("123E4567E89B12D3A456426614174000"), Some(want));
        for bad in ["", "123e4567-e89b-12d3-a456-42661417400", "123e4567ze89b-12d3-a456-426614174000", "g23e4567e89b12d3a456426614174000"] {
            assert_eq!(parse_uuid(bad), None, "{bad}");
        }
    }
}
