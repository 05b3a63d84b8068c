//! A table's declarative transforms (rename, drop, flatten, cast, filter), applied in order to
//! each JSON value before it is decoded. Pure: one value in, its transformed JSON text out, or
//! "filtered" (the record lands nowhere, counted), or a bad record naming the field and why.
//!
//! Only the objects a step's path walks through are parsed; every other value keeps its bytes as
//! sent (a number's digits, a string's escapes), so a transform never changes a value it does not
//! name. Paths are dotted (`meta.user.id`); a field name with a dot cannot be named.

use std::borrow::Cow;

use regex::Regex;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// What a cast makes of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CastTo {
    String,
    Long,
    Double,
    Boolean,
}

#[derive(Debug)]
pub enum Step {
    /// The field at `from` moves to `to` (its parent object must exist).
    Rename { from: Vec<String>, to: Vec<String> },
    /// The field leaves the value.
    Drop { path: Vec<String> },
    /// An object field's members become fields of its parent, each named `field{separator}member`.
    Flatten { path: Vec<String>, separator: String },
    /// The field's value as another JSON type, exactly or not at all.
    Cast { path: Vec<String>, to: CastTo },
    /// The record is kept only when the field's text fully matches `pattern` (or only when it
    /// does not, `keep` false); a missing or null field matches nothing.
    Filter { path: Vec<String>, pattern: Regex, keep: bool },
}

/// What one value became.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Json(Vec<u8>),
    Filtered,
    Bad { field: String, reason: String },
}

#[derive(Debug)]
pub struct Transforms {
    steps: Vec<Step>,
}

type Fail = (String, String);

/// A value being transformed: the objects a path walked through, parsed; everything else as sent
/// (borrowed from the value: only a cast's result is new text).
enum Node<'a> {
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
    Raw(Cow<'a, RawValue>),
}

/// An object's members in order, each value unparsed and borrowed; and a name sent twice, if any
/// (the record is bad: neither value is chosen over the other).
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>, Option<String>);

/// A member's name: borrowed unless it has escapes.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(v.to_string())))
            }
        }
        deserializer.deserialize_str(Text)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out: Vec<(Cow<'de, str>, &'de RawValue)> = Vec::with_capacity(map.size_hint().unwrap_or(16));
                let mut twice = None;
                while let Some((Name(name), value)) = map.next_entry::<Name<'de>, &'de RawValue>()? {
                    if twice.is_none() && out.iter().any(|(k, _)| *k == name) {
                        twice = Some(name.to_string());
                    }
                    out.push((name, value));
                }
                Ok(Members(out, twice))
            }
        }
        deserializer.deserialize_map(Each)
    }
}

impl<'a> Members<'a> {
    /// The object, or the record's error for a name it has twice (`at`: the object's path).
    fn into_node(self, at: &[String]) -> Result<Node<'a>, Fail> {
        if let Some(name) = self.1 {
            let field = if at.is_empty() { name } else { format!("{}.{name}", dotted(at)) };
            return Err((field, "appears twice in one object: neither value is chosen over the other".into()));
        }
        Ok(Node::Object(self.0.into_iter().map(|(k, v)| (k, Node::Raw(Cow::Borrowed(v)))).collect()))
    }
}

fn dotted(path: &[String]) -> String {
    path.join(".")
}

/// A cast's result as a node; an error for text that is not JSON (none is made, but a record must
/// never stop the pipeline).
fn raw(text: String, at: &[String]) -> Result<Node<'static>, Fail> {
    RawValue::from_string(text)
        .map(|v| Node::Raw(Cow::Owned(v)))
        .map_err(|e| (dotted(at), format!("cannot be written as JSON after the cast: {e}")))
}

type Fields<'a> = Vec<(Cow<'a, str>, Node<'a>)>;

