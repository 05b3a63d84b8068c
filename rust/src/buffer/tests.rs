use super::*;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};

fn meta() -> Options {
    Options { metadata_columns: true, ..Options::default() }
}

fn schema(meta: bool) -> SchemaRef {
    let mut fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("inner", DataType::Struct(vec![Field::new("score", DataType::Float64, true)].into()), true),
    ];
    if meta {
        fields.push(Field::new(META_TOPIC, DataType::Utf8, false));
        fields.push(Field::new(META_PARTITION, DataType::Int32, false));
        fields.push(Field::new(META_OFFSET, DataType::Int64, false));
        fields.push(Field::new(META_TIMESTAMP, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false));
        fields.push(Field::new(META_KEY, DataType::Binary, true));
    }
    Arc::new(Schema::new(fields))
}

fn append(buf: &JsonBuffer, offsets: &[i64], values: &[&str]) -> Vec<RecordError> {
    let timestamps: Vec<i64> = offsets.iter().map(|o| 1_700_000_000_000 + o).collect();
    let keys: Vec<Option<Vec<u8>>> =
        offsets.iter().map(|o| if o % 2 == 0 { Some(o.to_string().into_bytes()) } else { None }).collect();
    let records =
        Records { topic: "t", partition: 3, offsets, timestamps_ms: &timestamps, keys: &keys, values, headers: None };
    buf.append(&records).unwrap().errors
}

/// `values` at offsets 0, 1, ... of partition 0, without keys.
pub(super) fn append_from_zero<V: AsRef<[u8]>>(buf: &JsonBuffer, values: &[V]) -> Appended {
    let offsets: Vec<i64> = (0..values.len() as i64).collect();
    let keys: Vec<Option<Vec<u8>>> = vec![None; values.len()];
    let records = Records {
        topic: "t",
        partition: 0,
        offsets: &offsets,
        timestamps_ms: &offsets,
        keys: &keys,
        values,
        headers: None,
    };
    buf.append(&records).unwrap()
}

