use super::*;
use arrow::array::{Array, AsArray};
use arrow::datatypes::{Field, Int64Type, Schema};

fn fields() -> Fields {
    Fields::from(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::LargeUtf8, true),
        Field::new("n", DataType::Struct(Fields::from(vec![Field::new("k", DataType::Int64, true)])), true),
        Field::new("r", DataType::Struct(Fields::from(vec![Field::new("k", DataType::Int64, false)])), true),
        Field::new("xs", DataType::List(Arc::new(Field::new("item", DataType::Float64, true))), true),
    ])
}

fn decode(strict: bool, values: &[&str]) -> Option<RecordBatch> {
    let fields = fields();
    let schema = Arc::new(Schema::new(fields.clone()));
    let decoder = FastDecoder::for_fields(&fields, strict, false).expect("plain columns");
    let indices: Vec<usize> = (0..values.len()).collect();
    // nothing left: every value read plainly, or None
    decoder.decode(|i| values[i].as_bytes(), &indices, &schema, 0).map(|d| d.batch)
}

#[test]
fn plain_values_land_with_escapes_and_any_field_order() {
    let batch = decode(
        true,
        &[
            r#"{"id": 1, "s": "a\"b\\c\u00e9\ud83d\ude00", "n": {"k": 7}, "xs": [1.5, null, -2e3], "r": {"k": 1}}"#,
            r#" { "xs" : [] , "r": {"k": 2}, "id":-9223372036854775808 } "#,
            r#"{"s": null, "id": 3, "n": null, "r": {"k": 3}}"#,
        ],
    )
    .expect("plain");
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().values(), &[1, i64::MIN, 3]);
    let s = batch.column(1).as_string::<i64>();
    assert_eq!(s.value(0), "a\"b\\c\u{e9}\u{1f600}");
    assert!(s.is_null(1) && s.is_null(2));
    assert!(batch.column(2).is_null(1) && batch.column(2).is_null(2));
    assert_eq!(batch.column(4).as_list::<i32>().value_length(0), 3);
}

#[test]
fn anything_not_plain_is_left_to_arrow_json() {
    for value in [
        r#"{"id": 1, "id": 2}"#,   // a repeated field
        r#"{"id": "1"}"#,          // a number as text
        r#"{"s": "x"}"#,           // a required field missing
        r#"{"id": 1, "r": {}}"#,   // a required field of a struct missing
        r#"{"id": 1, "r": null}"#, // a null struct over a required field (Arrow masks it; arrow-json does)
        r#"{"id": 01}"#,           // not a JSON number
        r#"{"id": 1.}"#,
        r#"{"id": 1.5}"#,                  // a fraction: the exact path says why
        r#"{"id": 1, "s": "\ud800"}"#,     // a lone surrogate
        "{\"id\": 1, \"s\": \"a\nb\"}",    // a raw control character
        r#"{"id": 1} {}"#,                 // two objects
        r#"{"id": 1, "other": 2}"#,        // an unknown field, strict
        r#"{"id": 99999999999999999999}"#, // past i64
    ] {
        assert!(decode(true, &[r#"{"id": 5, "r": {"k": 5}}"#, value]).is_none(), "{value}");
    }
    // not strict: an unknown field is checked and skipped
    let batch =
        decode(false, &[r#"{"id": 1, "other": {"a": [1, "x", null]}, "s": "t", "r": {"k": 0}}"#]).expect("skipped");
    assert_eq!(batch.column(1).as_string::<i64>().value(0), "t");
    assert!(decode(false, &[r#"{"id": 1, "other": [1,}, "r": {"k": 0}}"#]).is_none());
}
