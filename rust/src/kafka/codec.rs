//! The codecs a producer may compress a record batch's records with (the batch attributes' low
//! three bits): none, gzip, snappy, lz4 and zstd.

use std::io::Read;

/// A batch's compression codec, from its attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    pub fn from_attributes(attributes: i16) -> Result<Self, String> {
        match attributes & 0x07 {
            0 => Ok(Codec::None),
            1 => Ok(Codec::Gzip),
            2 => Ok(Codec::Snappy),
            3 => Ok(Codec::Lz4),
            4 => Ok(Codec::Zstd),
            other => Err(format!("unknown compression codec {other} in the batch attributes")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }
}

/// The xerial snappy-java stream header the Java producer writes: magic, version 1, compatible 1.
const XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER: usize = 16;

/// Decompresses a batch's records into `out` (cleared first). `hint` is the expected size, when
/// known, to size the output once.
pub fn decompress(codec: Codec, input: &[u8], hint: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.reserve(hint);
    let done = match codec {
        Codec::None => {
            out.extend_from_slice(input);
            Ok(())
        }
        // Java's GZIPOutputStream writes one member; several (concatenated streams) are read whole
        Codec::Gzip => flate2::read::MultiGzDecoder::new(input).read_to_end(out).map(drop).map_err(|e| e.to_string()),
        Codec::Snappy => snappy(input, out),
        Codec::Lz4 => lz4_flex::frame::FrameDecoder::new(input).read_to_end(out).map(drop).map_err(|e| e.to_string()),
        Codec::Zstd => zstd::stream::read::Decoder::with_buffer(input)
            .and_then(|mut d| d.read_to_end(out))
            .map(drop)
            .map_err(|e| e.to_string()),
    };
    done.map_err(|e| format!("the {} data does not decompress: {e}", codec.name()))
}

/// Snappy as Kafka clients write it: the Java producer's xerial framing (a 16-byte header, then
/// blocks of a big-endian length and a raw snappy block), or one raw snappy block (librdkafka).
fn snappy(input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    let mut raw = snap::raw::Decoder::new();
    if input.len() < XERIAL_HEADER || input[..8] != XERIAL_MAGIC {
        let n = snap::raw::decompress_len(input).map_err(|e| e.to_string())?;
        let start = out.len();
        out.resize(start + n, 0);
        raw.decompress(input, &mut out[start..]).map_err(|e| e.to_string())?;
        return Ok(());
    }
    let mut rest = &input[XERIAL_HEADER..];
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err("a xerial block length is cut short".into());
        }
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let block = rest.get(4..4 + len).ok_or("a xerial block is cut short")?;
        let n = snap::raw::decompress_len(block).map_err(|e| e.to_string())?;
        let start = out.len();
        out.resize(start + n, 0);
        raw.decompress(block, &mut out[start..]).map_err(|e| e.to_string())?;
        rest = &rest[4 + len..];
    }
    Ok(())
}
