//! The key at a path of one JSON value, read in one plain pass over its bytes: no value is built,
//! and a field that is not on the path is stepped over by its grammar alone.
//!
//! It answers only where it is sure to answer as serde_json does ([`super::key_at`]'s slow way):
//! a value with an escaped or control character in a string, invalid UTF-8, a fraction or an
//! exponent at the path's end, a number past 64 bits, nesting past 100 levels, or anything after
//! the value, is given back (`None`), and serde_json reads it.

use super::Key;

/// Nesting deeper than this is serde_json's to judge (its own limit is 128).
const MAX_DEPTH: u32 = 100;

/// `Some(key)` as serde_json would find it at `path` in `value`, or `None` when it is not sure.
pub(super) fn key_at(value: &[u8], path: &[String]) -> Option<Key> {
    let mut scan = Scan { s: value, at: 0, depth: 0 };
    scan.ws();
    let key = scan.seek(path)?;
    scan.ws();
    (scan.at == scan.s.len()).then_some(key)
}

/// What a byte inside a string is to [`Scan::string`].
const PLAIN: u8 = 0;
const QUOTE: u8 = 1;
const WIDE: u8 = 2; // part of a multi-byte UTF-8 character: checked once the string ends
const REFUSED: u8 = 3; // a backslash or a control character

