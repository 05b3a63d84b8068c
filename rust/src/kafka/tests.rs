use std::io::Write;
use std::sync::Arc;

use super::*;

/// One record as a test writes it: offset delta, timestamp delta, key, value, headers.
struct Rec<'a> {
    offset_delta: i32,
    timestamp_delta: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: Vec<(&'a str, Option<&'a [u8]>)>,
}

fn rec(offset_delta: i32, value: Option<&[u8]>) -> Rec<'_> {
    Rec { offset_delta, timestamp_delta: i64::from(offset_delta) * 10, key: None, value, headers: vec![] }
}

fn zigzag(v: i64, out: &mut Vec<u8>) {
    let mut n = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn bytes_field(b: Option<&[u8]>, out: &mut Vec<u8>) {
    match b {
        None => zigzag(-1, out),
        Some(b) => {
            zigzag(b.len() as i64, out);
            out.extend_from_slice(b);
        }
    }
}

fn encode_records(records: &[Rec<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        let mut body = vec![0u8];
        zigzag(r.timestamp_delta, &mut body);
        zigzag(i64::from(r.offset_delta), &mut body);
        bytes_field(r.key, &mut body);
        bytes_field(r.value, &mut body);
        zigzag(r.headers.len() as i64, &mut body);
        for (k, v) in &r.headers {
            bytes_field(Some(k.as_bytes()), &mut body);
            bytes_field(*v, &mut body);
        }
        zigzag(body.len() as i64, &mut out);
        out.extend_from_slice(&body);
    }
    out
}

fn compress(codec: Codec, raw: &[u8]) -> Vec<u8> {
    match codec {
        Codec::None => raw.to_vec(),
        Codec::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        }
        Codec::Snappy => {
            // the Java producer's xerial framing, in two blocks
            let mut out = vec![0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1];
            let half = raw.len() / 2;
            for part in [&raw[..half], &raw[half..]] {
                let block = snap::raw::Encoder::new().compress_vec(part).unwrap();
                out.extend_from_slice(&(block.len() as u32).to_be_bytes());
                out.extend_from_slice(&block);
            }
            out
        }
        Codec::Lz4 => {
            let mut e = lz4_flex::frame::FrameEncoder::new(Vec::new());
            e.write_all(raw).unwrap();
            e.finish().unwrap()
        }
        Codec::Zstd => zstd::encode_all(raw, 3).unwrap(),
    }
}

struct Batch<'a> {
    base_offset: i64,
    last_offset_delta: Option<i32>,
    attributes: i16,
    producer_id: i64,
    base_timestamp: i64,
    max_timestamp: i64,
    codec: Codec,
    records: Vec<Rec<'a>>,
}

