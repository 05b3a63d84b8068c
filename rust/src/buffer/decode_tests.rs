//! The single pass leaves the records it does not read plainly to arrow-json one by one: the
//! rows, their order and the bad records' reasons must be exactly those of the arrow-json path.

use std::sync::Arc;

use crate::buffer::*;
use arrow::array::AsArray;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, TimeUnit};
use arrow::util::display::{ArrayFormatter, FormatOptions};

fn schema() -> SchemaRef {
    let item = Field::new("item", DataType::Struct(vec![Field::new("k", DataType::Int64, true)].into()), true);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::LargeUtf8, true),
        Field::new(
            "inner",
            DataType::Struct(
                vec![Field::new("score", DataType::Float64, true), Field::new("tag", DataType::Utf8, true)].into(),
            ),
            true,
        ),
        Field::new("xs", DataType::List(Arc::new(item)), true),
        Field::new("at", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new(META_OFFSET, DataType::Int64, false),
        Field::new(META_TOPIC, DataType::Utf8, false),
        Field::new(META_PARTITION, DataType::Int32, false),
        Field::new(META_TIMESTAMP, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), false),
        Field::new(META_KEY, DataType::Binary, true),
    ]))
}

/// A value for offset `o` of kind `kind`: most are plain; the others fail part-way through a
/// string, a struct or a list (so the single pass has half a record to roll back), or are a shape
/// only arrow-json reads, or break the JSON.
fn value(o: u64, kind: u64) -> String {
    let good = format!(
        r#"{{"id": {o}, "name": "n{o}", "inner": {{"score": {o}.5, "tag": "t"}}, "xs": [{{"k": {o}}}, {{"k": null}}], "at": "2026-01-02T03:04:05.000006Z"}}"#
    );
    match kind {
        0 => r#"{"id": 1, "name": "half", "inner": {"score": 2.5, "tag": 7}}"#.to_string(), // a struct field of the wrong type
        1 => format!(r#"{{"name": "n{o}", "xs": [{{"k": 1}}, {{"k": "two"}}], "id": {o}}}"#), // a list item of the wrong type
        2 => format!(r#"{{"id": {o}, "name": "n{o}", "extra": 1}}"#),                         // an unknown field
        3 => format!(r#"{{"id": {o}, "name": "n{o}"#),                                        // cut short
        4 => format!(r#"{{"id": {o}, "name": "\ud800"}}"#),                                   // a lone surrogate
        5 => format!(r#"{{"id": {o}, "at": "2026-01-02 03:04:05+00:00"}}"#), // a form the single pass may leave
        6 => format!(r#"{{"id": {o}, "name": "n{o}", "inner": null, "xs": null}}"#),
        7 => format!(r#"{{"id": {o}, "Name": "near"}}"#), // a near miss
        8 => format!(r#"{{"id": {o}, "id": {o}}}"#),      // a field twice
        9 => format!(r#"{{"id": {o}.0}}"#),               // a fraction for an integer
        _ => good,
    }
}

/// Every row as text, and every error as (offset, field, reason).
fn run(single_pass: bool, fold_case: bool, values: &[String]) -> (Vec<String>, Vec<(i64, String, String)>, usize) {
    let options = Options { metadata_columns: true, single_pass, fold_case, ..Options::default() };
    let buf = JsonBuffer::new(schema(), options).unwrap();
    let offsets: Vec<i64> = (0..values.len() as i64).collect();
    let keys: Vec<Option<Vec<u8>>> = vec![None; values.len()];
    let records = Records {
        topic: "t",
        partition: 1,
        offsets: &offsets,
        timestamps_ms: &offsets,
        keys: &keys,
        values,
        headers: None,
    };
    let errors = buf.append(&records).unwrap().errors;
    let mut rows = Vec::new();
    if let Some(batch) = buf.drain().unwrap() {
        let options = FormatOptions::default();
        let formatters: Vec<ArrayFormatter> =
            batch.columns().iter().map(|c| ArrayFormatter::try_new(c.as_ref(), &options).unwrap()).collect();
        for row in 0..batch.num_rows() {
            rows.push(formatters.iter().map(|f| f.value(row).to_string()).collect::<Vec<_>>().join("|"));
        }
    }
    let errors = errors.into_iter().map(|e| (e.offset, e.field, e.reason)).collect();
    (rows, errors, buf.single_pass_rows())
}

/// A small xorshift, so the mixes are the same at every run.
fn mixes(seed: u64, count: usize, bad_in: u64) -> Vec<String> {
    let mut x = seed;
    (0..count as u64)
        .map(|o| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            value(o, if x.is_multiple_of(bad_in) { (x >> 8) % 10 } else { 10 })
        })
        .collect()
}

#[test]
fn records_the_single_pass_leaves_land_as_the_arrow_json_path_lands_them() {
    for (seed, bad_in) in [(1, 100), (7, 20), (99, 5), (3, 2)] {
        let values = mixes(seed, 600, bad_in);
        for fold_case in [false, true] {
            let (rows, errors, single) = run(true, fold_case, &values);
            let (want_rows, want_errors, none) = run(false, fold_case, &values);
            assert_eq!(none, 0);
            assert_eq!(errors, want_errors, "seed {seed}, one in {bad_in}, fold_case {fold_case}");
            assert_eq!(rows, want_rows, "seed {seed}, one in {bad_in}, fold_case {fold_case}");
            assert!(!errors.is_empty() && !rows.is_empty());
            if bad_in >= 20 {
                assert!(single > rows.len() * 9 / 10, "the single pass kept the chunk: {single} of {}", rows.len());
            }
        }
    }
}

#[test]
fn one_bad_record_keeps_the_rest_of_its_chunk_on_the_single_pass() {
    let mut values: Vec<String> = (0..100).map(|o| value(o, 10)).collect();
    values[40] = value(40, 1);
    let (rows, errors, single) = run(true, false, &values);
    assert_eq!(rows.len(), 99);
    assert_eq!(single, 99, "every other record of the chunk is read by the single pass");
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0].0, errors[0].1.as_str()), (40, "xs.k"));
}

#[test]
fn fields_that_differ_only_in_case_fold_on_the_single_pass() {
    let values = vec![
        r#"{"ID": 1, "Name": "a", "INNER": {"Score": 1.5}, "xs": [{"K": 3}]}"#.to_string(),
        r#"{"id": 2, "Id": 3}"#.to_string(), // two spellings of one column
        r#"{"id": 4, "name": "b"}"#.to_string(),
    ];
    let (rows, errors, single) = run(true, true, &values);
    assert_eq!(single, 2);
    assert_eq!(errors.len(), 1);
    assert!(errors[0].2.contains("both match column 'id'"), "{}", errors[0].2);
    assert_eq!(rows, run(false, true, &values).0);
    let buf =
        JsonBuffer::new(schema(), Options { metadata_columns: true, fold_case: true, ..Options::default() }).unwrap();
    let offsets = [0i64];
    let keys: Vec<Option<Vec<u8>>> = vec![None];
    let records = Records {
        topic: "t",
        partition: 1,
        offsets: &offsets,
        timestamps_ms: &offsets,
        keys: &keys,
        values: &values[..1],
        headers: None,
    };
    assert!(buf.append(&records).unwrap().errors.is_empty());
    let batch = buf.drain().unwrap().unwrap();
    assert_eq!(batch.column(0).as_primitive::<Int64Type>().value(0), 1);
    assert_eq!(batch.column(1).as_string::<i64>().value(0), "a");
}

/// `values` into a buffer of `schema` with `options`: the bad records (offset, field, reason), the
/// rows as text, and how many the single pass read.
fn landed(schema: &SchemaRef, values: &[String], options: Options) -> (Vec<(i64, String, String)>, String, usize) {
    let buf = JsonBuffer::new(schema.clone(), options).unwrap();
    let errors = super::super::tests::append_from_zero(&buf, values)
        .errors
        .into_iter()
        .map(|e| (e.offset, e.field, e.reason))
        .collect();
    let rows = buf.drain().unwrap().map(|b| format!("{:?}", b.columns())).unwrap_or_default();
    (errors, rows, buf.single_pass_rows())
}

/// [`landed`] with `fold_case`.
fn folded(schema: &SchemaRef, values: &[String], single_pass: bool) -> (Vec<(i64, String, String)>, String, usize) {
    landed(schema, values, Options { single_pass, fold_case: true, ..Options::default() })
}

#[test]
fn columns_that_differ_only_in_case_leave_folding_to_the_name_checks() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("a", DataType::Int64, true),
        Field::new("A", DataType::Int64, true),
        Field::new("b", DataType::Utf8, true),
    ]));
    let values: Vec<String> = [
        r#"{"a": 1, "A": 2}"#,
        r#"{"A": 3}"#,
        r#"{"B": "x"}"#,
        r#"{"b": "x", "B": "y"}"#,
        r#"{"A": 4, "a": 5, "b": "z"}"#,
        r#"{"A": 6, "b": "w"}"#,
    ]
    .iter()
    .map(|v| v.to_string())
    .collect();
    let (errors, rows, single) = folded(&schema, &values, true);
    let (want_errors, want_rows, _) = folded(&schema, &values, false);
    assert_eq!((&errors, &rows), (&want_errors, &want_rows));
    assert_eq!(errors.iter().map(|e| e.0).collect::<Vec<_>>(), vec![3]);
    assert_eq!(single, 0, "with two columns that fold alike, validate::fold_keys alone renames fields");
}

#[test]
fn names_fold_through_lists_of_lists_on_both_paths() {
    let inner = DataType::Struct(vec![Field::new("k", DataType::Int64, true)].into());
    let lists =
        DataType::List(Arc::new(Field::new("item", DataType::List(Arc::new(Field::new("item", inner, true))), true)));
    let schema = Arc::new(Schema::new(vec![Field::new("m", lists, true)]));
    let values = vec![r#"{"M": [[{"K": 1}, {"k": 2}], []]}"#.to_string(), r#"{"m": [[{"K": 3, "k": 4}]]}"#.to_string()];
    let (errors, rows, single) = folded(&schema, &values, true);
    let (want_errors, want_rows, _) = folded(&schema, &values, false);
    assert_eq!((&errors, &rows), (&want_errors, &want_rows));
    assert_eq!(errors.len(), 1, "two spellings of k in one struct: {errors:?}");
    assert_eq!(single, 1);
}

/// Records the single pass leaves part-way through nested lists, strings and structs, first,
/// last and back to back: the rows kept are those of the arrow-json path.
#[test]
fn records_left_part_way_through_nested_values_roll_back_whole() {
    let ints = DataType::List(Arc::new(Field::new("item", DataType::Int64, true)));
    let nested = DataType::List(Arc::new(Field::new("item", ints, true)));
    let items = DataType::LargeList(Arc::new(Field::new(
        "item",
        DataType::Struct(vec![Field::new("s", DataType::Utf8, true), Field::new("n", DataType::Int64, true)].into()),
        true,
    )));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("ll", nested, true),
        Field::new("xs", items, true),
        Field::new("t", DataType::Utf8, true),
    ]));
    let bad = [
        r#"{"id": null, "ll": [[1, 2], [3, "x"]], "t": "a"}"#, // inside a list of lists, a null first
        r#"{"id": 2, "xs": [{"s": "long enough text", "n": 1}, {"s": "y", "n": 1.5}]}"#, // inside a struct in a list
        r#"{"id": 3, "t": "text", "xs": [{"s": "z"}], "ll": [[4]], "zz": 1}"#, // everything read, then unknown
    ];
    let good = [
        r#"{"id": 10, "ll": [[5], [], null], "xs": [{"s": "k", "n": 2}], "t": "g"}"#,
        r#"{"id": null, "ll": null, "xs": null, "t": null}"#,
    ];
    // bad first, last, back to back, alone, among good ones
    let mixes: [&[usize]; 5] = [&[0, 3, 4], &[3, 4, 1], &[0, 1, 2, 3], &[2], &[3, 0, 4, 1, 3, 2, 4]];
    for mix in mixes {
        let values: Vec<String> =
            mix.iter().map(|&k| if k < 3 { bad[k].to_string() } else { good[k - 3].to_string() }).collect();
        let run = |single_pass: bool| landed(&schema, &values, Options { single_pass, ..Options::default() });
        let (errors, rows, single) = run(true);
        let (want_errors, want_rows, _) = run(false);
        assert_eq!((&errors, &rows), (&want_errors, &want_rows), "{mix:?}");
        assert_eq!(errors.len(), mix.iter().filter(|&&k| k < 3).count(), "{mix:?}");
        assert_eq!(single, mix.len() - errors.len(), "{mix:?}: the good ones stay on the single pass");
    }
}