const STRING_BYTE: [u8; 256] = {
    let mut table = [PLAIN; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = if b < 0x20 || b == b'\\' as usize {
            REFUSED
        } else if b == b'"' as usize {
            QUOTE
        } else if b >= 0x80 {
            WIDE
        } else {
            PLAIN
        };
        b += 1;
    }
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Whether any of the eight bytes of `word` is not [`PLAIN`] in a string (the classic tests for a
/// zero byte and for a byte below a bound, each exact about whether one exists).
fn stops_string(word: u64) -> bool {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    (zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\'))) | below_space | (word & HIGHS)) != 0
}

struct Scan<'a> {
    s: &'a [u8],
    at: usize,
    depth: u32,
}

impl<'a> Scan<'a> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.s.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    /// The value here, walking down `path`: the scalar at its end as text, None for a null, an
    /// object, an array or a path that is not there.
    fn seek(&mut self, path: &[String]) -> Option<Key> {
        match self.peek()? {
            b'{' => self.object(path),
            b'[' => self.skip().map(|()| None),
            b'"' => {
                let text = self.string()?;
                // SAFETY: string() checked the bytes are UTF-8
                Some(path.is_empty().then(|| unsafe { std::str::from_utf8_unchecked(text) }.to_owned()))
            }
            b't' => self.literal(b"true").map(|()| path.is_empty().then(|| "true".to_owned())),
            b'f' => self.literal(b"false").map(|()| path.is_empty().then(|| "false".to_owned())),
            b'n' => self.literal(b"null").map(|()| None),
            _ => {
                let (text, integer) = self.number()?;
                if !path.is_empty() {
                    return Some(None);
                }
                if !integer {
                    return None; // serde_json's rendering of a double: left to it
                }
                // SAFETY: a number token is ASCII
                let text = unsafe { std::str::from_utf8_unchecked(text) };
                // as serde_json visits it: a u64, or an i64 when negative ("-0" is its double -0.0)
                let shown = match text.strip_prefix('-') {
                    Some("0") => return None,
                    Some(_) => text.parse::<i64>().ok()?.to_string(),
                    None => text.parse::<u64>().ok()?.to_string(),
                };
                Some(Some(shown))
            }
        }
    }

    /// An object (the scanner at its `{`); the first field named `path[0]` is walked down.
    fn object(&mut self, path: &[String]) -> Option<Key> {
        self.enter()?;
        self.at += 1;
        self.ws();
        let mut found: Option<Key> = None;
        if self.peek()? == b'}' {
            self.at += 1;
        } else {
            loop {
                let name = self.string()?;
                self.ws();
                (self.next()? == b':').then_some(())?;
                self.ws();
                match path.split_first() {
                    Some((first, rest)) if found.is_none() && name == first.as_bytes() => {
                        found = Some(self.seek(rest)?)
                    }
                    _ => self.skip()?,
                }
                self.ws();
                match self.next()? {
                    b',' => self.ws(),
                    b'}' => break,
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(found.flatten())
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Any value, checked by its grammar and stepped over.
    fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(&[]).map(drop),
            b'[' => {
                self.enter()?;
                self.at += 1;
                self.ws();
                if self.peek()? == b']' {
                    self.at += 1;
                } else {
                    loop {
                        self.skip()?;
                        self.ws();
                        match self.next()? {
                            b',' => self.ws(),
                            b']' => break,
                            _ => return None,
                        }
                    }
                }
                self.depth -= 1;
                Some(())
            }
            b'"' => self.string().map(drop),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number().map(drop),
        }
    }

    /// A string's bytes (the scanner at its opening quote), when it has no escape and no control
    /// character and is UTF-8.
    ///
    /// One pass over the bytes with a class table: a record's strings are short (names, ids,
    /// codes), where a search for the closing quote and then a check of every byte for controls
    /// and for ASCII took three passes and most of the scan's time.
    fn string(&mut self) -> Option<&'a [u8]> {
        (self.next()? == b'"').then_some(())?;
        let rest = &self.s[self.at..];
        let mut ascii = true;
        let mut end = 0;
        // eight bytes at a time while none is a quote, a backslash, a control or past ASCII
        while let Some(word) = rest[end..].first_chunk::<8>() {
            if stops_string(u64::from_le_bytes(*word)) {
                break;
            }
            end += 8;
        }
        loop {
            let b = *rest.get(end)?;
            match STRING_BYTE[b as usize] {
                PLAIN => {}
                QUOTE => break,
                WIDE => ascii = false,
                _ => return None, // an escape or a control character: serde_json's
            }
            end += 1;
        }
        let body = &rest[..end];
        if !ascii && std::str::from_utf8(body).is_err() {
            return None;
        }
        self.at += end + 1;
        Some(body)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        (self.s.get(self.at..self.at + word.len())? == word).then_some(())?;
        self.at += word.len();
        Some(())
    }

    /// A number token checked against JSON's grammar, and whether it is a plain integer.
    fn number(&mut self) -> Option<(&'a [u8], bool)> {
        let (s, start) = (self.s, self.at);
        let mut i = start;
        let digits = |i: &mut usize| {
            let from = *i;
            while s.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i > from
        };
        if s.get(i) == Some(&b'-') {
            i += 1;
        }
        match s.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                digits(&mut i);
            }
            _ => return None,
        }
        let mut integer = true;
        if s.get(i) == Some(&b'.') {
            integer = false;
            i += 1;
            digits(&mut i).then_some(())?;
        }
        if let Some(b'e' | b'E') = s.get(i) {
            integer = false;
            i += 1;
            if let Some(b'+' | b'-') = s.get(i) {
                i += 1;
            }
            digits(&mut i).then_some(())?;
        }
        if s.get(i).is_some_and(u8::is_ascii_digit) {
            return None; // "01": serde_json says why
        }
        self.at = i;
        Some((&s[start..i], integer))
    }
}

#[cfg(test)]
mod tests {
    use super::super::slow_key_at;
    use super::*;

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    const VALUES: [&str; 18] = [
        r#"{"x": 1e400, "c": "after a double past f64", "y": -1e-400}"#,
        r#"{"x": 123456789012345678901234567890, "c": "z", "a": {"b": "\ud800"}}"#,
        r#"{"a": {"b": "x", "n": 12, "f": 1.5, "t": true, "z": null, "o": {"p": 1}, "l": [1, {"b": 2}]}, "c": "top"}"#,
        r#" {"c": -0, "a": {"b": -12, "b": "second"}, "c": "again"} "#,
        r#"{"c": 18446744073709551615, "a": {"b": 99999999999999999999}}"#,
        r#"{"c": "café", "a": {"b": "ü"}, "x": [[], {}, [{}]], "y": 1e5}"#,
        r#"{"c": "a\"b", "a": {"b": "\u00e9"}}"#,
        r#"{"c": 1, "a": {"b": 2.50}}"#,
        r#"{"c": 01}"#,
        r#"{"c": 1,}"#,
        r#"{"c": 1} x"#,
        r#"{"c": tru}"#,
        r#"{"c": truex}"#,
        r#"[{"c": 1}]"#,
        r#""c""#,
        r#"{"c": [1, 2,]}"#,
        r#"{"a": {"b": {"c": {"d": 1}}}, "c": {"a": 1}}"#,
        r#"{"c": "line
break"}"#,
    ];