fn batch(base_offset: i64, records: Vec<Rec<'_>>) -> Batch<'_> {
    Batch {
        base_offset,
        last_offset_delta: None,
        attributes: 0,
        producer_id: -1,
        base_timestamp: 1_700_000_000_000,
        max_timestamp: 1_700_000_009_999,
        codec: Codec::None,
        records,
    }
}

fn encode(b: &Batch<'_>) -> Vec<u8> {
    let raw = encode_records(&b.records);
    let body = compress(b.codec, &raw);
    let codec_bits = match b.codec {
        Codec::None => 0,
        Codec::Gzip => 1,
        Codec::Snappy => 2,
        Codec::Lz4 => 3,
        Codec::Zstd => 4,
    };
    let last = b.last_offset_delta.unwrap_or_else(|| b.records.iter().map(|r| r.offset_delta).max().unwrap_or(0));
    let mut after_crc = Vec::new();
    after_crc.extend_from_slice(&(b.attributes | codec_bits).to_be_bytes());
    after_crc.extend_from_slice(&last.to_be_bytes());
    after_crc.extend_from_slice(&b.base_timestamp.to_be_bytes());
    after_crc.extend_from_slice(&b.max_timestamp.to_be_bytes());
    after_crc.extend_from_slice(&b.producer_id.to_be_bytes());
    after_crc.extend_from_slice(&0i16.to_be_bytes());
    after_crc.extend_from_slice(&0i32.to_be_bytes());
    after_crc.extend_from_slice(&(b.records.len() as i32).to_be_bytes());
    after_crc.extend_from_slice(&body);
    let mut out = Vec::new();
    out.extend_from_slice(&b.base_offset.to_be_bytes());
    out.extend_from_slice(&((4 + 1 + 4 + after_crc.len()) as i32).to_be_bytes());
    out.extend_from_slice(&0i32.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
    out.extend_from_slice(&after_crc);
    out
}

fn control(base_offset: i64, producer_id: i64, kind: i16) -> Vec<u8> {
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&kind.to_be_bytes());
    let value = [0u8, 0, 0, 0, 0, 0];
    let mut b = batch(
        base_offset,
        vec![Rec { offset_delta: 0, timestamp_delta: 0, key: Some(&key), value: Some(&value), headers: vec![] }],
    );
    b.attributes = CONTROL | TRANSACTIONAL;
    b.producer_id = producer_id;
    encode(&b)
}

fn transactional(base_offset: i64, producer_id: i64, values: &[&[u8]]) -> Vec<u8> {
    let mut b = batch(base_offset, values.iter().enumerate().map(|(i, v)| rec(i as i32, Some(v))).collect());
    b.attributes = TRANSACTIONAL;
    b.producer_id = producer_id;
    encode(&b)
}

fn parse(bytes: Vec<u8>, options: &FetchOptions) -> Result<Fetched, FetchError> {
    Fetched::parse(Arc::new(bytes), options)
}

fn opts(fetch_offset: i64) -> FetchOptions {
    FetchOptions { fetch_offset, read_committed: true, aborted: vec![], check_crcs: true }
}

fn values(f: &Fetched) -> Vec<Option<Vec<u8>>> {
    (0..f.len()).map(|i| f.value(i).map(<[u8]>::to_vec)).collect()
}

#[test]
fn plain_batches_give_offsets_timestamps_keys_values_and_headers() {
    let mut data = encode(&batch(
        100,
        vec![
            Rec {
                offset_delta: 0,
                timestamp_delta: 0,
                key: Some(b"k0"),
                value: Some(b"{\"a\":1}"),
                headers: vec![("h", Some(b"x"))],
            },
            Rec {
                offset_delta: 1,
                timestamp_delta: 7,
                key: None,
                value: None,
                headers: vec![("h", None), ("g", Some(b""))],
            },
        ],
    ));
    data.extend(encode(&batch(102, vec![rec(0, Some(b"{}"))])));
    let f = parse(data, &opts(100)).unwrap();
    assert_eq!(f.offsets(), &[100, 101, 102]);
    assert_eq!(f.timestamps_ms(), &[1_700_000_000_000, 1_700_000_000_007, 1_700_000_000_000]);
    assert_eq!(f.key(0), Some(&b"k0"[..]));
    assert_eq!(f.key(1), None);
    assert_eq!(values(&f), vec![Some(b"{\"a\":1}".to_vec()), None, Some(b"{}".to_vec())]);
    assert_eq!(f.headers(0).collect::<Vec<_>>(), vec![(&b"h"[..], Some(&b"x"[..]))]);
    assert_eq!(f.headers(1).collect::<Vec<_>>(), vec![(&b"h"[..], None), (&b"g"[..], Some(&b""[..]))]);
    assert_eq!(f.headers(2).count(), 0);
    assert_eq!(f.next_offset, 103);
    let s = f.summary(0);
    assert_eq!((s.records, s.tombstones, s.value_bytes, s.first_offset, s.last_offset), (3, 1, 9, 100, 102));
    assert_eq!(s.max_timestamp_ms, 1_700_000_000_007);
    assert_eq!(
        (f.tombstone_offsets(0), f.tombstone_offsets(1), f.tombstone_offsets(2)),
        (vec![101], vec![101], vec![])
    );
    assert_eq!(f.tombstone_offsets(9), Vec::<i64>::new());
}

#[test]
fn every_codec_reads_back_the_same_records() {
    let big: Vec<Vec<u8>> =
        (0..500).map(|i| format!("{{\"id\":{i},\"pad\":\"{}\"}}", "x".repeat(i % 50)).into_bytes()).collect();
    for codec in [Codec::None, Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
        let mut b = batch(7, big.iter().enumerate().map(|(i, v)| rec(i as i32, Some(v))).collect());
        b.codec = codec;
        let mut data = encode(&b);
        let mut second = batch(507, vec![rec(0, Some(b"{\"last\":true}"))]);
        second.codec = codec;
        data.extend(encode(&second));
        let f = parse(data, &opts(7)).unwrap_or_else(|e| panic!("{codec:?}: {e}"));
        assert_eq!(f.len(), 501, "{codec:?}");
        assert_eq!(f.offsets()[0], 7);
        assert_eq!(f.offsets()[500], 507);
        for (i, v) in big.iter().enumerate() {
            assert_eq!(f.value(i), Some(v.as_slice()), "{codec:?} record {i}");
        }
        assert_eq!(f.next_offset, 508);
    }
}

#[test]
fn raw_snappy_without_the_xerial_framing_is_read_too() {
    let raw = encode_records(&[rec(0, Some(b"{\"a\":1}")), rec(1, Some(b"{\"a\":2}"))]);
    let mut out = Vec::new();
    codec::decompress(Codec::Snappy, &snap::raw::Encoder::new().compress_vec(&raw).unwrap(), 0, &mut out).unwrap();
    assert_eq!(out, raw);
}

#[test]
fn a_crc_mismatch_refuses_the_fetch_and_says_where() {
    let mut data = encode(&batch(40, vec![rec(0, Some(b"{\"a\":1}"))]));
    let good = data.clone();
    let n = data.len();
    data[n - 3] ^= 0x01; // inside the value
    match parse(data.clone(), &opts(40)) {
        Err(FetchError::Corrupt { base_offset: 40, stored, computed }) => assert_ne!(stored, computed),
        other => panic!("expected a CRC error, got {other:?}"),
    }
    let message = parse(data, &opts(40)).unwrap_err().to_string();
    assert!(message.contains("offset 40") && message.contains("CRC-32C"), "{message}");
    assert_eq!(parse(good, &opts(40)).unwrap().len(), 1);
}

#[test]
fn a_batch_cut_short_at_the_end_is_left_for_the_next_fetch() {
    let mut data = encode(&batch(0, vec![rec(0, Some(b"{}")), rec(1, Some(b"{}"))]));
    let second = encode(&batch(2, vec![rec(0, Some(b"{\"b\":2}"))]));
    data.extend_from_slice(&second[..second.len() - 5]);
    let f = parse(data, &opts(0)).unwrap();
    assert_eq!(f.offsets(), &[0, 1]);
    assert_eq!(f.next_offset, 2);
    assert_eq!(f.stats.truncated_bytes, second.len() - 5);
}

#[test]
fn a_fetch_inside_a_batch_skips_the_records_before_it() {
    let mut b = batch(10, (0..5).map(|i| rec(i, Some(b"{}"))).collect());
    b.codec = Codec::Zstd;
    let f = parse(encode(&b), &opts(13)).unwrap();
    assert_eq!(f.offsets(), &[13, 14]);
    assert_eq!(f.stats.below_fetch_offset, 3);
    assert_eq!(f.next_offset, 15);
}

#[test]
fn compacted_batches_keep_their_gaps_and_the_next_offset_passes_the_whole_batch() {
    // compaction removed offsets 1, 2 and the last two of the batch (its last offset delta stays 5)
    let mut b = batch(20, vec![rec(0, Some(b"{}")), rec(3, Some(b"{}"))]);
    b.last_offset_delta = Some(5);
    let f = parse(encode(&b), &opts(20)).unwrap();
    assert_eq!(f.offsets(), &[20, 23]);
    assert_eq!(f.next_offset, 26);
    // a batch emptied by compaction moves the position too
    let mut empty = batch(30, vec![]);
    empty.last_offset_delta = Some(3);
    let f = parse(encode(&empty), &opts(30)).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.next_offset, 34);
}

