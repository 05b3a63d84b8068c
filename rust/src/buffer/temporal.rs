//! Dates, times and timestamps from JSON: ISO-8601 text, exactly; a number only for a timestamp
//! with the unit the column declares (field metadata [`UNIT_KEY`]: `s`, `ms`, `us`, `ns`), never
//! read as the column's own unit by guess; digits below the column's unit are an error, not a
//! truncation. A reason says first whether the text is a date, time or timestamp at all, then
//! what about it the column cannot take.
//!
//! arrow-json's own date and time decoders read a number as days or as the column's unit, cut a
//! timestamp sent for a date to the date of its UTC instant, and a fraction below a time column's
//! unit; here each of those is a record error.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, Date32Array, Date64Array, Time32MillisecondArray, Time32SecondArray, Time64MicrosecondArray,
    Time64NanosecondArray, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray,
    TimestampSecondArray,
};
use arrow::compute::kernels::cast_utils::{string_to_datetime, string_to_time_nanoseconds, Parser};
use arrow::datatypes::{DataType, Date32Type, FieldRef, TimeUnit};
use arrow::error::ArrowError;
use arrow::json::reader::{ArrayDecoder, Tape, TapeElement};

use super::decoders::{exact_scaled, UNIT_KEY};

/// Timestamps: ISO-8601 text (the UTC offset required with zone, refused without), or a number
/// in the declared unit (`sent`); the column's unit must hold the value exactly.
pub(crate) struct Timestamps {
    unit: TimeUnit,
    tz: Option<Arc<str>>,
    sent: Option<TimeUnit>,
}

fn nanos_per(unit: TimeUnit) -> i128 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

/// The reason for a value (`what`) more precise than the column's `unit`.
fn below(what: &str, unit: TimeUnit) -> String {
    format!("{what} has digits below {}, which the column does not keep", unit_name(unit).trim_end_matches('s'))
}

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "seconds",
        TimeUnit::Millisecond => "milliseconds",
        TimeUnit::Microsecond => "microseconds",
        TimeUnit::Nanosecond => "nanoseconds",
    }
}

