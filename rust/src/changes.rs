//! Change records (CDC and upsert tables): per JSON record value, which operation it is and where
//! its row is, as a slice of the value (nothing is built or copied). A Debezium envelope is
//! `{"before": {..}, "after": {..}, "op": "c", ..}`, possibly inside the JSON converter's
//! `{"schema": {..}, "payload": {..}}`; a flat change record is the row itself with an operation
//! field. Pure Rust, no pyo3.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::buffer::twice;
use crate::envelope::{self, Fixes, Reading};

/// How change records are read.
#[derive(Debug, Clone, Default)]
pub struct Spec {
    /// The operation field's path; empty: every record is an upsert of the whole value.
    pub op: Vec<String>,
    /// Where the row of an upsert is; empty: the whole value.
    pub after: Vec<String>,
    /// Where the row (or at least the key) of a delete is; empty: the whole value.
    pub before: Vec<String>,
    /// Operation values that insert or replace the row of their key.
    pub upsert_ops: Vec<String>,
    /// Operation values that delete their key.
    pub delete_ops: Vec<String>,
    /// Read through the JSON converter's `{"schema", "payload"}` envelope when a value is one.
    pub unwrap_envelope: bool,
    /// Per row column that reads numbers as counts of a unit (a date in days, a timestamp in
    /// microseconds): (column, unit). An envelope whose schema names another unit for the column
    /// makes its record bad: read in the column's unit, its numbers would be off by a factor.
    pub units: Vec<(String, String)>,
    /// The row's decimal columns: one the envelope's schema names a Connect `Decimal` and that
    /// came as base64 bytes is written as its digits.
    pub decimals: Vec<String>,
    /// The identifier columns: of a delete's row only these are read, so only these are fixed.
    pub keys: Vec<String>,
    /// Columns are matched to the schema's fields ignoring case (the table's `case_insensitive`).
    pub case_insensitive: bool,
}

/// What one record asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Change<'a> {
    /// The row: a slice of the value, or a copy where a value was brought to its column's form
    /// (a number in another unit of time, a decimal sent as base64 bytes: `envelope.rs`).
    Upsert(Cow<'a, [u8]>),
    Delete(Cow<'a, [u8]>),
    /// Not a change this table can take: the field at fault (dotted path, "" for the value) and why.
    Bad {
        field: String,
        reason: String,
    },
}

/// Every value of a batch, as [`split`]; an envelope's schema is read once per distinct text.
pub fn split_all<'a, V: AsRef<[u8]>>(values: &'a [V], spec: &Spec) -> Vec<Change<'a>> {
    let mut seen = Vec::new();
    values.iter().map(|v| split_seen(v.as_ref(), spec, &mut seen)).collect()
}

pub fn split<'a>(value: &'a [u8], spec: &Spec) -> Change<'a> {
    split_seen(value, spec, &mut Vec::new())
}