    /// Wherever the one pass answers, it answers as serde_json does, on the values above and on
    /// every one of them with a byte taken out or put in.
    #[test]
    fn the_one_pass_answers_as_serde_json_or_not_at_all() {
        let paths = [path("c"), path("a.b"), path("a"), path("a.l"), path("x.y"), path("a.b.c.d")];
        let mut values: Vec<Vec<u8>> = VALUES.iter().map(|v| v.as_bytes().to_vec()).collect();
        for v in VALUES {
            let v = v.as_bytes();
            for i in 0..v.len() {
                let mut cut = v.to_vec();
                cut.remove(i);
                values.push(cut);
                for b in [b'"', b'{', b'}', b',', b'\\', b'1', b' ', 0x01, 0xff] {
                    let mut put = v.to_vec();
                    put.insert(i, b);
                    values.push(put);
                }
            }
        }
        let mut answered = 0;
        for v in &values {
            for p in &paths {
                if let Some(key) = key_at(v, p) {
                    answered += 1;
                    assert_eq!(key, slow_key_at(v, p), "{:?} at {p:?}", String::from_utf8_lossy(v));
                }
            }
        }
        assert!(answered > values.len(), "the one pass answered {answered} times");
    }

    /// Strings long enough for the eight-byte steps, with a byte that ends or refuses the plain
    /// run at every place: a quote, a backslash, controls, the edges of ASCII, UTF-8 both whole
    /// and cut; the one pass answers as serde_json does wherever it answers.
    #[test]
    fn every_byte_class_at_every_place_of_a_long_string_reads_as_serde_json() {
        let specials: [&[u8]; 10] =
            [b"\"", b"\\", b"\\n", &[0x00], &[0x1f], &[0x20], &[0x7f], "é".as_bytes(), &[0xc3], &[0xff]];
        let paths = [path("c"), path("d")];
        let mut answered = 0;
        for len in 0..26 {
            for at in 0..=len {
                for special in specials {
                    let mut text = vec![b'a'; len];
                    text.splice(at..at, special.iter().copied());
                    let mut v = br#"{"c": ""#.to_vec();
                    v.extend_from_slice(&text);
                    v.extend_from_slice(br#"", "d": "after"}"#);
                    for p in &paths {
                        if let Some(key) = key_at(&v, p) {
                            answered += 1;
                            assert_eq!(key, slow_key_at(&v, p), "{:?} at {p:?}", String::from_utf8_lossy(&v));
                        }
                    }
                }
            }
        }
        assert!(answered > 1000, "the one pass answered {answered} times");
    }

    #[test]
    fn plain_values_are_answered_in_one_pass() {
        let v = br#"{"a": {"b": "x", "n": -7, "t": false}, "c": "top", "l": [1.5, "s", null]}"#;
        assert_eq!(key_at(v, &path("c")), Some(Some("top".into())));
        assert_eq!(key_at(v, &path("a.n")), Some(Some("-7".into())));
        assert_eq!(key_at(v, &path("a.t")), Some(Some("false".into())));
        assert_eq!(key_at(v, &path("l")), Some(None));
        assert_eq!(key_at(v, &path("missing")), Some(None));
        assert_eq!(key_at(br#"{"c": "a\"b"}"#, &path("c")), None, "an escape is serde_json's");
        assert_eq!(key_at(br#"{"c": 1.5}"#, &path("c")), None, "a double's text is serde_json's");
    }
}
