use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, TimeUnit};

use super::*;

fn long(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return out;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut out = long(s.len() as i64);
    out.extend_from_slice(s);
    out
}

fn confluent(id: u32, datum: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8];
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(datum);
    out
}

const V1: &str = r#"{"type":"record","name":"Click","namespace":"web","fields":[
    {"name":"id","type":"int"},{"name":"page","type":"string"}]}"#;
const V2: &str = r#"{"type":"record","name":"Click","namespace":"web","fields":[
    {"name":"id","type":"int"},{"name":"page","type":"string"},
    {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
// the table: id long, page string, at timestamptz (optional)
const READ_V1: &str = r#"{"type":"record","name":"Click","namespace":"web","fields":[
    {"name":"id","type":"int"},{"name":"page","type":"string"},
    {"name":"at","type":["null",{"type":"long","logicalType":"timestamp-micros"}],"default":null}]}"#;
const READ_V2: &str = V2;

fn table() -> arrow::datatypes::SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("page", DataType::LargeUtf8, false),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
    ]))
}

fn buffer(framing: Framing) -> AvroBuffer {
    AvroBuffer::new(table(), Options { shards: 2, ..Options::default() }, framing).unwrap()
}

fn append(buf: &AvroBuffer, values: &[Vec<u8>]) -> Result<Appended, BufferError> {
    let offsets: Vec<i64> = (0..values.len() as i64).collect();
    let keys: Vec<Option<&[u8]>> = vec![None; values.len()];
    buf.append(&Records {
        topic: "t",
        partition: 0,
        offsets: &offsets,
        timestamps_ms: &offsets,
        keys: &keys,
        values,
        headers: None,
    })
}

fn v1(id: i64, page: &str) -> Vec<u8> {
    [long(id), string(page.as_bytes())].concat()
}

fn v2(id: i64, page: &str, at_ms: i64) -> Vec<u8> {
    [long(id), string(page.as_bytes()), long(at_ms)].concat()
}

#[test]
fn plain_datums_decode_into_the_table_types() {
    let buf = buffer(Framing::Plain);
    buf.register(PLAIN_ID, V1, READ_V1, 0).unwrap();
    let done = append(&buf, &[v1(1, "/a"), v1(2, "/b")]).unwrap();
    assert_eq!(done.rows, 2);
    assert!(done.errors.is_empty());
    let batch = buf.core().drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2]);
    assert_eq!(batch.column(1).as_string::<i64>().value(1), "/b");
    assert_eq!(batch.column(2).null_count(), 2);
}

#[test]
fn two_writer_schemas_in_one_batch_keep_offset_order_and_convert_millis_exactly() {
    let buf = buffer(Framing::Confluent);
    buf.register(1, V1, READ_V1, 0).unwrap();
    buf.register(2, V2, READ_V2, 0).unwrap();
    let values =
        [confluent(1, &v1(1, "/a")), confluent(2, &v2(2, "/b", 1_700_000_000_123)), confluent(1, &v1(3, "/c"))];
    let done = append(&buf, &values).unwrap();
    assert_eq!((done.rows, done.errors.len()), (3, 0));
    let batch = buf.core().drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 2, 3]);
    let at = batch.column(2).as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
    assert!(at.is_null(0) && at.is_null(2));
    assert_eq!(at.value(1), 1_700_000_000_123_000);
}

#[test]
fn the_writer_fields_a_registration_leaves_out_are_counted_per_row_kept() {
    let buf = buffer(Framing::Confluent);
    buf.register(1, V1, READ_V1, 2).unwrap();
    buf.register(2, V2, READ_V2, 0).unwrap();
    let truncated = confluent(1, &long(4));
    let values = [confluent(1, &v1(1, "/a")), truncated, confluent(2, &v2(2, "/b", 1)), confluent(1, &v1(3, "/c"))];
    let done = append(&buf, &values).unwrap();
    assert_eq!((done.rows, done.errors.len(), done.fields_ignored), (3, 1, 4));
}

#[test]
fn an_unknown_schema_id_refuses_the_append_whole_naming_it() {
    let buf = buffer(Framing::Confluent);
    buf.register(1, V1, READ_V1, 0).unwrap();
    match append(&buf, &[confluent(1, &v1(1, "/a")), confluent(9, &v1(2, "/b"))]) {
        Err(BufferError::UnknownSchemas(ids)) => assert_eq!(ids, vec![9]),
        other => panic!("expected UnknownSchemas, got {other:?}"),
    }
    assert_eq!(buf.core().rows(), 0);
}