impl<'a> Node<'a> {
    /// The members of this node when it is an object (parsed on first use); None for null;
    /// an error naming `at` for any other value.
    fn members(&mut self, at: &[String]) -> Result<Option<&mut Fields<'a>>, Fail> {
        if let Node::Raw(text) = self {
            let t = text.get().trim_start();
            if t.starts_with("null") {
                return Ok(None);
            }
            if !t.starts_with('{') {
                return Err((
                    dotted(at),
                    format!("is {}, not an object: the transforms' paths walk through it", kind(t)),
                ));
            }
            let Cow::Borrowed(borrowed) = text else {
                unreachable!("only a cast makes new text, and never an object");
            };
            let members: Members<'a> = serde_json::from_str(borrowed.get()).map_err(|e| (dotted(at), e.to_string()))?;
            *self = members.into_node(at)?;
        }
        match self {
            Node::Object(members) => Ok(Some(members)),
            Node::Raw(_) => unreachable!("parsed above"),
        }
    }

    /// The members of the object holding `path`'s last field; None when a parent is missing or null.
    fn parent(&mut self, path: &[String]) -> Result<Option<&mut Fields<'a>>, Fail> {
        let mut node = self;
        for (depth, name) in path[..path.len() - 1].iter().enumerate() {
            let Some(members) = node.members(&path[..depth])? else { return Ok(None) };
            match members.iter_mut().find(|(k, _)| k == name) {
                Some((_, child)) => node = child,
                None => return Ok(None),
            }
        }
        node.members(&path[..path.len() - 1])
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Node::Raw(text) => out.extend_from_slice(text.get().as_bytes()),
            Node::Object(members) => {
                out.push(b'{');
                for (i, (name, value)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, name).expect("a string serializes");
                    out.push(b':');
                    value.write(out);
                }
                out.push(b'}');
            }
        }
    }
}

/// What a JSON text is, for a reason.
fn kind(text: &str) -> &'static str {
    match text.trim_start().as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// A JSON number with no fraction or exponent: `-?[0-9]+`.
fn integer(text: &str) -> bool {
    let digits = text.strip_prefix('-').unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn cast(text: &str, to: CastTo) -> Result<Option<String>, String> {
    let text = text.trim();
    let is = kind(text);
    if is == "null" {
        return Ok(None);
    }
    let content = || serde_json::from_str::<String>(text).map_err(|e| e.to_string());
    match (to, is) {
        (CastTo::String, "a string") | (CastTo::Double, "a number") | (CastTo::Boolean, "a boolean") => Ok(None),
        (CastTo::String, "a boolean") => Ok(Some(format!("\"{text}\""))),
        (CastTo::String, "a number") if integer(text) => Ok(Some(format!("\"{text}\""))),
        (CastTo::String, "a number") => Err(format!(
            "{text} is not an integer: cast to string keeps integers digit for digit only (send it as a string, \
             or cast it to double)"
        )),
        (CastTo::Long, "a number") | (CastTo::Long, "a string") => {
            let digits = if is == "a string" { content()? } else { text.to_string() };
            match digits.parse::<i64>() {
                // written as JSON writes the number ("007" as 7)
                Ok(n) if integer(&digits) => Ok((is == "a string").then(|| n.to_string())),
                _ => Err(format!("{text} is not a whole number a long holds (-2^63 to 2^63-1)")),
            }
        }
        (CastTo::Double, "a string") => {
            let number = content()?;
            match serde_json::from_str::<serde_json::Number>(&number) {
                Ok(n) if n.as_f64().is_some_and(f64::is_finite) && number.trim() == number => Ok(Some(number)),
                _ => Err(format!("{text} is not a number (JSON's form: 12, -0.5, 1e3)")),
            }
        }
        (CastTo::Boolean, "a string") => match content()?.as_str() {
            b @ ("true" | "false") => Ok(Some(b.to_string())),
            _ => Err(format!("{text} is not \"true\" or \"false\"")),
        },
        (to, is) => Err(format!("is {is}, which cannot be cast to {}", to.name())),
    }
}

impl CastTo {
    fn name(self) -> &'static str {
        match self {
            CastTo::String => "string",
            CastTo::Long => "long",
            CastTo::Double => "double",
            CastTo::Boolean => "boolean",
        }
    }
}