#[test]
fn decodes_values_and_metadata() {
    // reported, so the record with a field the table lacks still lands
    let buf = JsonBuffer::new(schema(true), Options { unknown_fields: UnknownFields::Report, ..meta() }).unwrap();
    let errors =
        append(&buf, &[10, 11], &[r#"{"id": 1, "name": "a", "inner": {"score": 1.5}}"#, r#"{"id": 2, "extra": true}"#]);
    assert!(errors.is_empty());
    assert_eq!(buf.rows(), 2);
    assert!(buf.bytes() > 0);
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(buf.rows(), 0);
    assert_eq!(batch.schema(), schema(true));
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
    assert_eq!(batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values(), &[10, 11]);
    assert_eq!(batch.column_by_name(META_PARTITION).unwrap().as_primitive::<arrow::datatypes::Int32Type>().value(1), 3);
    let ts = batch.column_by_name(META_TIMESTAMP).unwrap().as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    assert_eq!(ts.value(0), 1_700_000_000_010_000);
    let keys = batch.column_by_name(META_KEY).unwrap().as_binary::<i32>();
    assert_eq!(keys.value(0), b"10");
    assert!(keys.is_null(1));
    assert!(buf.drain().unwrap().is_none());
}

#[test]
fn bad_records_come_back_as_errors_and_the_rest_is_kept() {
    let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let errors = append(
        &buf,
        &[5, 6, 7, 8, 9],
        &[r#"{"id": 1}"#, "{not json", r#"{"id": "x"}"#, "[1,2]", r#"{"id": 4, "inner": {"score": "high"}}"#],
    );
    let summary: Vec<(usize, i64, &str)> = errors.iter().map(|e| (e.index, e.offset, e.field.as_str())).collect();
    assert_eq!(summary, vec![(1, 6, ""), (2, 7, "id"), (3, 8, ""), (4, 9, "inner.score")]);
    assert!(errors[0].reason.contains("not valid JSON"), "{}", errors[0].reason);
    assert!(errors[2].reason.contains("not an object"), "{}", errors[2].reason);
    assert!(errors[3].reason.contains("high"), "{}", errors[3].reason);
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 1);
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 1);
}

#[test]
fn missing_required_field_is_a_record_error() {
    let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let errors = append(&buf, &[0, 1], &[r#"{"name": "no id"}"#, r#"{"id": 7}"#]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].offset, 0);
    assert_eq!(
        (errors[0].field.as_str(), errors[0].reason.as_str()),
        ("id", "is required, and the record has no value for it (missing or null)")
    );
    assert_eq!(buf.rows(), 1);
}

fn strict_schema() -> SchemaRef {
    let ms = std::collections::HashMap::from([(decoders::UNIT_KEY.to_string(), "ms".to_string())]);
    Arc::new(Schema::new(vec![
        Field::new("n", DataType::Int64, true),
        Field::new("i", DataType::Int32, true),
        Field::new("d", DataType::Decimal128(10, 2), true),
        Field::new("tz", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("local", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("ms", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true).with_metadata(ms),
    ]))
}

#[test]
fn values_land_exactly_as_sent_or_the_record_is_bad() {
    let buf = JsonBuffer::new(strict_schema(), Options::default()).unwrap();
    let good = [
        r#"{"n": 7, "i": "-12", "d": 1.5, "tz": "2024-01-01T10:00:00+02:00", "local": "2024-01-01T10:00:00", "ms": 1704103200123}"#,
        r#"{"n": 1e3, "d": "-0.05", "tz": "2024-01-01T08:00:00.000001Z"}"#,
    ];
    let bad = [
        (r#"{"n": 7.9}"#, "n", "7.9 has a fractional part; the column is a long (64-bit)"),
        (r#"{"i": 2147483648}"#, "i", "2147483648 does not fit an int (32-bit)"),
        (
            r#"{"d": 1.239}"#,
            "d",
            "1.239 has more than 2 digit(s) after the decimal point; the column is decimal(10, 2)",
        ),
        (
            r#"{"d": "123456789"}"#,
            "d",
            "123456789 has more than 8 digit(s) before the decimal point; the column is decimal(10, 2)",
        ),
        (r#"{"tz": 1704103200000}"#, "tz", "1704103200000 is a number, and the column declares no unit"),
        (r#"{"tz": "2024-01-01T10:00:00"}"#, "tz", "has no UTC offset"),
        (r#"{"local": "2024-01-01T10:00:00Z"}"#, "local", "has a UTC offset"),
        (r#"{"tz": "2024-01-01T10:00:00.0000001Z"}"#, "tz", "has digits below microsecond"),
        (r#"{"ms": 1.5}"#, "ms", "1.5 has a fractional part; milliseconds since the epoch"),
        (r#"{"n": true}"#, "n", "expected an integer"),
    ];
    let values: Vec<&str> = good.iter().copied().chain(bad.iter().map(|b| b.0)).collect();
    let offsets: Vec<i64> = (0..values.len() as i64).collect();
    let errors = append(&buf, &offsets, &values);
    let got: Vec<(&str, &str)> = errors.iter().map(|e| (e.field.as_str(), e.reason.as_str())).collect();
    assert_eq!(errors.len(), bad.len(), "{got:?}");
    for ((_, field, reason), (got_field, got_reason)) in bad.iter().zip(&got) {
        assert_eq!(field, got_field, "{got_reason}");
        assert!(got_reason.contains(reason), "{got_reason:?} does not say {reason:?}");
    }
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[7, 1000]);
    assert_eq!(batch.column(1).as_primitive::<arrow::datatypes::Int32Type>().value(0), -12);
    assert_eq!(batch.column(2).as_primitive::<arrow::datatypes::Decimal128Type>().values(), &[150, -5]);
    let us = |c: usize| batch.column(c).as_primitive::<arrow::datatypes::TimestampMicrosecondType>().values().to_vec();
    assert_eq!(us(3), vec![1_704_096_000_000_000, 1_704_096_000_000_001]); // 08:00 UTC both
    assert_eq!(us(4)[0], 1_704_103_200_000_000); // 10:00 local, kept as written
    assert_eq!(us(5)[0], 1_704_103_200_123_000); // milliseconds, as declared
    assert_eq!(batch.schema(), strict_schema());
}

#[test]
fn metadata_columns_must_be_in_the_schema() {
    let err = JsonBuffer::new(schema(false), meta()).unwrap_err();
    assert!(err.to_string().contains("_kafka_topic"), "{err}");
}

#[test]
fn mismatched_lengths_are_rejected() {
    let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let keys: Vec<Option<Vec<u8>>> = vec![None];
    let records = Records {
        topic: "t",
        partition: 0,
        offsets: &[1, 2],
        timestamps_ms: &[0],
        keys: &keys,
        values: &["{}"],
        headers: None,
    };
    assert!(buf.append(&records).is_err());
}

#[test]
fn escaped_surrogate_pairs_decode_to_the_right_character() {
    let schema = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
    let buf = JsonBuffer::new(schema, Options::default()).unwrap();
    // U+10000, U+20000 (high half D840, misread by arrow-json 60), U+E0100, and plain text
    let values = [
        r#"{"name": "\ud800\udc00"}"#,
        r#"{"name": "\uD840\uDC00"}"#,
        r#"{"name": "\udb40\udd00"}"#,
        r#"{"name": "a\u00e9"}"#,
    ];
    assert!(append(&buf, &[0, 1, 2, 3], &values).is_empty());
    let batch = buf.drain().unwrap().unwrap();
    let names: Vec<&str> = batch.column(0).as_string::<i32>().iter().map(|s| s.unwrap()).collect();
    assert_eq!(names, vec!["\u{10000}", "\u{20000}", "\u{E0100}", "a\u{e9}"]);
}

#[test]
fn rewritten_values_keep_doubles_bit_for_bit() {
    let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Float64, true)]));
    let buf = JsonBuffer::new(schema, Options { unknown_fields: UnknownFields::Report, ..Options::default() }).unwrap();
    // the escaped surrogate in the key (an unknown field, reported) sends the value through the serde_json rewrite
    assert!(append(&buf, &[0], &[r#"{"\ud800\udc00": 0, "x": 5.1085747145855235e-182}"#]).is_empty());
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<arrow::datatypes::Float64Type>().value(0), 5.1085747145855235e-182);
}

fn records<'a>(
    partition: i32,
    offsets: &'a [i64],
    keys: &'a [Option<Vec<u8>>],
    values: &'a [String],
) -> Records<'a, String, Vec<u8>> {
    Records { topic: "t", partition, offsets, timestamps_ms: offsets, keys, values, headers: None }
}

fn rows(n: usize, start: i64) -> (Vec<i64>, Vec<Option<Vec<u8>>>, Vec<String>) {
    let offsets: Vec<i64> = (start..start + n as i64).collect();
    let keys = offsets.iter().map(|o| Some(format!("k{}", o % 3).into_bytes())).collect();
    let values = offsets.iter().map(|o| format!(r#"{{"id": {o}, "name": "row {o}"}}"#)).collect();
    (offsets, keys, values)
}

#[test]
fn the_byte_cap_refuses_an_append_whole_and_drain_frees_it() {
    let probe = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let (o, k, v) = rows(100, 0);
    probe.append(&records(0, &o, &k, &v)).unwrap();
    let one = probe.bytes();
    let buf = JsonBuffer::new(schema(false), Options { max_bytes: Some(one * 2 + 10), ..Options::default() }).unwrap();
    buf.append(&records(0, &o, &k, &v)).unwrap();
    buf.append(&records(1, &o, &k, &v)).unwrap();
    assert_eq!(buf.bytes(), 2 * one);
    match buf.append(&records(2, &o, &k, &v)) {
        Err(BufferError::Full { needed, used, cap }) => assert_eq!((needed, used, cap), (one, 2 * one, one * 2 + 10)),
        other => panic!("expected Full, got {other:?}"),
    }
    assert_eq!(buf.rows(), 200);
    assert_eq!(buf.drain().unwrap().unwrap().num_rows(), 200);
    assert_eq!((buf.bytes(), buf.rows()), (0, 0));
    buf.append(&records(2, &o, &k, &v)).unwrap();
    buf.clear();
    assert_eq!((buf.bytes(), buf.rows()), (0, 0));
}

#[test]
fn appends_from_many_threads_land_once_each() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    std::thread::scope(|scope| {
        for partition in 0..8 {
            let buf = &buf;
            scope.spawn(move || {
                for chunk in 0..20 {
                    let (o, k, v) = rows(50, chunk * 50);
                    assert!(buf.append(&records(partition, &o, &k, &v)).unwrap().errors.is_empty());
                }
            });
        }
    });
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 8 * 20 * 50);
    let parts = batch.column_by_name(META_PARTITION).unwrap().as_primitive::<arrow::datatypes::Int32Type>();
    let offs = batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>();
    let ids = batch.column(0).as_primitive::<Int64Type>();
    let mut seen: Vec<(i32, i64)> = (0..batch.num_rows()).map(|i| (parts.value(i), offs.value(i))).collect();
    // every row still carries its own record's value
    assert!((0..batch.num_rows()).all(|i| ids.value(i) == offs.value(i)));
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 8000);
}

#[test]
fn last_writer_wins_by_key_in_offset_order() {
    let buf = JsonBuffer::new(schema(false), Options { dedupe_by_key: true, ..Options::default() }).unwrap();
    // offsets 10..16 arrive after 0..6 was appended later: order by offset, not arrival
    let (o2, k2, v2) = rows(6, 10);
    let (o1, k1, v1) = rows(6, 0);
    buf.append(&records(0, &o2, &k2, &v2)).unwrap();
    buf.append(&records(0, &o1, &k1, &v1)).unwrap();
    let batch = buf.drain().unwrap().unwrap();
    let mut ids: Vec<i64> = batch.column(0).as_primitive::<Int64Type>().values().to_vec();
    ids.sort();
    assert_eq!(ids, vec![13, 14, 15]); // keys k0, k1, k2: last offsets 15, 13, 14
}

#[test]
fn unknown_fields_are_reported_when_asked_and_near_misses_are_still_bad_records() {
    let buf = JsonBuffer::new(schema(false), Options { unknown_fields: UnknownFields::Report, ..Options::default() })
        .unwrap();
    let values = [
        r#"{"id": 1, "colour": "red"}"#.to_string(),
        r#"{"id": 2, "inner": {"score": 1, "rank": 3}}"#.to_string(),
        r#"{"id": 3, "Name": "would land as NULL"}"#.to_string(),
    ];
    let keys = vec![None, None, None];
    let got = buf.append(&records(0, &[5, 6, 7], &keys, &values)).unwrap();
    assert_eq!(got.rows, 2);
    let paths: Vec<(usize, i64, &str)> =
        got.unknown_fields.iter().map(|u| (u.index, u.offset, u.path.as_str())).collect();
    assert_eq!(paths, vec![(0, 5, "colour"), (1, 6, "inner.rank")]);
    let errors: Vec<(i64, &str)> = got.errors.iter().map(|e| (e.offset, e.field.as_str())).collect();
    assert_eq!(errors, vec![(7, "Name")]);
    assert!(got.errors[0].reason.starts_with("differs only in case from column 'name'"), "{}", got.errors[0].reason);
}

#[test]
fn the_default_rejects_unknown_fields_and_parses_the_option_by_name() {
    assert_eq!(Options::default().unknown_fields, UnknownFields::Reject);
    assert_eq!("reject".parse(), Ok(UnknownFields::Reject));
    assert_eq!("report".parse(), Ok(UnknownFields::Report));
    let err = "ignore".parse::<UnknownFields>().unwrap_err();
    assert!(err.contains(r#""reject" or "report""#), "{err}");
}

#[test]
fn two_objects_in_one_value_are_an_error_not_two_rows() {
    let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let errors = append(&buf, &[0, 1], &[r#"{"id": 1}{"id": 2}"#, r#"{"id": 3}"#]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].offset, 0);
    assert_eq!(buf.drain().unwrap().unwrap().num_rows(), 1);
}

#[test]
fn drained_buffers_are_64_byte_aligned() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    let (o, k, v) = rows(1000, 0);
    buf.append(&records(0, &o, &k, &v)).unwrap();
    let batch = buf.drain().unwrap().unwrap();
    for column in batch.columns() {
        let data = column.to_data();
        for buffer in data.buffers().iter().chain(data.nulls().map(|n| n.inner().inner())) {
            assert!(align::is_aligned(buffer), "{:?} at {:p}", column.data_type(), buffer.as_ptr());
        }
    }
}

#[test]
fn rewritten_values_keep_map_entry_order() {
    let map = DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(
                vec![Field::new("key", DataType::Utf8, false), Field::new("value", DataType::Int64, true)].into(),
            ),
            false,
        )),
        false,
    );
    let buf = JsonBuffer::new(Arc::new(Schema::new(vec![Field::new("m", map, true)])), Options::default()).unwrap();
    // the escaped surrogate sends the value through the serde_json rewrite
    assert!(append(&buf, &[0], &[r#"{"m": {"z": 1, "\ud800\udc00": 2, "a": 3}}"#]).is_empty());
    let batch = buf.drain().unwrap().unwrap();
    let entries = batch.column(0).as_map();
    let keys: Vec<&str> = entries.keys().as_string::<i32>().iter().map(|k| k.unwrap()).collect();
    assert_eq!(keys, vec!["z", "\u{10000}", "a"]);
}

#[test]
fn uuid_binary_and_fixed_decode_from_text_and_reject_the_rest() {
    let uuid = Field::new("u", DataType::FixedSizeBinary(16), true).with_metadata(
        [("ARROW:extension:name".to_string(), "arrow.uuid".to_string())]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
    );
    let schema = Arc::new(Schema::new(vec![
        uuid,
        Field::new("b", DataType::LargeBinary, true),
        Field::new("f", DataType::FixedSizeBinary(3), true),
    ]));
    let buf = JsonBuffer::new(schema, Options::default()).unwrap();
    let errors = append(
        &buf,
        &[0, 1, 2, 3, 4],
        &[
            r#"{"u": "123e4567-e89b-12d3-a456-426614174000", "b": "aGVsbG8=", "f": "AQID"}"#,
            r#"{"u": null, "b": null, "f": null}"#,
            r#"{"u": 12}"#,
            r#"{"b": "not base64!"}"#,
            r#"{"f": "AQIDBA=="}"#,
        ],
    );
    let summary: Vec<(i64, &str)> = errors.iter().map(|e| (e.offset, e.field.as_str())).collect();
    assert_eq!(summary, vec![(2, "u"), (3, "b"), (4, "f")]);
    assert!(errors[0].reason.contains("UUID"), "{}", errors[0].reason);
    assert!(errors[2].reason.contains("expected 3 bytes"), "{}", errors[2].reason);
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.num_rows(), 2);
    assert_eq!(batch.column(0).as_fixed_size_binary().value(0)[..2], [0x12, 0x3e]);
    assert_eq!(batch.column(1).as_binary::<i64>().value(0), b"hello");
    assert_eq!(batch.column(2).as_fixed_size_binary().value(0), [1, 2, 3]);
    assert!(batch.column(0).is_null(1));
}

#[test]
fn values_that_spill_into_each_other_never_shift_rows() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    // 0 leaves a string open that 1 would close; 2 holds two objects. Fed together they make
    // as many rows as values, which a row count alone would accept.
    let errors = append(
        &buf,
        &[0, 1, 2, 3],
        &[r#"{"id": 1, "name": "}"#, r#"{","id": 2}"#, r#"{"id": 3}{"id": 4}"#, r#"{"id": 5}"#],
    );
    assert_eq!(errors.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert!(errors.iter().all(|e| e.reason.contains("JSON")), "{errors:?}");
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[5]);
    assert_eq!(batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values(), &[3]);
}

#[test]
fn drain_batches_hands_over_the_appended_batches_aligned() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    for partition in 0..3 {
        let (o, k, v) = rows(100, 0);
        buf.append(&records(partition, &o, &k, &v)).unwrap();
    }
    let batches = buf.drain_batches(0).unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), vec![100, 100, 100]);
    assert_eq!((buf.rows(), buf.bytes()), (0, 0));
    for batch in &batches {
        assert_eq!(batch.schema(), schema(true));
        for column in batch.columns() {
            assert!(column.to_data().buffers().iter().all(align::is_aligned));
        }
    }
    assert!(buf.drain_batches(0).unwrap().is_empty());
}

#[test]
fn drain_batches_glues_runs_of_small_batches_and_leaves_big_ones_alone() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    // one partition, so one shard: the entries come back in append order
    let mut next = 0;
    for n in [10, 10, 10, 500, 10, 30, 10] {
        let (o, k, v) = rows(n, next);
        buf.append(&records(0, &o, &k, &v)).unwrap();
        next += n as i64;
    }
    let batches = buf.drain_batches(25).unwrap();
    assert_eq!(batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), vec![30, 500, 10, 30, 10]);
    let offsets: Vec<i64> = batches
        .iter()
        .flat_map(|b| b.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values().to_vec())
        .collect();
    assert_eq!(offsets, (0..next).collect::<Vec<_>>());
    for batch in &batches {
        for column in batch.columns() {
            assert!(column.to_data().buffers().iter().all(align::is_aligned));
        }
    }
    assert_eq!((buf.rows(), buf.bytes()), (0, 0));
}

#[test]
fn unknown_fields_are_bad_records_by_default_and_near_misses_say_so() {
    let buf = JsonBuffer::new(schema(false), Options::default()).unwrap();
    let errors = append(
        &buf,
        &[0, 1, 2, 3],
        &[
            r#"{"id": 1, "name": "kept"}"#,
            r#"{"id": 2, "extra": true}"#,
            r#"{"id": 3, "Name": "near miss"}"#,
            r#"{"id": 4, "inner": {"Score": 1.0}}"#,
        ],
    );
    let got: Vec<(i64, &str)> = errors.iter().map(|e| (e.offset, e.field.as_str())).collect();
    assert_eq!(got, vec![(1, "extra"), (2, "Name"), (3, "inner.Score")]);
    assert!(errors[0].reason.contains("the table has no such column"), "{}", errors[0].reason);
    assert!(errors[1].reason.starts_with("differs only in case from column 'name'"), "{}", errors[1].reason);
    assert!(errors[2].reason.starts_with("differs only in case from column 'score'"), "{}", errors[2].reason);
    assert_eq!(buf.rows(), 1);
}

#[test]
fn a_few_bad_records_among_many_are_found_and_every_other_row_kept_in_order() {
    let buf = JsonBuffer::new(schema(true), meta()).unwrap();
    let offsets: Vec<i64> = (0..1000).collect();
    let values: Vec<String> = offsets
        .iter()
        .map(|&o| match o {
            3 | 500 | 999 => format!(r#"{{"id": "x{o}"}}"#),
            640 => r#"{"name": "no id"}"#.to_string(),
            _ => format!(r#"{{"id": {o}}}"#),
        })
        .collect();
    let refs: Vec<&str> = values.iter().map(String::as_str).collect();
    let errors = append(&buf, &offsets, &refs);
    assert_eq!(
        errors.iter().map(|e| (e.offset, e.field.as_str())).collect::<Vec<_>>(),
        vec![(3, "id"), (500, "id"), (640, "id"), (999, "id")]
    );
    let batch = buf.drain().unwrap().unwrap();
    let kept: Vec<i64> = batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values().to_vec();
    let want: Vec<i64> = offsets.iter().copied().filter(|o| ![3, 500, 640, 999].contains(o)).collect();
    assert_eq!(kept, want);
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values().to_vec(), want);
}

#[test]
fn appends_racing_drains_lose_no_row_keep_each_appenders_order_and_never_wrap_the_counters() {
    const THREADS: i64 = 4;
    const BATCHES: i64 = 150;
    const ROWS: usize = 5;
    let buf = JsonBuffer::new(schema(true), Options { shards: 2, ..meta() }).unwrap();
    let appended = AtomicUsize::new(0);
    let mut drained: Vec<RecordBatch> = Vec::new();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (buf, appended) = (&buf, &appended);
            // threads 0 and 2 append partition 0, 1 and 3 partition 1: each shard is pushed to
            // by two threads at once; each thread's offsets start at t * 1,000,000
            scope.spawn(move || {
                for b in 0..BATCHES {
                    let (o, k, v) = rows(ROWS, t * 1_000_000 + b * ROWS as i64);
                    buf.append(&records((t % 2) as i32, &o, &k, &v)).unwrap();
                    appended.fetch_add(ROWS, Ordering::SeqCst);
                }
            });
        }
        while appended.load(Ordering::SeqCst) < (THREADS * BATCHES) as usize * ROWS {
            drained.extend(buf.drain_batches(0).unwrap());
            // a drain that subtracted before the append added would wrap to near usize::MAX
            assert!(buf.rows() <= (THREADS * BATCHES) as usize * ROWS, "rows {}", buf.rows());
            assert!(buf.bytes() < 1 << 40, "bytes {}", buf.bytes());
        }
    });
    drained.extend(buf.drain_batches(0).unwrap());
    assert_eq!((buf.rows(), buf.bytes()), (0, 0));
    let mut last = [-1_i64; THREADS as usize];
    let mut total = 0;
    for batch in &drained {
        for &offset in batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values() {
            let t = (offset / 1_000_000) as usize;
            assert!(offset > last[t], "thread {t}: offset {offset} after {}", last[t]);
            last[t] = offset;
            total += 1;
        }
    }
    assert_eq!(total, (THREADS * BATCHES) as usize * ROWS);
}

#[test]
fn header_columns_land_beside_the_value_and_a_bad_header_is_a_bad_record_alone() {
    let fields = vec![
        Field::new("id", DataType::Int64, false),
        Field::new("trace", DataType::Utf8, true),
        Field::new("attempt", DataType::Int64, true),
    ];
    let options = Options {
        header_columns: vec![("trace".into(), b"trace-id".to_vec()), ("attempt".into(), b"attempt".to_vec())],
        ..Options::default()
    };
    let buf = JsonBuffer::new(Arc::new(Schema::new(fields)), options).unwrap();
    let keys: Vec<Option<Vec<u8>>> = vec![None; 3];
    let headers: Vec<Headers<'_>> = vec![
        vec![(&b"trace-id"[..], Some(&b"t0"[..])), (&b"attempt"[..], Some(&b"3"[..]))],
        vec![(&b"attempt"[..], Some(&b"three"[..]))],
        vec![],
    ];
    let values = [r#"{"id": 0}"#, r#"{"id": 1}"#, r#"{"id": 2}"#];
    let records = Records {
        topic: "t",
        partition: 0,
        offsets: &[0, 1, 2],
        timestamps_ms: &[0, 0, 0],
        keys: &keys,
        values: &values,
        headers: Some(&headers),
    };
    let errors = buf.append(&records).unwrap().errors;
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].offset, errors[0].field.as_str()), (1, "attempt"));
    assert!(errors[0].reason.contains("header \"attempt\" is \"three\""), "{}", errors[0].reason);
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[0, 2]);
    let trace = batch.column(1).as_string::<i32>();
    assert_eq!((trace.value(0), trace.is_null(1)), ("t0", true));
    let attempt = batch.column(2).as_primitive::<Int64Type>();
    assert_eq!((attempt.value(0), attempt.is_null(1)), (3, true));
    let without = Records { headers: None, ..records };
    assert!(buf.append(&without).is_err(), "a buffer with header columns needs the headers");
}