#[test]
fn a_refused_schema_makes_its_records_bad_and_keeps_the_others() {
    let buf = buffer(Framing::Confluent);
    buf.register(1, V1, READ_V1, 0).unwrap();
    buf.refuse(7, "page".into(), "writer schema 7 has page as int; column page is string".into());
    let done = append(&buf, &[confluent(7, &long(5)), confluent(1, &v1(1, "/a"))]).unwrap();
    assert_eq!(done.rows, 1);
    assert_eq!(done.errors.len(), 1);
    assert_eq!((done.errors[0].offset, done.errors[0].field.as_str()), (0, "page"));
    assert!(done.errors[0].reason.contains("writer schema 7"));
}

#[test]
fn broken_values_are_bad_records_and_never_shift_rows_against_offsets() {
    let buf = buffer(Framing::Confluent);
    buf.register(1, V1, READ_V1, 0).unwrap();
    let mut trailing = confluent(1, &v1(3, "/c"));
    trailing.push(42);
    let truncated = confluent(1, &[long(4), long(10), b"/d".to_vec()].concat());
    let not_utf8 = confluent(1, &[long(5), string(&[0xff, 0xfe])].concat());
    let values = vec![
        confluent(1, &v1(1, "/a")),
        b"{\"id\": 2}".to_vec(),
        trailing,
        truncated,
        not_utf8,
        confluent(1, &v1(6, "/f")),
    ];
    let done = append(&buf, &values).unwrap();
    let bad: Vec<i64> = done.errors.iter().map(|e| e.offset).collect();
    assert_eq!(bad, vec![1, 2, 3, 4], "{:?}", done.errors);
    assert!(done.errors[0].reason.contains("Confluent wire format"), "{}", done.errors[0].reason);
    assert!(done.errors[1].reason.contains("ends after"), "{}", done.errors[1].reason);
    assert_eq!(done.rows, 2);
    let batch = buf.core().drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, 6]);
    assert_eq!(batch.column(1).as_string::<i64>().value(1), "/f");
}

#[test]
fn many_records_with_a_few_bad_ones_keep_every_good_one() {
    let buf = buffer(Framing::Plain);
    buf.register(PLAIN_ID, V1, READ_V1, 0).unwrap();
    let values: Vec<Vec<u8>> =
        (0..1000).map(|i| if i % 97 == 5 { vec![0x80] } else { v1(i, &format!("/{i}")) }).collect();
    let done = append(&buf, &values).unwrap();
    let expected_bad: Vec<i64> = (0..1000).filter(|i| i % 97 == 5).collect();
    assert_eq!(done.errors.iter().map(|e| e.offset).collect::<Vec<_>>(), expected_bad);
    let batch = buf.core().drain().unwrap().unwrap();
    let ids = batch.column(0).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!(ids, (0..1000).filter(|i| i % 97 != 5).collect::<Vec<_>>());
}

#[test]
fn a_reader_schema_that_does_not_match_the_table_is_refused_at_registration() {
    let buf = buffer(Framing::Plain);
    let err = buf.register(PLAIN_ID, V1, V1, 0).unwrap_err();
    assert!(err.to_string().contains("2 fields"), "{err}");
    let wrong = r#"{"type":"record","name":"Click","namespace":"web","fields":[
        {"name":"id","type":"int"},{"name":"page","type":"string"},
        {"name":"at","type":["null","string"],"default":null}]}"#;
    let err = buf.register(PLAIN_ID, V1, wrong, 0).unwrap_err(); // Arrow would parse the text: a guess
    assert!(err.to_string().contains("cannot become"), "{err}");
    let other = r#"{"type":"record","name":"Other","fields":[{"name":"id","type":"int"}]}"#;
    assert!(buf.register(PLAIN_ID, V1, other, 0).is_err());
}

#[test]
fn a_decimal_with_more_digits_than_its_precision_is_a_bad_record_not_a_wrong_number() {
    let writer = r#"{"type":"record","name":"P","fields":[
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":2}}]}"#;
    let table = Arc::new(Schema::new(vec![Field::new("price", DataType::Decimal128(4, 2), true)]));
    let buf = AvroBuffer::new(table, Options::default(), Framing::Plain).unwrap();
    buf.register(PLAIN_ID, writer, writer, 0).unwrap();
    // two's-complement big-endian unscaled values: 1234 (12.34) and 12345678 (123456.78)
    let fits = [long(2), vec![0x04, 0xd2]].concat();
    let too_many = [long(4), vec![0x00, 0xbc, 0x61, 0x4e]].concat();
    let done = append(&buf, &[fits.clone(), too_many, fits]).unwrap();
    assert_eq!(done.errors.iter().map(|e| e.offset).collect::<Vec<_>>(), vec![1], "{:?}", done.errors);
    assert!(done.errors[0].reason.contains("precision"), "{}", done.errors[0].reason);
    let batch = buf.core().drain().unwrap().unwrap();
    let prices = batch.column(0).as_primitive::<arrow::datatypes::Decimal128Type>();
    assert_eq!(prices.values(), &[1234, 1234]);
}