/// [`split`], remembering in `seen` what each envelope schema (by its exact text) says of the
/// row's values: the JSON converter repeats one schema in every record of a table.
fn split_seen<'a>(value: &'a [u8], spec: &Spec, seen: &mut Vec<(&'a str, Reading)>) -> Change<'a> {
    let Ok(text) = std::str::from_utf8(value) else {
        return bad("", "the value is not UTF-8 text, so not JSON");
    };
    let entries = match entries(text) {
        Ok(e) => e,
        Err(reason) => return bad("", &reason),
    };
    let mut fixes: Option<&Fixes> = None;
    let (text, entries) = match unwrapped(&entries, spec) {
        // nothing to fix without a column that takes a unit or a decimal: the schema is not read
        Some(payload) if spec.units.is_empty() && spec.decimals.is_empty() => match self::entries(payload) {
            Ok(e) => (payload, e),
            Err(reason) => return bad("payload", &reason),
        },
        Some(payload) => {
            let schema = entries.iter().find(|(k, _)| k == "schema").map_or("", |(_, v)| v.get());
            let at = match seen.iter().position(|(s, _)| *s == schema) {
                Some(at) => at,
                None => {
                    let paths = [&spec.after[..], &spec.before[..]];
                    seen.push((schema, envelope::fixes_of(schema, paths, spec)));
                    seen.len() - 1
                }
            };
            match &seen[at].1 {
                Err((field, reason)) => return bad(field, reason),
                Ok(f) => fixes = Some(f).filter(|f| !f.is_empty()),
            }
            match self::entries(payload) {
                Ok(e) => (payload, e),
                Err(reason) => return bad("payload", &reason),
            }
        }
        None => (text, entries),
    };
    if spec.op.is_empty() {
        return match envelope::fixed(text, fixes.map_or(&[][..], |f| &f.rows[0]), "") {
            Ok(row) => Change::Upsert(row),
            Err((field, reason)) => bad(&field, &reason),
        };
    }
    let op_field = spec.op.join(".");
    let op = match find(&entries, &spec.op) {
        Err((field, reason)) => return bad(&field, &reason),
        Ok(raw) => match scalar(raw) {
            Ok(Some(op)) => op,
            Ok(None) => {
                return bad(
                    &op_field,
                    &format!(
                        "the change record has no operation field {op_field:?} (or it is null); {}",
                        expected(spec)
                    ),
                )
            }
            Err(reason) => return bad(&op_field, &reason),
        },
    };
    let (path, upsert) = if spec.upsert_ops.contains(&op) {
        (&spec.after, true)
    } else if spec.delete_ops.contains(&op) {
        (&spec.before, false)
    } else {
        return bad(&op_field, &format!("operation {op:?} is not one this table takes; {}", expected(spec)));
    };
    let row = if path.is_empty() {
        Ok(Some(text))
    } else {
        find(&entries, path).map(|raw| raw.map(RawValue::get).filter(|t| t.trim() != "null"))
    };
    let field = path.join(".");
    match row {
        Ok(Some(row)) if row.trim_start().starts_with('{') => {
            let mine = fixes.map_or(&[][..], |f| &f.rows[usize::from(!upsert)]);
            match envelope::fixed(row, mine, &field) {
                Ok(row) if upsert => Change::Upsert(row),
                Ok(row) => Change::Delete(row),
                Err((at, reason)) => bad(&at, &reason),
            }
        }
        Ok(Some(_)) => bad(&field, &format!("the row of operation {op:?} must be a JSON object")),
        Ok(None) => bad(&field, &format!("operation {op:?} needs its row in {field:?}, which is missing or null")),
        Err((at, reason)) => bad(&at, &reason),
    }
}

fn bad<'a>(field: &str, reason: &str) -> Change<'a> {
    Change::Bad { field: field.to_owned(), reason: reason.to_owned() }
}

fn expected(spec: &Spec) -> String {
    format!("expected one of {} (upsert) or {} (delete)", spec.upsert_ops.join(", "), spec.delete_ops.join(", "))
}

pub(crate) type Entries<'a> = Vec<(Cow<'a, str>, &'a RawValue)>;

/// The top-level fields of one JSON object, each value as its raw text.
pub(crate) fn entries(text: &str) -> Result<Entries<'_>, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let found = (&mut de).deserialize_map(Fields).map_err(|e| format!("not one JSON object: {e}"))?;
    de.end().map_err(|e| format!("not one JSON object: {e}"))?;
    Ok(found)
}

/// The payload of a `{"schema": .., "payload": {..}}` value (exactly those two fields).
fn unwrapped<'a>(entries: &Entries<'a>, spec: &Spec) -> Option<&'a str> {
    if !spec.unwrap_envelope || entries.len() != 2 {
        return None;
    }
    let schema = entries.iter().any(|(k, _)| k == "schema");
    let payload = entries.iter().find(|(k, _)| k == "payload").map(|(_, v)| v.get());
    payload.filter(|p| schema && p.trim_start().starts_with('{'))
}