#[test]
fn confluent_framing_is_stripped_and_a_value_without_it_is_a_bad_record() {
    let buf = JsonBuffer::new(schema(true), Options { confluent: true, ..meta() }).unwrap();
    let framed = |id: u32, json: &str| [&[0u8][..], &id.to_be_bytes(), json.as_bytes()].concat();
    let values = [
        framed(7, r#"{"id": 1, "name": "a"}"#),
        br#"{"id": 2}"#.to_vec(), // plain JSON: no frame
        framed(8, r#"{"id": 3, "inner": {"score": 2.5}}"#),
        vec![0, 0, 0, 0, 7],                                         // a frame and nothing after it
        [&[1u8][..], &7u32.to_be_bytes(), br#"{"id": 5}"#].concat(), // another magic byte
    ];
    let done = append_from_zero(&buf, &values);
    assert_eq!(done.errors.iter().map(|e| e.offset).collect::<Vec<_>>(), [1, 3, 4]);
    assert!(done.errors.iter().all(|e| e.field.is_empty() && e.reason.contains("Confluent wire format")));
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 3]);
    assert_eq!(batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values(), &[0, 2]);
}

#[test]
fn transforms_run_before_decoding_filtered_records_are_no_rows_and_misfits_are_bad_records() {
    let spec = r#"[{"op": "rename", "field": "user", "to": "name"}, {"op": "flatten", "field": "m", "separator": "_"},
                   {"op": "cast", "field": "id", "to": "long"}, {"op": "filter", "field": "kind", "matches": "keep"},
                   {"op": "drop", "field": "kind"}, {"op": "drop", "field": "m_x"}]"#;
    let transforms = Some(Arc::new(crate::transform::Transforms::parse(spec).unwrap()));
    let buf = JsonBuffer::new(schema(true), Options { transforms, ..meta() }).unwrap();
    let values = [
        r#"{"id": "1", "user": "a", "kind": "keep"}"#,
        r#"{"id": 2, "kind": "skip"}"#,                             // filtered out
        r#"{"id": "3x", "kind": "keep"}"#,                          // a cast that does not apply
        r#"{"id": 4, "kind": "keep", "m": {"x": 1}, "name": "b"}"#, // flattened, then dropped
        r#"{"id": 5, "user": "c", "name": "d", "kind": "keep"}"#,   // a rename onto a field
        r#"{"id": 6, "kind": "keep", "extra": 1}"#,                 // decoding still refuses what the table lacks
    ];
    let done = append_from_zero(&buf, &values);
    assert_eq!((done.rows, done.filtered), (2, 1));
    let errors: Vec<(i64, &str)> = done.errors.iter().map(|e| (e.offset, e.field.as_str())).collect();
    assert_eq!(errors, [(2, "id"), (4, "name"), (5, "extra")]);
    assert!(done.errors[0].reason.ends_with("(a transform of the table)"));
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 4]);
    assert_eq!(batch.column(1).as_string::<i32>().iter().collect::<Vec<_>>(), [Some("a"), Some("b")]);
    assert_eq!(batch.column_by_name(META_OFFSET).unwrap().as_primitive::<Int64Type>().values(), &[0, 3]);
}