#[test]
fn log_append_time_gives_every_record_the_batch_max_timestamp() {
    let mut b = batch(0, vec![rec(0, Some(b"{}")), rec(1, Some(b"{}"))]);
    b.attributes = TIMESTAMP_LOG_APPEND;
    let f = parse(encode(&b), &opts(0)).unwrap();
    assert_eq!(f.timestamps_ms(), &[1_700_000_009_999, 1_700_000_009_999]);
}

#[test]
fn control_batches_are_skipped_and_move_the_position() {
    let mut data = transactional(0, 7, &[b"{\"a\":1}", b"{\"a\":2}"]);
    data.extend(control(2, 7, 1)); // commit marker
    let f = parse(data.clone(), &opts(0)).unwrap();
    assert_eq!(f.offsets(), &[0, 1]);
    assert_eq!(f.next_offset, 3);
    assert_eq!(f.stats.control_batches, 1);
    // a fetch of the marker alone: nothing, and the position passes it
    let marker = control(2, 7, 1);
    let f = parse(marker, &opts(2)).unwrap();
    assert!(f.is_empty());
    assert_eq!(f.next_offset, 3);
    // read_uncommitted skips it as well
    let f = parse(data, &FetchOptions { read_committed: false, ..opts(0) }).unwrap();
    assert_eq!(f.offsets(), &[0, 1]);
}