/// The value at `path`; None when a step is missing, or holds no object to go on into. A key on
/// the way that the object has twice is an error (its dotted path, and why): which of the two
/// would be a silent choice.
fn find<'a>(top: &Entries<'a>, path: &[String]) -> Result<Option<&'a RawValue>, (String, String)> {
    let mut inner: Option<Entries<'a>> = None;
    for (depth, step) in path.iter().enumerate() {
        let at = || path[..=depth].join(".");
        let mut found = inner.as_ref().unwrap_or(top).iter().filter(|(k, _)| k == step).map(|(_, raw)| *raw);
        let Some(raw) = found.next() else { return Ok(None) };
        if found.next().is_some() {
            return Err((at(), twice(depth == 0).to_string()));
        }
        if depth + 1 == path.len() {
            return Ok(Some(raw));
        }
        if !raw.get().trim_start().starts_with('{') {
            return Ok(None);
        }
        inner = Some(entries(raw.get()).map_err(|reason| (at(), reason))?);
    }
    Ok(None)
}

/// A scalar as text (a string as it is, a number or boolean as its JSON text); None for null.
fn scalar(raw: Option<&RawValue>) -> Result<Option<String>, String> {
    let Some(raw) = raw else { return Ok(None) };
    match serde_json::from_str::<serde_json::Value>(raw.get()) {
        Ok(serde_json::Value::Null) => Ok(None),
        Ok(serde_json::Value::String(s)) => Ok(Some(s)),
        Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => Ok(Some(v.to_string())),
        Ok(_) => Err("the operation field must be a string, number or boolean, not an object or array".into()),
        Err(e) => Err(format!("not JSON: {e}")),
    }
}

struct Fields;

impl<'de> Visitor<'de> for Fields {
    type Value = Entries<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            out.push((key, map.next_value::<&'de RawValue>()?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> Vec<String> {
        if p.is_empty() {
            vec![]
        } else {
            p.split('.').map(str::to_owned).collect()
        }
    }

    fn debezium() -> Spec {
        Spec {
            op: path("op"),
            after: path("after"),
            before: path("before"),
            upsert_ops: ["c", "r", "u"].map(String::from).to_vec(),
            delete_ops: vec!["d".into()],
            unwrap_envelope: true,
            units: vec![],
            decimals: vec![],
            keys: vec![],
            case_insensitive: false,
        }
    }

    fn text(c: Change) -> String {
        match c {
            Change::Upsert(r) => format!("U {}", std::str::from_utf8(&r).unwrap()),
            Change::Delete(r) => format!("D {}", std::str::from_utf8(&r).unwrap()),
            Change::Bad { field, reason } => format!("BAD {field}: {reason}"),
        }
    }

    #[test]
    fn debezium_rows_come_from_after_and_deletes_from_before() {
        let s = debezium();
        let c = br#"{"before": null, "after": {"id": 1, "n": "a"}, "source": {"db": "x"}, "op": "c", "ts_ms": 5}"#;
        assert_eq!(text(split(c, &s)), r#"U {"id": 1, "n": "a"}"#);
        let u = br#"{"op": "u", "before": {"id": 1, "n": "a"}, "after": {"id": 1,"n":"b"}}"#;
        assert_eq!(text(split(u, &s)), r#"U {"id": 1,"n":"b"}"#);
        let d = br#"{"before": {"id": 1, "n": "b"}, "after": null, "op": "d"}"#;
        assert_eq!(text(split(d, &s)), r#"D {"id": 1, "n": "b"}"#);
        let r = br#"{"after": {"id": 2}, "op": "r"}"#;
        assert_eq!(text(split(r, &s)), r#"U {"id": 2}"#);
    }

    #[test]
    fn the_json_converters_schema_envelope_is_read_through() {
        let s = debezium();
        let v = br#"{"schema": {"type": "struct"}, "payload": {"before": null, "after": {"id": 3}, "op": "c"}}"#;
        assert_eq!(text(split(v, &s)), r#"U {"id": 3}"#);
        // a row that happens to have fields named schema and payload, and more, is not an envelope
        let flat = Spec { unwrap_envelope: true, ..Spec::default() };
        let v = br#"{"schema": 1, "payload": {"a": 1}, "id": 4}"#;
        assert_eq!(text(split(v, &flat)), format!("U {}", std::str::from_utf8(v).unwrap()));
    }

    fn envelope(ts_name: &str, ts: i64) -> String {
        let row = format!(
            r#"{{"type": "struct", "optional": true, "fields": [{{"type": "int32", "field": "id"}},
                {{"type": "int64", "optional": true, "name": "{ts_name}", "field": "ts"}}]"#
        );
        format!(
            r#"{{"schema": {{"type": "struct", "fields": [{row}, "field": "before"}}, {row}, "field": "after"}},
                {{"type": "string", "field": "op"}}]}},
               "payload": {{"before": null, "after": {{"id": 1, "ts": {ts}}}, "op": "c"}}}}"#
        )
    }

