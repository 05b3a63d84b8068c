//! What the JSON converter's schema envelope says of the values of a change's row, beyond what the
//! column can know: the unit a temporal number counts (Debezium's `MicroTimestamp` is
//! microseconds, `Timestamp` milliseconds) and whether a decimal came as its digits or as
//! base64 bytes (the converter's `decimal.format`). Read once per distinct schema text; a value
//! in another form than its column reads is brought to that form exactly, in a copy of the row,
//! or the record is bad. Pure Rust, no pyo3.

use std::borrow::Cow;

use base64::Engine;

use crate::changes::{entries, Spec};

const DECIMAL: &str = "org.apache.kafka.connect.data.Decimal";

/// How one column's value must be brought to the form its column reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fix {
    /// A count of `sent` multiplied by the factor to the column's (coarser) unit.
    Times { sent: &'static str, by: i64 },
    /// A count of `sent` divided by the factor to the column's (finer) unit: exact, or bad.
    Over { sent: &'static str, by: i64 },
    /// A decimal sent as base64 text of its unscaled value's big-endian two's complement bytes
    /// (`decimal.format=BASE64`, the converter's default): written as its digits at `scale`. A
    /// decimal sent as a number (`NUMERIC`) is left as it is.
    Decimal { scale: u32 },
    /// Decimals this column's value holds that no decimal column reads as bytes: the column
    /// itself (an empty path: its column is not a decimal), or ones nested in it (each path's
    /// steps: a struct's field by name, `None` through a list's elements or a map's values).
    /// Sent as numbers (`NUMERIC`) they land as the column reads them; sent as base64 text, the
    /// record is bad, never its bytes' text read as digits.
    NotBase64 { inner: Vec<Vec<Option<String>>> },
}

/// Per row, `after` (an upsert's) then `before` (a delete's): the columns whose values need a fix.
#[derive(Debug, Default)]
pub(crate) struct Fixes {
    pub rows: [Vec<(String, Fix)>; 2],
}

impl Fixes {
    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(Vec::is_empty)
    }
}

/// What one envelope schema says: the fixes, or the column and why its values cannot be read.
pub(crate) type Reading = Result<Fixes, (String, String)>;

/// The unit of the numbers of Kafka Connect's and Debezium's temporal types, by semantic name.
fn semantic_unit(name: &str) -> Option<&'static str> {
    Some(match name {
        "org.apache.kafka.connect.data.Date" | "io.debezium.time.Date" => "d",
        "org.apache.kafka.connect.data.Time"
        | "org.apache.kafka.connect.data.Timestamp"
        | "io.debezium.time.Time"
        | "io.debezium.time.Timestamp" => "ms",
        "io.debezium.time.MicroTime" | "io.debezium.time.MicroTimestamp" => "us",
        "io.debezium.time.NanoTime" | "io.debezium.time.NanoTimestamp" => "ns",
        _ => return None,
    })
}

fn unit_words(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        other => other,
    }
}

/// How many nanoseconds one count of `unit` is; None for days (a date is not a count of time).
fn nanos(unit: &str) -> Option<i64> {
    match unit {
        "s" => Some(1_000_000_000),
        "ms" => Some(1_000_000),
        "us" => Some(1_000),
        "ns" => Some(1),
        _ => None,
    }
}

