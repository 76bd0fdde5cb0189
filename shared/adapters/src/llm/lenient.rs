//! Lenient deserializers for provider responses: one visitor, told per field what each JSON shape means, so a field of an unexpected shape reads as absent instead of failing the whole response.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_json::Value;

/// A JSON scalar as the visitor received it.
#[derive(Clone, Copy)]
enum Scalar<'a> {
    Str(&'a str),
    U64(u64),
    I64(i64),
    F64(f64),
    Bool(bool),
}

impl<'a> Scalar<'a> {
    fn unexpected(self) -> Unexpected<'a> {
        match self {
            Self::Str(v) => Unexpected::Str(v),
            Self::U64(v) => Unexpected::Unsigned(v),
            Self::I64(v) => Unexpected::Signed(v),
            Self::F64(v) => Unexpected::Float(v),
            Self::Bool(v) => Unexpected::Bool(v),
        }
    }
}

/// What a lenient field makes of each JSON shape. `null` is always absent;
/// objects and arrays are drained and absent unless the field reads them.
trait Lenient: Sized {
    /// What the field holds, for the error of a rejected scalar.
    const EXPECTING: &'static str;

    /// `Ok(None)`: treated as absent; `Err(())`: a shape the field rejects.
    fn scalar(v: Scalar<'_>) -> Result<Option<Self>, ()>;

    fn seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

struct LenientVisitor<T>(PhantomData<T>);

impl<T: Lenient> LenientVisitor<T> {
    fn scalar<E: de::Error>(&self, v: Scalar<'_>) -> Result<Option<T>, E> {
        T::scalar(v).map_err(|()| E::invalid_type(v.unexpected(), self))
    }
}

impl<'de, T: Lenient> Visitor<'de> for LenientVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(T::EXPECTING)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        self.scalar(Scalar::Str(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        self.scalar(Scalar::U64(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.scalar(Scalar::I64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        self.scalar(Scalar::F64(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        self.scalar(Scalar::Bool(v))
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        T::seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::map(map)
    }
}

fn lenient<'de, T: Lenient, D: Deserializer<'de>>(d: D) -> Result<Option<T>, D::Error> {
    d.deserialize_any(LenientVisitor::<T>(PhantomData))
}

/// A string, number or bool as text.
impl Lenient for String {
    const EXPECTING: &'static str = "a string";
    fn scalar(v: Scalar<'_>) -> Result<Option<Self>, ()> {
        Ok(Some(match v {
            Scalar::Str(s) => s.to_owned(),
            Scalar::U64(n) => n.to_string(),
            Scalar::I64(n) => n.to_string(),
            Scalar::F64(n) => n.to_string(),
            Scalar::Bool(b) => b.to_string(),
        }))
    }
}

/// A non-negative integer, also from a float or a numeric string.
impl Lenient for u64 {
    const EXPECTING: &'static str = "a token count";
    fn scalar(v: Scalar<'_>) -> Result<Option<Self>, ()> {
        Ok(match v {
            Scalar::Str(s) => s.trim().parse().ok(),
            Scalar::U64(n) => Some(n),
            Scalar::I64(n) => u64::try_from(n).ok(),
            Scalar::F64(n) => (n.is_finite() && n >= 0.0).then(|| n.round() as u64),
            Scalar::Bool(_) => None,
        })
    }
}

/// Message content: a string, or an array of parts whose `text`s are joined; numbers and bools are rejected.
struct ContentText(String);

impl Lenient for ContentText {
    const EXPECTING: &'static str = "message content";
    fn scalar(v: Scalar<'_>) -> Result<Option<Self>, ()> {
        match v {
            Scalar::Str(s) => Ok(Some(Self(s.to_owned()))),
            _ => Err(()),
        }
    }
    fn seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        #[derive(Deserialize)]
        struct Part {
            #[serde(default, deserialize_with = "opt_string")]
            text: Option<String>,
        }
        let mut out = String::new();
        while let Some(part) = seq.next_element::<Value>()? {
            let text = match part {
                Value::String(s) => Some(s),
                other => Part::deserialize(other).ok().and_then(|p| p.text),
            };
            if let Some(t) = text {
                out.push_str(&t);
            }
        }
        Ok(Some(Self(out)))
    }
}

/// Tool arguments: the JSON text as sent, or any other JSON value (Ollama sends an object) re-serialised.
struct ArgumentsText(String);

impl Lenient for ArgumentsText {
    const EXPECTING: &'static str = "tool arguments";
    fn scalar(v: Scalar<'_>) -> Result<Option<Self>, ()> {
        let json = match v {
            Scalar::Str(s) => return Ok(Some(Self(s.to_owned()))),
            Scalar::U64(n) => Value::from(n),
            Scalar::I64(n) => Value::from(n),
            Scalar::F64(n) => Value::from(n),
            Scalar::Bool(b) => Value::from(b),
        };
        Ok(Some(Self(json.to_string())))
    }
    fn seq<'de, A: SeqAccess<'de>>(seq: A) -> Result<Option<Self>, A::Error> {
        let v = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Some(Self(v.to_string())))
    }
    fn map<'de, A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
        let v = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Some(Self(v.to_string())))
    }
}

/// A string, number or bool as text; `null`, objects and arrays as `None`.
pub(super) fn opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    lenient(d)
}

/// A non-negative integer (also from a float or a numeric string); anything else `None`.
pub(super) fn opt_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    lenient(d)
}

/// Message content: a string, `null`, or an array of parts whose `text`s are joined.
pub(super) fn content_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(lenient::<ContentText, D>(d)?.map(|c| c.0))
}

/// Tool arguments: the JSON text as sent, or an object (Ollama) re-serialised.
pub(super) fn arguments_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(lenient::<ArgumentsText, D>(d)?.map(|a| a.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may panic on a broken precondition
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Fields {
        #[serde(default, deserialize_with = "opt_string")]
        s: Option<String>,
        #[serde(default, deserialize_with = "opt_u64")]
        n: Option<u64>,
        #[serde(default, deserialize_with = "content_text")]
        c: Option<String>,
        #[serde(default, deserialize_with = "arguments_text")]
        a: Option<String>,
    }

    fn read(json: &str) -> Result<Fields, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn each_field_reads_its_shapes_and_treats_the_rest_as_absent() {
        let f = read(r#"{"s": 7, "n": "12", "c": [{"text": "a"}, "b", {"x": 1}], "a": {"k": [1, true]}}"#).unwrap();
        assert_eq!(
            (f.s.as_deref(), f.n, f.c.as_deref(), f.a.as_deref()),
            (Some("7"), Some(12), Some("ab"), Some(r#"{"k":[1,true]}"#))
        );
        let f = read(r#"{"s": {"x": 1}, "n": -3, "c": null, "a": null}"#).unwrap();
        assert_eq!((f.s, f.n, f.c, f.a), (None, None, None, None));
        let f = read(r#"{"s": [1], "n": 2.6, "a": 1.5}"#).unwrap();
        assert_eq!((f.s, f.n, f.a.as_deref()), (None, Some(3), Some("1.5")));
        assert!(read(r#"{"c": 5}"#).is_err(), "numeric content is not message content");
    }
}