impl Step {
    /// Applies this step to `root`; false when the record is filtered out.
    fn apply(&self, root: &mut Node<'_>) -> Result<bool, Fail> {
        match self {
            Step::Drop { path } => {
                if let Some(members) = root.parent(path)? {
                    members.retain(|(k, _)| k != path.last().unwrap());
                }
            }
            Step::Rename { from, to } => {
                let Some(members) = root.parent(from)? else { return Ok(true) };
                let Some(at) = members.iter().position(|(k, _)| k == from.last().unwrap()) else { return Ok(true) };
                let (_, value) = members.remove(at);
                let Some(target) = root.parent(to)? else {
                    return Err((dotted(to), format!("has no parent object to move {} into", dotted(from))));
                };
                let name = to.last().unwrap();
                if target.iter().any(|(k, _)| k == name) {
                    return Err((
                        dotted(to),
                        format!(
                            "is there already, and {} would be renamed to it: one of them would be lost",
                            dotted(from)
                        ),
                    ));
                }
                target.push((name.clone().into(), value));
            }
            Step::Flatten { path, separator } => {
                let Some(members) = root.parent(path)? else { return Ok(true) };
                let name = path.last().unwrap();
                let Some(at) = members.iter().position(|(k, _)| k == name) else { return Ok(true) };
                let (_, mut value) = members.remove(at);
                let inner = match value.members(path)? {
                    Some(inner) => std::mem::take(inner),
                    None => Vec::new(), // null: no fields
                };
                for (member, v) in inner {
                    let flat = format!("{name}{separator}{member}");
                    if members.iter().any(|(k, _)| *k == flat) {
                        return Err((dotted(path), format!("flattens to {flat}, which the record already has")));
                    }
                    members.push((flat.into(), v));
                }
            }
            Step::Cast { path, to } => {
                let Some(members) = root.parent(path)? else { return Ok(true) };
                if let Some((_, value)) = members.iter_mut().find(|(k, _)| k == path.last().unwrap()) {
                    let Node::Raw(text) = value else {
                        return Err((dotted(path), format!("is an object, which cannot be cast to {}", to.name())));
                    };
                    if let Some(made) = cast(text.get(), *to).map_err(|reason| (dotted(path), reason))? {
                        *value = raw(made, path)?;
                    }
                }
            }
            Step::Filter { path, pattern, keep } => {
                let found = match root.parent(path)? {
                    Some(members) => members.iter_mut().find(|(k, _)| k == path.last().unwrap()).map(|(_, v)| v),
                    None => None,
                };
                let text = match found {
                    None => None,
                    Some(Node::Object(_)) => {
                        return Err((dotted(path), "is an object: a filter compares text, numbers and booleans".into()))
                    }
                    Some(Node::Raw(raw)) => match kind(raw.get()) {
                        "null" => None,
                        "a string" => {
                            Some(serde_json::from_str::<String>(raw.get()).map_err(|e| (dotted(path), e.to_string()))?)
                        }
                        "a number" | "a boolean" => Some(raw.get().trim().to_string()),
                        is => {
                            return Err((
                                dotted(path),
                                format!("is {is}: a filter compares text, numbers and booleans"),
                            ))
                        }
                    },
                };
                let matched = text.is_some_and(|t| pattern.is_match(&t));
                return Ok(matched == *keep);
            }
        }
        Ok(true)
    }
}

impl Transforms {
    /// The steps of a spec: a JSON list of objects, each `{"op": "rename"|"drop"|"flatten"|"cast"|
    /// "filter", "field": "dotted.path", ...}` with `to` (rename: a dotted path; cast: `string`,
    /// `long`, `double`, `boolean`), `separator` (flatten), `matches` and `keep` (filter).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let steps: Vec<Value> = serde_json::from_str(spec).map_err(|e| format!("transforms: {e}"))?;
        let steps = steps.iter().enumerate().map(|(i, s)| step(s).map_err(|e| format!("transforms[{i}]: {e}")));
        Ok(Self { steps: steps.collect::<Result<_, _>>()? })
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// `value` transformed.
    pub fn apply(&self, value: &[u8]) -> Outcome {
        let bad = |(field, reason): Fail| Outcome::Bad { field, reason };
        let text = match std::str::from_utf8(value) {
            Ok(text) => text,
            Err(e) => return bad((String::new(), format!("the value is not UTF-8 text: {e}"))),
        };
        if !text.trim_start().starts_with('{') {
            return bad((String::new(), "the value is not a JSON object: transforms read its fields".into()));
        }
        let mut root = match serde_json::from_str::<Members<'_>>(text) {
            Ok(members) => match members.into_node(&[]) {
                Ok(root) => root,
                Err(fail) => return bad(fail),
            },
            Err(e) => return bad((String::new(), format!("the value is not valid JSON: {e}"))),
        };
        for step in &self.steps {
            match step.apply(&mut root) {
                Ok(true) => {}
                Ok(false) => return Outcome::Filtered,
                Err(fail) => return bad(fail),
            }
        }
        let mut out = Vec::with_capacity(value.len());
        root.write(&mut out);
        Outcome::Json(out)
    }
}