/// What envelope schema `schema` says of the rows at `paths` (`after`, `before`; `[]`: the payload
/// is the row) against `spec`'s columns: a temporal sent in another unit of time than its
/// column's `units` (a source column's precision, or the connector's `time.precision.mode`,
/// changed: `MicroTimestamp` to `Timestamp`), a column of `decimals` that may come as base64
/// bytes; or the column and why its values cannot be read at all (days where a time is read, or
/// the reverse; a decimal without a scale). Of a delete's row (`before`) only the `keys` are read,
/// so only they are looked at. A schema that is not one (no struct of fields) asks for nothing.
pub(crate) fn fixes_of(schema: &str, paths: [&[String]; 2], spec: &Spec) -> Reading {
    let Ok(schema) = serde_json::from_str::<serde_json::Value>(schema) else { return Ok(Fixes::default()) };
    let struct_at = |path: &[String]| {
        path.iter().try_fold(&schema, |row, step| {
            row.get("fields")?.as_array()?.iter().find(|f| f.get("field").and_then(|n| n.as_str()) == Some(step))
        })
    };
    let same = |a: &str, b: &str| if spec.case_insensitive { a.to_lowercase() == b.to_lowercase() } else { a == b };
    let mut out = Fixes::default();
    for (n, (path, fixes)) in paths.into_iter().zip(out.rows.iter_mut()).enumerate() {
        let Some(row) = struct_at(path) else { continue };
        let at = |column: &str| path.iter().map(String::as_str).chain([column]).collect::<Vec<_>>().join(".");
        for field in row.get("fields").and_then(|f| f.as_array()).into_iter().flatten() {
            let Some(column) = field.get("field").and_then(|n| n.as_str()) else { continue };
            if n == 1 && !spec.keys.is_empty() && !spec.keys.iter().any(|k| same(k, column)) {
                continue; // a delete's other columns are not read
            }
            let mut inner = Vec::new();
            nested_decimals(field, &mut Vec::new(), &mut inner);
            if !inner.is_empty() {
                fixes.push((column.to_owned(), Fix::NotBase64 { inner }));
                continue;
            }
            let Some(name) = field.get("name").and_then(|n| n.as_str()) else { continue };
            if name == DECIMAL {
                if !spec.decimals.iter().any(|d| same(d, column)) {
                    // not a decimal column: a number lands as the column reads it, base64 text never
                    fixes.push((column.to_owned(), Fix::NotBase64 { inner: vec![Vec::new()] }));
                    continue;
                }
                let scale = field.pointer("/parameters/scale").and_then(|s| s.as_str()?.parse::<u32>().ok());
                match scale {
                    Some(scale) if scale <= 38 => fixes.push((column.to_owned(), Fix::Decimal { scale })),
                    _ => {
                        return Err((
                            at(column),
                            format!(
                                "the schema names {column} a decimal ({DECIMAL}) without a scale of 0 to 38 in its \
                                 parameters ({}); its bytes cannot be read as a number",
                                field.get("parameters").map_or("none".to_owned(), |p| p.to_string())
                            ),
                        ))
                    }
                }
                continue;
            }
            let Some((_, unit)) = spec.units.iter().find(|(c, _)| same(c, column)) else { continue };
            let Some(sent) = semantic_unit(name) else { continue };
            if sent == unit {
                continue;
            }
            match (nanos(sent), nanos(unit)) {
                (Some(from), Some(to)) if from > to => {
                    fixes.push((column.to_owned(), Fix::Times { sent, by: from / to }))
                }
                (Some(from), Some(to)) => fixes.push((column.to_owned(), Fix::Over { sent, by: to / from })),
                _ => {
                    return Err((
                        at(column),
                        format!(
                            "the source now sends {column} as {name}, a count of {}, but the column reads a \
                             count of {} (unit {unit:?}): the source column's type changed, which this \
                             column cannot follow; point the source at a new table, or declare the column \
                             anew",
                            unit_words(sent),
                            unit_words(unit)
                        ),
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// The paths of the Connect Decimals nested in `field`'s type (a struct's fields, a list's
/// elements, a map's values), under `path`, into `out`.
fn nested_decimals(field: &serde_json::Value, path: &mut Vec<Option<String>>, out: &mut Vec<Vec<Option<String>>>) {
    let kind = field.get("type").and_then(|t| t.as_str());
    let mut into = |step: Option<String>, child: &serde_json::Value, out: &mut Vec<Vec<Option<String>>>| {
        path.push(step);
        if child.get("name").and_then(|n| n.as_str()) == Some(DECIMAL) {
            out.push(path.clone());
        } else {
            nested_decimals(child, path, out);
        }
        path.pop();
    };
    match kind {
        Some("struct") => {
            for child in field.get("fields").and_then(|f| f.as_array()).into_iter().flatten() {
                let name = child.get("field").and_then(|n| n.as_str()).unwrap_or_default().to_owned();
                into(Some(name), child, out);
            }
        }
        Some("array") => {
            if let Some(items) = field.get("items") {
                into(None, items, out);
            }
        }
        Some("map") => {
            if let Some(values) = field.get("values") {
                into(None, values, out);
            }
        }
        _ => {}
    }
}

/// The first string at `path` in `value` (through every element of a list and every value of a
/// map), as a dotted path; None when there is none.
fn string_at(value: &serde_json::Value, path: &[Option<String>], at: String) -> Option<String> {
    let Some((step, rest)) = path.split_first() else {
        return value.is_string().then_some(at);
    };
    match (step, value) {
        (Some(name), serde_json::Value::Object(fields)) => {
            fields.get(name).and_then(|v| string_at(v, rest, format!("{at}.{name}")))
        }
        (None, serde_json::Value::Array(items)) => {
            items.iter().enumerate().find_map(|(i, v)| string_at(v, rest, format!("{at}[{i}]")))
        }
        (None, serde_json::Value::Object(entries)) => {
            entries.iter().find_map(|(k, v)| string_at(v, rest, format!("{at}[{k:?}]")))
        }
        _ => None,
    }
}

/// `row` (a JSON object) with the values of the columns in `fixes` brought to the form their
/// column reads; the row as it is (a slice, nothing copied) when none needs it. A value that
/// cannot be brought exactly (digits below the column's unit, out of range, not base64) is the
/// record's fault: its dotted path under `path`, and why.
pub(crate) fn fixed<'a>(row: &'a str, fixes: &[(String, Fix)], path: &str) -> Result<Cow<'a, [u8]>, (String, String)> {
    if fixes.is_empty() {
        return Ok(Cow::Borrowed(row.as_bytes()));
    }
    let at = |column: &str| if path.is_empty() { column.to_owned() } else { format!("{path}.{column}") };
    let fields = entries(row).map_err(|reason| (path.to_owned(), reason))?;
    let mut values: Vec<Cow<str>> = Vec::with_capacity(fields.len());
    let mut changed = false;
    for (key, raw) in &fields {
        let text = raw.get().trim();
        let value = match fixes.iter().find(|(c, _)| c == key) {
            Some((_, fix)) if text != "null" => fix_value(text, fix).map_err(|reason| (at(key), reason))?,
            _ => None,
        };
        changed |= value.is_some();
        values.push(value.map_or(Cow::Borrowed(raw.get()), Cow::Owned));
    }
    if !changed {
        return Ok(Cow::Borrowed(row.as_bytes()));
    }
    let mut out = String::with_capacity(row.len() + 16);
    out.push('{');
    for (n, ((key, _), value)) in fields.iter().zip(&values).enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(key).expect("a string serializes"));
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    Ok(Cow::Owned(out.into_bytes()))
}

/// The value `text` (not null) in the form `fix` brings it to; None when it is in it already.
fn fix_value(text: &str, fix: &Fix) -> Result<Option<String>, String> {
    match *fix {
        Fix::Decimal { scale } => {
            if !text.starts_with('"') {
                return Ok(None); // sent as a number: the column reads its digits
            }
            let encoded: String = serde_json::from_str(text).map_err(|e| format!("not a JSON string: {e}"))?;
            let bytes = base64::engine::general_purpose::STANDARD.decode(&encoded).map_err(|_| {
                format!(
                    "the schema says this is a decimal, but {text} is neither a number nor base64 bytes (the JSON \
                     converter's decimal.format=BASE64)"
                )
            })?;
            Ok(Some(decimal_text(&bytes, scale)?))
        }
        Fix::NotBase64 { ref inner } => {
            let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
            match inner.iter().find_map(|path| string_at(&value, path, String::new())) {
                None => Ok(None),
                Some(at) if at.is_empty() => Err(format!(
                    "the schema says this is a decimal ({DECIMAL}), sent as text (base64 bytes: the JSON \
                     converter's decimal.format=BASE64), and the table has no decimal column of this name to read \
                     it as one: declare the column decimal(P, S), or set the converter's decimal.format=NUMERIC"
                )),
                Some(at) => Err(format!(
                    "the schema says {} is a decimal ({DECIMAL}), sent as text: base64 bytes (the JSON converter's \
                     decimal.format=BASE64) are read only for a top-level decimal column; set the converter's \
                     decimal.format=NUMERIC",
                    at.trim_start_matches('.')
                )),
            }
        }
        Fix::Times { sent, by } | Fix::Over { sent, by } => {
            let Ok(count) = text.parse::<i64>() else {
                return Err(format!("the schema says this is a count of {}, but it is {text}", unit_words(sent)));
            };
            let scaled = match *fix {
                Fix::Times { .. } => count
                    .checked_mul(by)
                    .ok_or_else(|| format!("{count} {} is out of the column's range", unit_words(sent)))?,
                _ if count % by == 0 => count / by,
                _ => {
                    return Err(format!(
                        "{count} {} has digits below the column's unit; the column cannot hold it exactly (a finer \
                         column: declare the column anew, or keep the source's precision)",
                        unit_words(sent)
                    ))
                }
            };
            Ok(Some(scaled.to_string()))
        }
    }
}

/// A decimal's digits at `scale` from its unscaled value's big-endian two's complement bytes
/// (Java's `BigInteger.toByteArray`, as Kafka Connect sends it): `[0x04, 0xd2]` at scale 2 is
/// `12.34`. Up to 16 bytes (an Iceberg decimal's 38 digits fit in them).
fn decimal_text(bytes: &[u8], scale: u32) -> Result<String, String> {
    if bytes.is_empty() || bytes.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes; an Iceberg decimal's unscaled value takes 1 to 16 (38 digits)",
            bytes.len()
        ));
    }
    let fill = if bytes[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut wide = [fill; 16];
    wide[16 - bytes.len()..].copy_from_slice(bytes);
    let unscaled = i128::from_be_bytes(wide);
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let digits =
        if digits.len() <= scale { format!("{}{digits}", "0".repeat(scale + 1 - digits.len())) } else { digits };
    let (whole, fraction) = digits.split_at(digits.len() - scale);
    let sign = if unscaled < 0 { "-" } else { "" };
    Ok(if scale == 0 { format!("{sign}{whole}") } else { format!("{sign}{whole}.{fraction}") })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decimals_bytes_become_its_digits_at_its_scale() {
        assert_eq!(decimal_text(&[0x04, 0xd2], 2).unwrap(), "12.34");
        assert_eq!(decimal_text(&[0xfb, 0x2e], 2).unwrap(), "-12.34");
        assert_eq!(decimal_text(&[0x05], 3).unwrap(), "0.005");
        assert_eq!(decimal_text(&[0xff], 1).unwrap(), "-0.1");
        assert_eq!(decimal_text(&[0x00], 2).unwrap(), "0.00");
        assert_eq!(decimal_text(&[0x7f], 0).unwrap(), "127");
        let max38 = 10i128.pow(38) - 1;
        assert_eq!(decimal_text(&max38.to_be_bytes(), 0).unwrap(), "9".repeat(38));
        assert_eq!(decimal_text(&(-max38).to_be_bytes(), 38).unwrap(), format!("-0.{}", "9".repeat(38)));
        assert!(decimal_text(&[], 2).is_err());
        assert!(decimal_text(&[1; 17], 2).unwrap_err().contains("17 bytes"));
    }
}