#[inline(always)]
fn num(b: &[u8]) -> Option<i64> {
    b.iter().try_fold(0i64, |n, &d| d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0')))
}

/// Days since 1970-01-01 of `YYYY-MM-DD` (the first 10 bytes of `b`), if it is a real date.
#[inline(always)]
fn iso_days(b: &[u8]) -> Option<i64> {
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(&b[0..4])?, num(&b[5..7])?, num(&b[8..10])?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > month_days[month as usize - 1] {
        return None;
    }
    // days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil)
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

/// Nanoseconds since midnight of `HH:MM:SS` with up to 9 digits of fraction at the start of `b`
/// (no leap second), and the number of bytes it takes.
#[inline(always)]
fn iso_clock(b: &[u8]) -> Option<(i64, usize)> {
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (hour, minute, second) = (num(&b[0..2])?, num(&b[3..5])?, num(&b[6..8])?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut at = 8;
    let mut fraction = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        fraction = num(&b[at + 1..at + 1 + digits])? * 10i64.pow(9 - digits as u32);
        at += 1 + digits;
    }
    Some(((hour * 3600 + minute * 60 + second) * 1_000_000_000 + fraction, at))
}

/// Nanoseconds since the epoch of ISO-8601 text at any year from 1 to 9999 (PostgreSQL and Iceberg
/// both hold them; a nanosecond count in an i64 ends at 1677 and 2262, so this is an i128).
/// The common spelling is read here, 8x faster than arrow's parser
/// (`tests::the_quick_timestamp_parser_agrees_with_arrows`); arrow's reads the others.
pub(crate) fn text_instant(text: &str) -> Option<i128> {
    iso_instant(text.as_bytes()).or_else(|| arrow_instant(text))
}

/// [`text_instant`] by arrow's parser alone (it cuts digits past the ninth: see [`below_nanos`]).
fn arrow_instant(text: &str) -> Option<i128> {
    let at = string_to_datetime(&chrono::Utc, text).ok()?;
    Some(i128::from(at.timestamp()) * 1_000_000_000 + i128::from(at.timestamp_subsec_nanos()))
}

/// Nanoseconds since the epoch of the common ISO-8601 spelling, `YYYY-MM-DD` `T` or space
/// `HH:MM:SS`, up to 9 digits of fraction, then nothing, `Z` or `±HH:MM`; None for anything else.
#[inline(always)]
fn iso_instant(b: &[u8]) -> Option<i128> {
    if b.len() < 19 || !matches!(b[10], b'T' | b' ') {
        return None;
    }
    let days = iso_days(b)?;
    let (clock, used) = iso_clock(&b[11..])?;
    let offset = match &b[11 + used..] {
        [] | [b'Z'] | [b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (num(&[*h1, *h2])?, num(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let seconds = h * 3600 + m * 60;
            if *sign == b'+' {
                seconds
            } else {
                -seconds
            }
        }
        _ => return None,
    };
    Some(i128::from(days * 86_400 - offset) * 1_000_000_000 + i128::from(clock))
}

/// Whether ISO-8601 text names its UTC offset (`Z`, `+02:00`, `-0530`) after the time.
fn has_offset(text: &str) -> bool {
    let time = text.get(10..).unwrap_or("");
    time.ends_with(['Z', 'z']) || time.get(1..).is_some_and(|t| t.contains(['+', '-']))
}

/// Whether the first fraction of a second in `text` has a non-zero digit past the ninth, which
/// arrow's parsers cut off without a word (the quick parsers take at most 9 digits).
fn below_nanos(text: &str) -> bool {
    let Some(dot) = text.find('.') else { return false };
    text[dot + 1..].bytes().take_while(u8::is_ascii_digit).skip(9).any(|d| d != b'0')
}

/// The unit the field's metadata ([`UNIT_KEY`]) says a number sent for it counts in.
fn sent_unit(field: &FieldRef) -> Result<Option<TimeUnit>, ArrowError> {
    Ok(match field.metadata().get(UNIT_KEY).map(String::as_str) {
        None => None,
        Some("s") => Some(TimeUnit::Second),
        Some("ms") => Some(TimeUnit::Millisecond),
        Some("us") => Some(TimeUnit::Microsecond),
        Some("ns") => Some(TimeUnit::Nanosecond),
        Some(other) => {
            return Err(ArrowError::SchemaError(format!(
                "field {:?}: unit {other:?} is not one of s, ms, us, ns",
                field.name()
            )))
        }
    })
}

/// An integer number sent for a column whose unit says what it counts; the reason it is none.
fn integer(text: &str, what: &str) -> Result<i128, ArrowError> {
    exact_scaled(text, 0).map_err(|e| refused(format!("{e}; {what}")))
}

fn refused(reason: String) -> ArrowError {
    ArrowError::JsonError(reason)
}

impl Timestamps {
    /// The decoder of a timestamp field (None for another type); its unit for numbers from the
    /// field's metadata ([`UNIT_KEY`]).
    pub(crate) fn of(field: &FieldRef) -> Result<Option<Self>, ArrowError> {
        let DataType::Timestamp(unit, tz) = field.data_type() else { return Ok(None) };
        let sent = sent_unit(field)?;
        Ok(Some(Self { unit: *unit, tz: tz.clone(), sent }))
    }

    /// ISO-8601 text in the column's unit.
    pub(crate) fn parse_text(&self, text: &str) -> Result<i64, ArrowError> {
        let nanos = self.text_nanos(text)?;
        self.in_unit(nanos, || format!("{text:?}"))
    }

    /// Nanoseconds since the epoch of ISO-8601 text: first whether it is a timestamp at all, then
    /// whether its UTC offset is there exactly when the column has a zone.
    fn text_nanos(&self, text: &str) -> Result<i128, ArrowError> {
        let nanos = match iso_instant(text.as_bytes()) {
            Some(nanos) => nanos,
            None => match arrow_instant(text) {
                Some(_) if below_nanos(text) => return Err(refused(below(&format!("{text:?}"), TimeUnit::Nanosecond))),
                Some(nanos) => nanos,
                None => {
                    let like = if self.tz.is_some() { "2026-11-27T10:00:00Z" } else { "2026-11-27T10:00:00" };
                    return Err(refused(format!("{text:?} is not an ISO-8601 timestamp; expected one like {like}")));
                }
            },
        };
        match (self.tz.is_some(), has_offset(text)) {
            (true, false) => Err(refused(format!(
                "{text:?} has no UTC offset; the column is a timestamp with zone: send one (Z or +02:00), or use a \
                 timestamp column for local times"
            ))),
            (false, true) => Err(refused(format!(
                "{text:?} has a UTC offset; the column is a timestamp without zone: use a timestamptz column, or send \
                 the local time without an offset"
            ))),
            _ => Ok(nanos),
        }
    }

    /// `nanos` in the column's unit; `what` describes the value in an error (made only then).
    fn in_unit(&self, nanos: i128, what: impl Fn() -> String) -> Result<i64, ArrowError> {
        let per = nanos_per(self.unit);
        if nanos % per != 0 {
            return Err(refused(below(&what(), self.unit)));
        }
        i64::try_from(nanos / per).map_err(|_| ArrowError::JsonError(format!("{} is out of range", what())))
    }

    fn value(&self, tape: &Tape<'_>, p: u32) -> Result<Option<i64>, ArrowError> {
        let (nanos, what): (i128, String) = match tape.get(p) {
            TapeElement::Null => return Ok(None),
            TapeElement::String(idx) => {
                let text = tape.get_string(idx);
                return self.text_nanos(text).and_then(|nanos| self.in_unit(nanos, || format!("{text:?}"))).map(Some);
            }
            TapeElement::Number(idx) => {
                let text = tape.get_string(idx);
                let Some(sent) = self.sent else {
                    return Err(ArrowError::JsonError(format!(
                        "{text} is a number, and the column declares no unit for numbers: set unit = \"ms\" (or \"s\", \
                         \"us\", \"ns\") on the column, or send ISO-8601 text"
                    )));
                };
                let count = exact_scaled(text, 0)
                    .map_err(|e| ArrowError::JsonError(format!("{e}; {} since the epoch", unit_name(sent))))?;
                let nanos = count
                    .checked_mul(nanos_per(sent))
                    .ok_or_else(|| ArrowError::JsonError(format!("{text} is too large")))?;
                (nanos, format!("{text} {}", unit_name(sent)))
            }
            _ => return Err(tape.error(p, "an ISO-8601 timestamp or a number")),
        };
        self.in_unit(nanos, || what.clone()).map(Some)
    }
}

impl ArrayDecoder for Timestamps {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let values = pos.iter().map(|&p| self.value(tape, p)).collect::<Result<Vec<_>, _>>()?;
        let tz = self.tz.clone();
        let array: ArrayRef = match self.unit {
            TimeUnit::Second => Arc::new(values.into_iter().collect::<TimestampSecondArray>().with_timezone_opt(tz)),
            TimeUnit::Millisecond => {
                Arc::new(values.into_iter().collect::<TimestampMillisecondArray>().with_timezone_opt(tz))
            }
            TimeUnit::Microsecond => {
                Arc::new(values.into_iter().collect::<TimestampMicrosecondArray>().with_timezone_opt(tz))
            }
            TimeUnit::Nanosecond => {
                Arc::new(values.into_iter().collect::<TimestampNanosecondArray>().with_timezone_opt(tz))
            }
        };
        Ok(array)
    }
}

const DAY_NANOS: i64 = 86_400_000_000_000;

/// Dates (`date32` in days, or `date64` in milliseconds): ISO-8601 text. A timestamp is taken
/// only when it is midnight UTC (what a date means); any other time of day is refused, never cut.
/// A number is a count of days since 1970-01-01 only where the field's metadata says so
/// ([`UNIT_KEY`] `d`, as a source's schema does for Kafka Connect's and Debezium's dates).
pub(crate) struct Dates {
    millis: bool,
    days: bool,
}

impl Dates {
    pub(crate) fn of(field: &FieldRef) -> Result<Option<Self>, ArrowError> {
        let days = match field.metadata().get(UNIT_KEY).map(String::as_str) {
            None => false,
            Some("d") => true,
            Some(other) => {
                return Err(ArrowError::SchemaError(format!(
                    "field {:?}: unit {other:?} is not d, the one unit of a date",
                    field.name()
                )))
            }
        };
        Ok(match field.data_type() {
            DataType::Date32 => Some(Self { millis: false, days }),
            DataType::Date64 => Some(Self { millis: true, days }),
            _ => None,
        })
    }
}

/// Days since 1970-01-01 of a date's text; the reason it is none.
pub(crate) fn date_days(text: &str) -> Result<i64, String> {
    let b = text.as_bytes();
    if b.len() == 10 {
        if let Some(days) = iso_days(b) {
            return Ok(days);
        }
    }
    let nanos = text_instant(text);
    if let Some(nanos) = nanos.filter(|_| text.trim().len() > 10) {
        let day = i128::from(DAY_NANOS);
        if nanos % day != 0 || below_nanos(text) {
            return Err(format!(
                "{text:?} has a time of day, which a date column does not keep (a timestamp is taken for a date only \
                 at midnight UTC): send the date alone, like 2026-11-27, or use a timestamp column"
            ));
        }
        return i64::try_from(nanos / day).map_err(|_| format!("{text:?} is out of range"));
    }
    // the other spellings arrow reads as a date alone (`2026-9-8`, `+10999-12-31`), never one with a time
    let t = text.trim();
    if !t.contains(['T', 't', ' ', ':']) {
        if let Some(days) = Date32Type::parse(t) {
            return Ok(i64::from(days));
        }
    }
    Err(format!("{text:?} is not an ISO-8601 date; expected one like 2026-11-27"))
}

impl ArrayDecoder for Dates {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let mut days = Vec::with_capacity(pos.len());
        for &p in pos {
            days.push(match tape.get(p) {
                TapeElement::Null => None,
                TapeElement::String(idx) => {
                    let text = tape.get_string(idx);
                    let d = date_days(text).map_err(refused)?;
                    let d = i32::try_from(d).map_err(|_| refused(format!("{text:?} is out of range")))?;
                    Some(d)
                }
                TapeElement::Number(idx) if self.days => {
                    let text = tape.get_string(idx);
                    let d = integer(text, "days since 1970-01-01")?;
                    let d = i32::try_from(d).map_err(|_| refused(format!("{text} days is out of range")))?;
                    Some(d)
                }
                TapeElement::Number(idx) => {
                    return Err(refused(format!(
                        "{} is a number, and a date column takes ISO-8601 text only (a count of days would be a \
                         guess): send the date as text, like 2026-11-27, or set unit = \"d\" on the column",
                        tape.get_string(idx)
                    )))
                }
                _ => return Err(tape.error(p, "an ISO-8601 date")),
            });
        }
        Ok(if self.millis {
            Arc::new(days.into_iter().map(|d| d.map(|d| i64::from(d) * 86_400_000)).collect::<Date64Array>())
        } else {
            Arc::new(days.into_iter().collect::<Date32Array>())
        })
    }
}

/// Times of day (`time32` in seconds or milliseconds, `time64` in microseconds or nanoseconds):
/// ISO-8601 text from 00:00:00 to before 24:00:00, exactly in the column's unit.
/// A number is a count of the field's declared unit since midnight ([`UNIT_KEY`]), as a source's
/// schema says for Kafka Connect's and Debezium's times; without one it is refused.
pub(crate) struct Times {
    unit: TimeUnit,
    sent: Option<TimeUnit>,
}

impl Times {
    pub(crate) fn of(field: &FieldRef) -> Result<Option<Self>, ArrowError> {
        let sent = sent_unit(field)?;
        Ok(match field.data_type() {
            DataType::Time32(unit) | DataType::Time64(unit) => Some(Self { unit: *unit, sent }),
            _ => None,
        })
    }

    /// Nanoseconds since midnight of a number sent in `sent`.
    fn number_nanos(text: &str, sent: TimeUnit) -> Result<i64, ArrowError> {
        let count = integer(text, &format!("{} since midnight", unit_name(sent)))?;
        count
            .checked_mul(nanos_per(sent))
            .and_then(|n| i64::try_from(n).ok())
            .filter(|n| (0..DAY_NANOS).contains(n))
            .ok_or_else(|| refused(format!("{text} {} is not a time of day", unit_name(sent))))
    }
}

/// Nanoseconds since midnight of a time's text; the reason it is none.
pub(crate) fn time_nanos(text: &str) -> Result<i64, String> {
    if let Some((nanos, used)) = iso_clock(text.as_bytes()) {
        if used == text.len() {
            return Ok(nanos);
        }
    }
    // the other spellings arrow reads (`10:00`, `1:02:03`, `10:00 PM`); a leap second (23:59:60)
    // is past the day's last time, which no time column holds
    match string_to_time_nanoseconds(text) {
        Ok(_) if below_nanos(text) => Err(below(&format!("{text:?}"), TimeUnit::Nanosecond)),
        Ok(nanos) if (0..DAY_NANOS).contains(&nanos) => Ok(nanos),
        _ => Err(format!("{text:?} is not an ISO-8601 time of day; expected one like 10:00:00 or 10:00:00.123456")),
    }
}

impl ArrayDecoder for Times {
    fn decode(&mut self, tape: &Tape<'_>, pos: &[u32]) -> Result<ArrayRef, ArrowError> {
        let per = nanos_per(self.unit) as i64;
        let mut values = Vec::with_capacity(pos.len());
        for &p in pos {
            values.push(match tape.get(p) {
                TapeElement::Null => None,
                TapeElement::String(idx) => {
                    let text = tape.get_string(idx);
                    let nanos = time_nanos(text).map_err(refused)?;
                    if nanos % per != 0 {
                        return Err(refused(below(&format!("{text:?}"), self.unit)));
                    }
                    Some(nanos / per)
                }
                TapeElement::Number(idx) if self.sent.is_some() => {
                    let text = tape.get_string(idx);
                    let sent = self.sent.expect("a unit");
                    let nanos = Self::number_nanos(text, sent)?;
                    if nanos % per != 0 {
                        return Err(refused(below(&format!("{text} {}", unit_name(sent)), self.unit)));
                    }
                    Some(nanos / per)
                }
                TapeElement::Number(idx) => {
                    return Err(refused(format!(
                        "{} is a number, and a time column takes ISO-8601 text only (a count of {} would be a \
                         guess): send the time of day as text, like 10:00:00.123456, or set unit = \"us\" (or \"s\", \
                         \"ms\", \"ns\") on the column",
                        tape.get_string(idx),
                        unit_name(self.unit)
                    )))
                }
                _ => return Err(tape.error(p, "an ISO-8601 time of day")),
            });
        }
        // a time of day in any unit fits an i32 for seconds and milliseconds
        let narrow = |v: Vec<Option<i64>>| v.into_iter().map(|v| v.map(|v| v as i32));
        Ok(match self.unit {
            TimeUnit::Second => Arc::new(narrow(values).collect::<Time32SecondArray>()),
            TimeUnit::Millisecond => Arc::new(narrow(values).collect::<Time32MillisecondArray>()),
            TimeUnit::Microsecond => Arc::new(values.into_iter().collect::<Time64MicrosecondArray>()),
            TimeUnit::Nanosecond => Arc::new(values.into_iter().collect::<Time64NanosecondArray>()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buffer::{JsonBuffer, Options};
    use arrow::datatypes::{Field, Schema};

    /// Per value `{"v": value}` in a column of `data_type`: its stored value as arrow prints it, or
    /// its reason; the same through the single pass and through arrow-json.
    fn decoded(data_type: DataType, values: &[&str]) -> Vec<Result<String, String>> {
        decoded_in(data_type, None, values)
    }

    /// [`decoded`] for a field whose metadata declares `unit`.
    fn decoded_in(data_type: DataType, unit: Option<&str>, values: &[&str]) -> Vec<Result<String, String>> {
        let mut field = Field::new("v", data_type, true);
        if let Some(unit) = unit {
            field = field.with_metadata([(UNIT_KEY.to_string(), unit.to_string())]);
        }
        let schema = Arc::new(Schema::new(vec![field]));
        let run = |single_pass: bool| {
            let buf = JsonBuffer::new(schema.clone(), Options { single_pass, ..Options::default() }).unwrap();
            let values: Vec<String> = values.iter().map(|v| format!(r#"{{"v": {v}}}"#)).collect();
            let errors = crate::buffer::tests::append_from_zero(&buf, &values).errors;
            let batch = buf.drain().unwrap();
            let column = batch.as_ref().map(|b| b.column(0).clone());
            let mut row = 0;
            let mut out = Vec::new();
            for i in 0..values.len() {
                match errors.iter().find(|e| e.index == i) {
                    Some(e) => {
                        assert_eq!(e.field, "v");
                        out.push(Err(e.reason.clone()));
                    }
                    None => {
                        let column = column.as_ref().expect("a row");
                        let shown = arrow::util::display::array_value_to_string(column, row).unwrap();
                        out.push(Ok(shown));
                        row += 1;
                    }
                }
            }
            out
        };
        let fast = run(true);
        assert_eq!(fast, run(false), "the single pass and arrow-json differ");
        fast
    }

    fn reason(got: &Result<String, String>) -> &str {
        got.as_ref().err().map_or("(stored)", String::as_str)
    }

    #[test]
    fn text_that_is_no_timestamp_says_so_before_anything_about_its_offset() {
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let local = DataType::Timestamp(TimeUnit::Microsecond, None);
        let not_timestamps = [
            r#""not a date""#,
            r#""10:00:00""#,
            r#""12345""#,
            r#""""#,
            r#""2026-13-01T00:00:00Z""#,
            r#""2026-11-27T25:00:00Z""#,
            r#""garbage-with-dash""#,
            r#"" 2026-11-27T10:00:00Z""#,
        ];
        for (data_type, like) in [(zoned.clone(), "2026-11-27T10:00:00Z"), (local.clone(), "2026-11-27T10:00:00")] {
            for (value, got) in not_timestamps.iter().zip(decoded(data_type, &not_timestamps)) {
                let text: String = serde_json::from_str(value).unwrap();
                assert_eq!(reason(&got), format!("{text:?} is not an ISO-8601 timestamp; expected one like {like}"));
            }
        }
        let got = decoded(zoned, &[r#""2026-11-27T10:00:00""#, r#""2026-11-27 10:00:00.5""#, r#""2026-11-27""#]);
        for got in &got {
            assert!(reason(got).contains("has no UTC offset; the column is a timestamp with zone"), "{got:?}");
        }
        let got = decoded(local, &[r#""2026-11-27T10:00:00Z""#, r#""2026-11-27T10:00:00+02:00""#]);
        for got in &got {
            assert!(reason(got).contains("has a UTC offset; the column is a timestamp without zone"), "{got:?}");
        }
    }

    #[test]
    fn a_number_for_a_timestamp_needs_its_unit_and_past_nanoseconds_nothing_is_cut() {
        let zoned = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        let got = decoded(zoned, &["1764237600000", r#""2026-11-27T10:00:00.1234567891Z""#]);
        assert!(reason(&got[0]).starts_with("1764237600000 is a number, and the column declares no unit for numbers"));
        assert_eq!(
            reason(&got[1]),
            r#""2026-11-27T10:00:00.1234567891Z" has digits below nanosecond, which the column does not keep"#
        );
    }

    #[test]
    fn dates_are_dates_and_a_timestamp_only_at_midnight_utc() {
        for data_type in [DataType::Date32, DataType::Date64] {
            let got = decoded(
                data_type,
                &[
                    r#""2026-11-27""#,
                    r#""2026-9-8""#,
                    r#""2026-11-27T00:00:00Z""#,
                    r#""2026-11-27 00:00:00""#,
                    r#""not a date""#,
                    r#""2026-02-30""#,
                    r#""10:00:00""#,
                    r#""12345""#,
                    r#""2026-11-27T10:00:00Z""#,
                    r#""2026-11-27T00:00:00+05:00""#,
                    r#""1500-01-01T10:00:00""#,
                    "20000",
                    "1.5",
                    "true",
                ],
            );
            let stored: Vec<&str> = got[..4].iter().map(|g| g.as_deref().unwrap()).collect();
            let days = ["2026-11-27", "2026-09-08", "2026-11-27", "2026-11-27"]; // date64 prints its midnight too
            assert!(stored.iter().zip(days).all(|(s, day)| s.starts_with(day)), "{stored:?}");
            for (got, text) in got[4..8].iter().zip(["not a date", "2026-02-30", "10:00:00", "12345"]) {
                assert_eq!(reason(got), format!("{text:?} is not an ISO-8601 date; expected one like 2026-11-27"));
            }
            for got in &got[8..11] {
                assert!(reason(got).contains("has a time of day, which a date column does not keep"), "{got:?}");
            }
            for (got, n) in got[11..13].iter().zip(["20000", "1.5"]) {
                assert_eq!(
                    reason(got),
                    format!(
                        "{n} is a number, and a date column takes ISO-8601 text only (a count of days would be a \
                         guess): send the date as text, like 2026-11-27, or set unit = \"d\" on the column"
                    )
                );
            }
            assert_eq!(reason(&got[13]), "expected an ISO-8601 date got true");
        }
    }

    #[test]
    fn dates_and_times_take_numbers_only_as_counts_of_a_declared_unit() {
        // days since 1970-01-01, as Kafka Connect's and Debezium's dates are sent
        let got = decoded_in(DataType::Date32, Some("d"), &["20511", "-719162", "0", "1.5", "3e9", r#""2026-02-28""#]);
        assert_eq!(got[..3], [Ok("2026-02-27".into()), Ok("0001-01-01".into()), Ok("1970-01-01".into())]);
        assert!(reason(&got[3]).contains("days since 1970-01-01"), "{got:?}");
        assert_eq!(reason(&got[4]), "3e9 days is out of range");
        assert_eq!(got[5], Ok("2026-02-28".into()));
        // since midnight, in the declared unit, exactly in the column's
        let micros = DataType::Time64(TimeUnit::Microsecond);
        let got = decoded_in(micros.clone(), Some("ms"), &["45296789", "0", "86400000", "-1", "1.5"]);
        assert_eq!(got[..2], [Ok("12:34:56.789".into()), Ok("00:00:00".into())]);
        assert_eq!(reason(&got[2]), "86400000 milliseconds is not a time of day");
        assert_eq!(reason(&got[3]), "-1 milliseconds is not a time of day");
        assert!(reason(&got[4]).contains("milliseconds since midnight"), "{got:?}");
        let got = decoded_in(micros, Some("ns"), &["45296789012000", "45296789012345"]);
        assert_eq!(got[0], Ok("12:34:56.789012".into()));
        assert_eq!(
            reason(&got[1]),
            "45296789012345 nanoseconds has digits below microsecond, which the column does not keep"
        );
        let got = decoded_in(DataType::Time64(TimeUnit::Microsecond), Some("us"), &["45296789012"]);
        assert_eq!(got[0], Ok("12:34:56.789012".into()));
    }

    #[test]
    fn times_are_times_of_day_exactly_in_the_columns_unit() {
        let values = [
            r#""10:00:00""#,
            r#""10:00:00.123456""#,
            r#""10:00""#,
            r#""10:00 PM""#,
            r#""not a time""#,
            r#""12345""#,
            r#""23:59:60""#,
            r#""24:00:00""#,
            r#""2026-11-27T10:00:00""#,
            r#""10:00:00.1234567""#,
            "20000",
        ];
        let got = decoded(DataType::Time64(TimeUnit::Microsecond), &values);
        let stored: Vec<&str> = got[..4].iter().map(|g| g.as_deref().unwrap()).collect();
        assert_eq!(stored, ["10:00:00", "10:00:00.123456", "10:00:00", "22:00:00"]);
        for (got, text) in got[4..9].iter().zip(["not a time", "12345", "23:59:60", "24:00:00", "2026-11-27T10:00:00"])
        {
            assert_eq!(
                reason(got),
                format!("{text:?} is not an ISO-8601 time of day; expected one like 10:00:00 or 10:00:00.123456")
            );
        }
        assert_eq!(
            reason(&got[9]),
            r#""10:00:00.1234567" has digits below microsecond, which the column does not keep"#
        );
        assert_eq!(
            reason(&got[10]),
            "20000 is a number, and a time column takes ISO-8601 text only (a count of microseconds would be a \
             guess): send the time of day as text, like 10:00:00.123456, or set unit = \"us\" (or \"s\", \"ms\", \
             \"ns\") on the column"
        );
        let got =
            decoded(DataType::Time64(TimeUnit::Nanosecond), &[r#""10:00:00.1234567891""#, r#""10:00:00.123456789""#]);
        assert!(reason(&got[0]).contains("has digits below nanosecond"), "{got:?}");
        assert_eq!(got[1].as_deref(), Ok("10:00:00.123456789"));
        let got = decoded(DataType::Time32(TimeUnit::Millisecond), &[r#""10:00:00.5""#, r#""10:00:00.5001""#]);
        assert_eq!(got[0].as_deref(), Ok("10:00:00.500"));
        assert!(reason(&got[1]).contains("has digits below millisecond"), "{got:?}");
    }

    #[test]
    fn the_quick_timestamp_parser_agrees_with_arrows() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let mut checked = 0;
        for _ in 0..200_000 {
            let fraction = match next(4) {
                0 => String::new(),
                1 => format!(".{:03}", next(1000)),
                2 => format!(".{:06}", next(1_000_000)),
                _ => format!(".{}", next(10_000_000_000)),
            };
            let offset = match next(5) {
                0 => String::new(),
                1 => "Z".to_string(),
                2 => format!("+{:02}:{:02}", next(26), next(62)),
                3 => format!("-{:02}:{:02}", next(24), next(60)),
                _ => format!("+{:02}{:02}", next(24), next(60)),
            };
            let text = format!(
                "{:04}-{:02}-{:02}{}{:02}:{:02}:{:02}{fraction}{offset}",
                if next(4) == 0 { next(10_000) } else { 1670 + next(600) },
                next(14),
                next(33),
                ["T", " ", "t"][next(3) as usize],
                next(25),
                next(61),
                next(61)
            );
            let arrow = arrow_instant(&text);
            if let Some(quick) = iso_instant(text.as_bytes()) {
                assert_eq!(Some(quick), arrow, "{text}");
                checked += 1;
            }
        }
        assert!(checked > 50_000, "only {checked} taken by the quick parser");
        for text in [
            "2024-02-29T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "1969-12-31T23:59:59.999999999Z",
            "0001-01-01T00:00:00Z",
            "2026-11-01T10:00:00.1234567891Z",
            "2026-11-01T24:00:00Z",
            "2026-11-01T10:00:60Z",
            "2026-11-01T10:00:00+24:00",
        ] {
            let quick = iso_instant(text.as_bytes());
            assert!(quick.is_none() || quick == arrow_instant(text), "{text}");
        }
    }

    #[test]
    fn timestamps_from_year_1_to_9999_are_stored_exactly_and_past_a_units_range_refused() {
        // what PostgreSQL's timestamptz holds and Debezium's JSON converter sends, in both spellings
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let got = decoded(
            zoned.clone(),
            &[
                r#""0001-01-01T00:00:00Z""#,
                r#""9999-12-31T23:59:59.999999Z""#,
                r#""0001-01-01 00:00:00.000001+0100""#,
                r#""9999-12-31T23:59:59.999999-0100""#,
                r#""1500-06-15T12:00:00.5+02:00""#,
            ],
        );
        let want = [
            "0001-01-01T00:00:00Z",
            "9999-12-31T23:59:59.999999Z",
            "0000-12-31T23:00:00.000001Z",
            "+10000-01-01T00:59:59.999999Z",
            "1500-06-15T10:00:00.500Z",
        ];
        for (got, want) in got.iter().zip(want) {
            assert_eq!(got.as_deref(), Ok(want));
        }
        let got = decoded(DataType::Timestamp(TimeUnit::Microsecond, None), &[r#""0001-01-01T00:00:00""#]);
        assert_eq!(got[0].as_deref(), Ok("0001-01-01T00:00:00"));
        // a nanosecond column holds 1677-2262 only: outside it the value is refused, never wrapped
        let nanos = DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()));
        let got = decoded(nanos, &[r#""0001-01-01T00:00:00Z""#, r#""2262-04-11T23:47:16.854775807Z""#]);
        assert_eq!(reason(&got[0]), r#""0001-01-01T00:00:00Z" is out of range"#);
        assert_eq!(got[1].as_deref(), Ok("2262-04-11T23:47:16.854775807Z"));
        let got = decoded(DataType::Date32, &[r#""0001-01-01T00:00:00Z""#, r#""9999-12-31""#]);
        assert_eq!(got[0].as_deref(), Ok("0001-01-01"));
        assert_eq!(got[1].as_deref(), Ok("9999-12-31"));
    }

    #[test]
    fn offsets_are_found_after_the_time() {
        for (text, want) in [
            ("2024-01-01T10:00:00Z", true),
            ("2024-01-01T10:00:00+02:00", true),
            ("2024-01-01 10:00:00.123-0530", true),
            ("2024-01-01T10:00:00", false),
            ("2024-01-01", false),
        ] {
            assert_eq!(has_offset(text), want, "{text}");
        }
    }
}