fn path(text: &str) -> Result<Vec<String>, String> {
    let parts: Vec<String> = text.split('.').map(str::to_string).collect();
    if parts.iter().any(String::is_empty) {
        return Err(format!("{text:?} is not a dotted path of field names"));
    }
    Ok(parts)
}

fn step(spec: &Value) -> Result<Step, String> {
    let text = |key: &str| spec.get(key).and_then(Value::as_str).ok_or_else(|| format!("needs {key:?} (text)"));
    let field = path(text("field")?)?;
    match text("op")? {
        "rename" => Ok(Step::Rename { from: field, to: path(text("to")?)? }),
        "drop" => Ok(Step::Drop { path: field }),
        "flatten" => Ok(Step::Flatten { path: field, separator: text("separator").unwrap_or("_").to_string() }),
        "cast" => {
            let to = match text("to")? {
                "string" => CastTo::String,
                "long" => CastTo::Long,
                "double" => CastTo::Double,
                "boolean" => CastTo::Boolean,
                other => return Err(format!("cannot cast to {other:?}: string, long, double or boolean")),
            };
            Ok(Step::Cast { path: field, to })
        }
        "filter" => {
            let matches = text("matches")?;
            let pattern = Regex::new(&format!("^(?:{matches})$")).map_err(|e| format!("matches: {e}"))?;
            Ok(Step::Filter { path: field, pattern, keep: spec.get("keep").and_then(Value::as_bool).unwrap_or(true) })
        }
        other => Err(format!("unknown op {other:?}: rename, drop, flatten, cast or filter")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(spec: &str, value: &str) -> Result<String, String> {
        match Transforms::parse(spec).unwrap().apply(value.as_bytes()) {
            Outcome::Json(out) => Ok(String::from_utf8(out).unwrap()),
            Outcome::Filtered => Err("filtered".into()),
            Outcome::Bad { field, reason } => Err(format!("{field}: {reason}")),
        }
    }

    #[test]
    fn renames_drops_and_flattens_keeping_every_other_value_as_sent() {
        let spec = r#"[{"op": "rename", "field": "usr.name", "to": "user_name"},
                       {"op": "drop", "field": "debug"}, {"op": "flatten", "field": "meta"}]"#;
        let value = r#"{"id": 12345678901234567890123, "usr": {"name": "a\u00e9", "x": 1.50},
                        "debug": [1, {"a": 2}], "meta": {"at": "2026-01-01", "n": 1e3}}"#;
        assert_eq!(
            run(spec, value).unwrap(),
            r#"{"id":12345678901234567890123,"usr":{"x":1.50},"user_name":"a\u00e9","meta_at":"2026-01-01","meta_n":1e3}"#
        );
        assert_eq!(run(spec, r#"{"id": 1, "meta": null}"#).unwrap(), r#"{"id":1}"#);
        // null and absent: nothing
    }

    #[test]
    fn a_step_its_record_does_not_fit_makes_a_bad_record_naming_the_field() {
        let rename = r#"[{"op": "rename", "field": "a", "to": "b"}]"#;
        assert!(run(rename, r#"{"a": 1, "b": 2}"#).unwrap_err().starts_with("b: is there already"));
        let flatten = r#"[{"op": "flatten", "field": "m"}]"#;
        assert_eq!(
            run(flatten, r#"{"m": [1]}"#).unwrap_err(),
            "m: is an array, not an object: the transforms' paths walk through it"
        );
        assert!(run(flatten, r#"{"m": {"x": 1}, "m_x": 2}"#).unwrap_err().starts_with("m: flattens to m_x"));
        let deep = r#"[{"op": "drop", "field": "a.b.c"}]"#;
        assert!(run(deep, r#"{"a": {"b": "text"}}"#).unwrap_err().starts_with("a.b: is a string, not an object"));
        assert!(run(deep, "[1]").unwrap_err().starts_with(": the value is not a JSON object"));
        assert!(run(deep, "{\"a\": ").unwrap_err().starts_with(": the value is not valid JSON"));
    }

    #[test]
    fn casts_are_exact_or_make_a_bad_record() {
        let to = |t: &str, v: &str| {
            run(&format!(r#"[{{"op": "cast", "field": "v", "to": "{t}"}}]"#), &format!(r#"{{"v": {v}}}"#))
        };
        assert_eq!(to("long", r#""-42""#).unwrap(), r#"{"v":-42}"#);
        assert_eq!(to("long", "42").unwrap(), r#"{"v":42}"#);
        assert!(to("long", r#""42.0""#).unwrap_err().contains("is not a whole number"));
        assert_eq!(to("long", r#""007""#).unwrap(), r#"{"v":7}"#);
        assert_eq!(to("long", r#""-00""#).unwrap(), r#"{"v":0}"#);
        assert!(to("long", r#""9223372036854775808""#).unwrap_err().contains("is not a whole number"));
        assert!(to("long", "4.2e1").is_err());
        assert_eq!(
            to("double", r#""0.1000000000000000055511151231257827""#).unwrap(),
            r#"{"v":0.1000000000000000055511151231257827}"#
        );
        assert!(to("double", r#""NaN""#).is_err() && to("double", r#"" 1""#).is_err());
        assert_eq!(to("string", "12345678901234567890123").unwrap(), r#"{"v":"12345678901234567890123"}"#);
        assert!(to("string", "1.50").unwrap_err().contains("is not an integer"));
        assert_eq!(to("string", "true").unwrap(), r#"{"v":"true"}"#);
        assert_eq!(to("boolean", r#""false""#).unwrap(), r#"{"v":false}"#);
        assert!(to("boolean", r#""yes""#).is_err() && to("boolean", "1").is_err());
        assert_eq!(to("long", "null").unwrap(), r#"{"v":null}"#);
        assert!(to("double", "[1]").unwrap_err().contains("is an array, which cannot be cast to double"));
    }

    #[test]
    fn a_name_sent_twice_in_an_object_a_step_walks_is_a_bad_record() {
        let rename = r#"[{"op": "rename", "field": "m.a", "to": "b"}]"#;
        assert_eq!(
            run(rename, r#"{"a": 1, "a": 2}"#).unwrap_err(),
            "a: appears twice in one object: neither value is chosen over the other"
        );
        assert!(run(rename, r#"{"m": {"a": "x", "a": "y"}}"#).unwrap_err().starts_with("m.a: appears twice"));
        let filter = r#"[{"op": "filter", "field": "kind", "matches": "keep"}]"#;
        assert!(run(filter, r#"{"kind": "skip", "kind": "keep"}"#).unwrap_err().starts_with("kind: appears twice"));
    }

    #[test]
    fn filters_keep_or_leave_out_by_a_full_match_of_the_field_s_text() {
        let keep = r#"[{"op": "filter", "field": "e.kind", "matches": "click|view"}]"#;
        assert!(run(keep, r#"{"e": {"kind": "click"}}"#).is_ok());
        assert_eq!(run(keep, r#"{"e": {"kind": "clicked"}}"#).unwrap_err(), "filtered");
        assert_eq!(run(keep, r#"{"e": {}}"#).unwrap_err(), "filtered");
        assert_eq!(run(keep, r#"{"e": null}"#).unwrap_err(), "filtered");
        assert!(run(keep, r#"{"e": {"kind": ["click"]}}"#).unwrap_err().starts_with("e.kind: is an array"));
        let out = r#"[{"op": "filter", "field": "n", "matches": "1|true", "keep": false}]"#;
        assert_eq!(run(out, r#"{"n": 1}"#).unwrap_err(), "filtered");
        assert!(run(out, r#"{"n": 2}"#).is_ok() && run(out, r#"{}"#).is_ok());
    }

    #[test]
    fn a_spec_that_cannot_be_read_says_which_step_and_why() {
        assert_eq!(
            Transforms::parse(r#"[{"op": "drop", "field": "a"}, {"op": "cast", "field": "b", "to": "int"}]"#)
                .unwrap_err(),
            "transforms[1]: cannot cast to \"int\": string, long, double or boolean"
        );
        assert!(Transforms::parse(r#"[{"op": "drop", "field": "a..b"}]"#).unwrap_err().contains("not a dotted path"));
        assert!(Transforms::parse(r#"[{"op": "filter", "field": "a", "matches": "("}]"#).is_err());
    }
}