    #[test]
    fn a_number_sent_in_another_unit_than_its_columns_is_brought_to_it_exactly() {
        let s = Spec { units: vec![("ts".into(), "us".into())], ..debezium() };
        let micros = envelope("io.debezium.time.MicroTimestamp", 1_700_000_000_000_001);
        let millis = envelope("io.debezium.time.Timestamp", 1_700_000_000_123);
        let values = [micros.as_bytes(), millis.as_bytes(), micros.as_bytes(), millis.as_bytes()];
        let got: Vec<String> = split_all(&values, &s).into_iter().map(text).collect();
        assert_eq!(got[0], r#"U {"id": 1, "ts": 1700000000000001}"#); // the slice, untouched
        assert_eq!(got[1], r#"U {"id":1,"ts":1700000000123000}"#);
        assert_eq!(got[2], got[0]);
        assert_eq!(got[3], got[1]);
        // finer than the column: exact or refused, never rounded
        let nanos = envelope("io.debezium.time.NanoTimestamp", 1_700_000_000_000_001_000);
        assert_eq!(text(split(nanos.as_bytes(), &s)), r#"U {"id":1,"ts":1700000000000001}"#);
        let t = text(split(envelope("io.debezium.time.NanoTimestamp", 1_700_000_000_000_001_001).as_bytes(), &s));
        assert!(
            t.starts_with("BAD after.ts: 1700000000000001001 nanoseconds has digits below the column's unit"),
            "{t}"
        );
        let t = text(split(envelope("org.apache.kafka.connect.data.Timestamp", i64::MAX / 10).as_bytes(), &s));
        assert!(t.starts_with("BAD after.ts: 922337203685477580 milliseconds is out of the column's range"), "{t}");
        // a date's days are no count of time: refused, naming both
        let t = text(split(envelope("io.debezium.time.Date", 5).as_bytes(), &s));
        assert!(
            t.starts_with(
                "BAD after.ts: the source now sends ts as io.debezium.time.Date, a count of days, but \
                               the column reads a count of microseconds"
            ),
            "{t}"
        );
        // a name with no unit, or no name, is not a conflict (a declared unit is the user's word)
        assert!(text(split(envelope("x.Custom", 5).as_bytes(), &s)).starts_with(r#"U {"id": 1"#));
        // without units no number is rescaled
        assert!(text(split(millis.as_bytes(), &debezium())).starts_with(r#"U {"id": 1, "ts": 1700000000123}"#));
        // a delete's row (its key) is brought to the units too; null stays null
        let d = millis
            .replace(r#""before": null"#, r#""before": {"id": 2, "ts": 7}"#)
            .replace(r#""op": "c""#, r#""op": "d""#);
        assert_eq!(text(split(d.as_bytes(), &s)), r#"D {"id":2,"ts":7000}"#);
        let n = millis.replace("1700000000123", "null");
        assert_eq!(text(split(n.as_bytes(), &s)), r#"U {"id": 1, "ts": null}"#);
        // nothing to bring: the slice
    }

    #[test]
    fn a_decimal_sent_as_base64_bytes_lands_as_its_digits_and_one_sent_as_a_number_as_it_is() {
        let decimal = r#"{"type": "bytes", "optional": true, "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "12"}, "field": "amount"}"#;
        let value = |amount: &str| {
            format!(
                r#"{{"schema": {{"type": "struct", "fields": [{{"type": "struct", "field": "after", "fields":
                    [{{"type": "int32", "field": "id"}}, {decimal}]}}, {{"type": "string", "field": "op"}}]}},
                   "payload": {{"after": {{"id": 1, "amount": {amount}}}, "op": "c"}}}}"#
            )
        };
        let s = Spec { decimals: vec!["amount".into()], ..debezium() };
        // a column the table does not read as a decimal is left as sent
        assert_eq!(text(split(value(r#""BNI=""#).as_bytes(), &debezium())), r#"U {"id": 1, "amount": "BNI="}"#);
        let all = [value(r#""BNI=""#), value("12.34"), value(r#""+y4=""#), value("null"), value(r#""MTIzNA==""#)];
        let got: Vec<String> = split_all(&all, &s).into_iter().map(text).collect();
        assert_eq!(got[0], r#"U {"id":1,"amount":12.34}"#);
        assert_eq!(got[1], r#"U {"id": 1, "amount": 12.34}"#);
        assert_eq!(got[2], r#"U {"id":1,"amount":-12.34}"#);
        assert_eq!(got[3], r#"U {"id": 1, "amount": null}"#);
        // base64 text made of digits only is still bytes: "1234" is never read as the number
        assert_eq!(text(split(value(r#""1234""#).as_bytes(), &s)), r#"U {"id":1,"amount":-26588.24}"#);
        assert_eq!(got[4], r#"U {"id":1,"amount":8253734.92}"#);
        let t = text(split(value(r#""12.5""#).as_bytes(), &s));
        assert!(t.starts_with(r#"BAD after.amount: the schema says this is a decimal, but "12.5" is neither"#), "{t}");
        // a decimal whose schema gives no usable scale cannot be read, never guessed
        for parameters in [r#""scale": "-1""#, r#""scale": "4000000000""#, r#""precision": "3""#] {
            let v = value(r#""BNI=""#).replace(r#""scale": "2""#, parameters);
            let t = text(split(v.as_bytes(), &s));
            assert!(t.starts_with("BAD after.amount: the schema names amount a decimal"), "{parameters}: {t}");
        }
        // matched ignoring case where the table is case-insensitive
        let upper = value(r#""BNI=""#)
            .replace(r#""field": "amount""#, r#""field": "AMOUNT""#)
            .replace(r#""amount": "BNI=""#, r#""AMOUNT": "BNI=""#);
        // not the decimal column: its base64 text is never read as digits
        let t = text(split(upper.as_bytes(), &s));
        assert!(t.starts_with("BAD after.AMOUNT: the schema says this is a decimal"), "{t}");
        assert!(t.contains("the table has no decimal column of this name"), "{t}");
        let folding = Spec { case_insensitive: true, ..s.clone() };
        assert_eq!(text(split(upper.as_bytes(), &folding)), r#"U {"id":1,"AMOUNT":12.34}"#);
    }

    #[test]
    fn a_deletes_row_is_fixed_only_in_its_key_columns() {
        let s = Spec { units: vec![("ts".into(), "us".into())], keys: vec!["id".into()], ..debezium() };
        // before.ts is finer than the column: not read for a delete, so not a reason to refuse it
        let d = envelope("io.debezium.time.NanoTimestamp", 1)
            .replace(r#""before": null"#, r#""before": {"id": 2, "ts": 1700000000000000001}"#)
            .replace(r#""op": "c""#, r#""op": "d""#);
        assert_eq!(text(split(d.as_bytes(), &s)), r#"D {"id": 2, "ts": 1700000000000000001}"#);
        let keyed = Spec { keys: vec!["ts".into()], ..s.clone() };
        assert!(text(split(d.as_bytes(), &keyed)).starts_with("BAD before.ts: "));
    }

    #[test]
    fn a_flat_change_record_is_its_own_row() {
        let s = Spec {
            op: path("meta.kind"),
            upsert_ops: vec!["I".into(), "U".into()],
            delete_ops: vec!["D".into()],
            ..Spec::default()
        };
        let v = br#"{"id": 7, "meta": {"kind": "D"}}"#;
        assert_eq!(text(split(v, &s)), format!("D {}", std::str::from_utf8(v).unwrap()));
        let n = Spec { op: path("k"), upsert_ops: vec!["1".into()], delete_ops: vec!["0".into()], ..Spec::default() };
        assert!(text(split(br#"{"id": 1, "k": 1}"#, &n)).starts_with("U "));
        assert!(text(split(br#"{"id": 1, "k": 0}"#, &n)).starts_with("D "));
    }

    #[test]
    fn every_bad_change_names_its_field_and_what_was_expected() {
        let s = debezium();
        let t = text(split(br#"{"op": "t", "before": null, "after": null}"#, &s));
        assert!(t.starts_with("BAD op: operation \"t\" is not one"), "{t}");
        assert!(t.contains("c, r, u (upsert) or d (delete)"), "{t}");
        let t = text(split(br#"{"after": {"id": 1}}"#, &s));
        assert!(t.starts_with("BAD op: the change record has no operation field"), "{t}");
        let t = text(split(br#"{"op": "d", "before": null}"#, &s));
        assert!(t.starts_with("BAD before: operation \"d\" needs its row in \"before\""), "{t}");
        let t = text(split(br#"{"op": "c", "after": [1]}"#, &s));
        assert!(t.starts_with("BAD after: the row of operation \"c\" must be a JSON object"), "{t}");
        let t = text(split(br#"{"op": {"x": 1}, "after": {}}"#, &s));
        assert!(t.starts_with("BAD op: the operation field must be a string"), "{t}");
        assert!(text(split(br#"{"op": "c", "after": {"id": 1}"#, &s)).starts_with("BAD : not one JSON object"));
        assert!(text(split(br#"{"op": "c"} {"op": "c"}"#, &s)).starts_with("BAD : not one JSON object"));
        assert!(text(split(b"[1]", &s)).starts_with("BAD : not one JSON object"));
        assert!(text(split(b"\xff", &s)).starts_with("BAD : the value is not UTF-8"));
    }

    #[test]
    fn a_key_the_change_is_read_by_that_appears_twice_is_a_bad_change_naming_it() {
        let s = debezium();
        for (value, field, top_level) in [
            (&br#"{"op": "c", "after": {"id": 1}, "op": "d"}"#[..], "op", true),
            (br#"{"op": "c", "after": {"id": 1}, "after": {"id": 2}}"#, "after", true),
            (br#"{"op": "d", "before": {"id": 1}, "\u0062efore": {"id": 2}}"#, "before", true),
            (br#"{"schema": {}, "payload": {"op": "c", "op": "c", "after": {"id": 1}}}"#, "op", true),
        ] {
            let got = split(value, &s);
            assert_eq!(got, Change::Bad { field: field.into(), reason: twice(top_level).into() }, "{value:?}");
        }
        let nested = Spec { op: path("meta.kind"), upsert_ops: vec!["I".into()], ..Spec::default() };
        for (value, field, top_level) in [
            (&br#"{"meta": {"kind": "I", "kind": "D"}}"#[..], "meta.kind", false),
            (br#"{"meta": {"kind": "I"}, "meta": {"kind": "D"}}"#, "meta", true),
        ] {
            let got = split(value, &nested);
            assert_eq!(got, Change::Bad { field: field.into(), reason: twice(top_level).into() }, "{value:?}");
        }
        // keys the change is not read by are the row's own: the buffer that decodes it names them
        let v = br#"{"op": "c", "after": {"id": 1, "id": 2}, "ts_ms": 1, "ts_ms": 2}"#;
        assert_eq!(text(split(v, &s)), r#"U {"id": 1, "id": 2}"#);
    }

    #[test]
    fn escaped_keys_are_matched_by_their_text() {
        let s = debezium();
        let v = br#"{"\u006fp": "c", "after": {"id": 1}}"#;
        assert_eq!(text(split(v, &s)), r#"U {"id": 1}"#);
    }
}