#[test]
fn aborted_transactions_are_skipped_under_read_committed_only() {
    // producer 7 aborts 0..2 (marker at 2); producer 8 commits 3..4 (marker at 5); then 7 commits 6
    let mut data = transactional(0, 7, &[b"{\"aborted\":1}", b"{\"aborted\":2}"]);
    data.extend(control(2, 7, ABORT_MARKER));
    data.extend(transactional(3, 8, &[b"{\"ok\":1}", b"{\"ok\":2}"]));
    data.extend(control(5, 8, 1));
    data.extend(transactional(6, 7, &[b"{\"ok\":3}"]));
    data.extend(control(7, 7, 1));
    let committed = FetchOptions { aborted: vec![(7, 0)], ..opts(0) };
    let f = parse(data.clone(), &committed).unwrap();
    assert_eq!(f.offsets(), &[3, 4, 6]);
    assert_eq!((f.stats.aborted_batches, f.stats.aborted_records, f.stats.control_batches), (1, 2, 3));
    assert_eq!(f.next_offset, 8);
    let uncommitted = FetchOptions { read_committed: false, ..committed };
    assert_eq!(parse(data, &uncommitted).unwrap().offsets(), &[0, 1, 3, 4, 6]);
}

#[test]
fn an_aborted_transaction_listed_later_than_a_batch_does_not_touch_it() {
    // producer 7 commits 0..1, then aborts 3..4: the response lists the abort from offset 3
    let mut data = transactional(0, 7, &[b"{}", b"{}"]);
    data.extend(control(2, 7, 1));
    data.extend(transactional(3, 7, &[b"{}", b"{}"]));
    data.extend(control(5, 7, ABORT_MARKER));
    let f = parse(data, &FetchOptions { aborted: vec![(7, 3)], ..opts(0) }).unwrap();
    assert_eq!(f.offsets(), &[0, 1]);
    assert_eq!(f.next_offset, 6);
}

#[test]
fn older_message_formats_and_malformed_batches_are_errors() {
    let mut data = encode(&batch(5, vec![rec(0, Some(b"{}"))]));
    data[MAGIC_AT] = 1;
    assert!(matches!(parse(data, &opts(5)), Err(FetchError::Unsupported { base_offset: 5, magic: 1 })));
    // a record length past its batch (CRC off so the structure itself is checked)
    let mut data = encode(&batch(5, vec![rec(0, Some(b"{}"))]));
    data[BATCH_HEADER] = 0x7e;
    let no_crc = FetchOptions { check_crcs: false, ..opts(5) };
    let e = parse(data, &no_crc).unwrap_err();
    assert!(matches!(e, FetchError::Malformed { base_offset: 5, .. }), "{e:?}");
    // compressed bytes that do not decompress
    let mut b = batch(9, vec![rec(0, Some(b"{}"))]);
    b.codec = Codec::Zstd;
    let mut data = encode(&b);
    data[BATCH_HEADER] ^= 0xff; // the zstd frame's magic number
    let e = parse(data, &no_crc).unwrap_err().to_string();
    assert!(e.contains("zstd") && e.contains("offset 9"), "{e}");
}

#[test]
fn summaries_and_indices_count_from_an_offset() {
    let data = encode(&batch(0, vec![rec(0, Some(b"{}")), rec(1, None), rec(2, Some(b"{\"a\":1}"))]));
    let f = parse(data, &opts(0)).unwrap();
    assert_eq!(f.index_of(1), 1);
    assert_eq!(f.index_of(3), 3);
    let s = f.summary(1);
    assert_eq!((s.records, s.tombstones, s.value_bytes, s.first_offset, s.last_offset), (2, 1, 7, 1, 2));
    assert_eq!(f.summary(3), Summary::default());
}
