//! Dates, times and timestamps from JSON: ISO-8601 text, exactly; a number only for a timestamp
//! with the unit the column declares (field metadata [`UNIT_KEY`]: `s`, `ms`, `us`, `ns`), never
//! read as the column's own unit by guess; digits below the column's unit are an error, not a
//! truncation.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, TimestampMicrosecondArray, TimestampMillisecondArray, TimestampNanosecondArray, TimestampSecondArray,
};
use arrow::compute::kernels::cast_utils::string_to_timestamp_nanos;
use arrow::datatypes::{DataType, FieldRef, TimeUnit};
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

fn unit_name(unit: TimeUnit) -> &'static str {
    match unit {
        TimeUnit::Second => "seconds",
        TimeUnit::Millisecond => "milliseconds",
        TimeUnit::Microsecond => "microseconds",
        TimeUnit::Nanosecond => "nanoseconds",
    }
}

/// Nanoseconds since the epoch of the common ISO-8601 spelling, `YYYY-MM-DD` `T` or space
/// `HH:MM:SS`, up to 9 digits of fraction, then nothing, `Z` or `±HH:MM`; None for anything else
/// (arrow's parser reads it then, slower: this one is 8x faster on the shape producers send, and
/// gives the same value, `tests::the_quick_timestamp_parser_agrees_with_arrows`).
pub(crate) fn iso_nanos(b: &[u8]) -> Option<i128> {
    fn num(b: &[u8]) -> Option<i64> {
        b.iter().try_fold(0i64, |n, &d| d.is_ascii_digit().then(|| n * 10 + i64::from(d - b'0')))
    }
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b' ') || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (num(&b[0..4])?, num(&b[5..7])?, num(&b[8..10])?);
    let (hour, minute, second) = (num(&b[11..13])?, num(&b[14..16])?, num(&b[17..19])?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month)
        || day < 1
        || day > month_days[month as usize - 1]
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let mut at = 19;
    let mut fraction = 0i64;
    if b.get(at) == Some(&b'.') {
        let digits = b[at + 1..].iter().take_while(|d| d.is_ascii_digit()).count();
        if digits == 0 || digits > 9 {
            return None;
        }
        fraction = num(&b[at + 1..at + 1 + digits])? * 10i64.pow(9 - digits as u32);
        at += 1 + digits;
    }
    let offset = match &b[at..] {
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
    // days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil)
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset;
    let nanos = i128::from(seconds) * 1_000_000_000 + i128::from(fraction);
    // arrow's parser refuses what does not fit nanoseconds in an i64 (before 1677, after 2262)
    i64::try_from(nanos).is_ok().then_some(nanos)
}

/// Whether ISO-8601 text names its UTC offset (`Z`, `+02:00`, `-0530`) after the time.
fn has_offset(text: &str) -> bool {
    let time = text.get(10..).unwrap_or("");
    time.ends_with(['Z', 'z']) || time.get(1..).is_some_and(|t| t.contains(['+', '-']))
}

impl Timestamps {
    /// The decoder of a timestamp field (None for another type); its unit for numbers from the
    /// field's metadata ([`UNIT_KEY`]).
    pub(crate) fn of(field: &FieldRef) -> Result<Option<Self>, ArrowError> {
        let DataType::Timestamp(unit, tz) = field.data_type() else { return Ok(None) };
        let sent = match field.metadata().get(UNIT_KEY).map(String::as_str) {
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
        };
        Ok(Some(Self { unit: *unit, tz: tz.clone(), sent }))
    }

    /// ISO-8601 text in the column's unit.
    pub(crate) fn parse_text(&self, text: &str) -> Result<i64, ArrowError> {
        let nanos = self.text_nanos(text)?;
        self.in_unit(nanos, || format!("{text:?}"))
    }

    fn text_nanos(&self, text: &str) -> Result<i128, ArrowError> {
        match (self.tz.is_some(), has_offset(text)) {
            (true, false) => {
                return Err(ArrowError::JsonError(format!(
                    "{text:?} has no UTC offset; the column is a timestamp with zone: send one (Z or +02:00), or \
                     use a timestamp column for local times"
                )))
            }
            (false, true) => {
                return Err(ArrowError::JsonError(format!(
                    "{text:?} has a UTC offset; the column is a timestamp without zone: use a timestamptz column, \
                     or send the local time without an offset"
                )))
            }
            _ => {}
        }
        if let Some(nanos) = iso_nanos(text.as_bytes()) {
            return Ok(nanos);
        }
        let nanos = string_to_timestamp_nanos(text)
            .map_err(|e| ArrowError::JsonError(format!("{text:?} is not an ISO-8601 timestamp ({e})")))?;
        Ok(nanos as i128)
    }

    /// `nanos` in the column's unit; `what` describes the value in an error (made only then).
    fn in_unit(&self, nanos: i128, what: impl Fn() -> String) -> Result<i64, ArrowError> {
        let per = nanos_per(self.unit);
        if nanos % per != 0 {
            return Err(ArrowError::JsonError(format!(
                "{} has digits below {}, which the column does not keep",
                what(),
                unit_name(self.unit).trim_end_matches('s')
            )));
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

#[cfg(test)]
mod tests {
    use super::*;

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
                if next(8) == 0 { next(10_000) } else { 1670 + next(600) },
                next(14),
                next(33),
                ["T", " ", "t"][next(3) as usize],
                next(25),
                next(61),
                next(61)
            );
            let arrow = string_to_timestamp_nanos(&text).ok().map(i128::from);
            if let Some(quick) = iso_nanos(text.as_bytes()) {
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
            let quick = iso_nanos(text.as_bytes());
            assert!(quick.is_none() || quick == string_to_timestamp_nanos(text).ok().map(i128::from), "{text}");
        }
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
