//! Property tests: results without heavy values come out unchanged, the transform is
//! idempotent, and every stored artifact's bytes hash to its sha256.

use crate::common;

use common::*;
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// Arbitrary JSON with short strings: nothing here is heavy or binary.
fn light_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::String),
        // Strings that look like JSON or base64 but are short or not binary.
        prop_oneof![
            Just("[1, 2]".to_owned()),
            Just("{\"a\": \"b\"}".to_owned()),
            Just("JVBERi0xLjQK".to_owned()),
            Just("iVBORw0KGgo=".to_owned())
        ]
        .prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// Light JSON with heavy values planted at random places.
fn heavy_json() -> impl Strategy<Value = Value> {
    let heavy = prop_oneof![
        Just(json!(b64(&corpus("sample.png")))),
        Just(json!(b64_mime(&corpus("sample.pdf")))),
        Just(json!(format!("data:audio/wav;base64,{}", b64(&corpus("sample.wav"))))),
        Just(json!({"type": "image", "data": b64(&corpus("sample.jpg")), "mimeType": "image/jpeg"})),
        Just(json!({"type": "resource_link", "uri": "file:///x", "name": "x"})),
        Just(json!("long text ".repeat(4_000))),
        Just(json!((0..3_000).map(|i| json!({"i": i})).collect::<Vec<_>>())),
        Just(json!(json!({"inner": b64(&corpus("sample.gz"))}).to_string())),
    ];
    (light_json(), prop::collection::vec((heavy, "[a-z]{1,6}"), 1..4)).prop_map(|(base, heavies)| {
        let mut root = match base {
            Value::Object(m) => Value::Object(m),
            other => json!({"base": other}),
        };
        for (h, key) in heavies {
            // Plant at the root or one level down, in an object or a list.
            match root.as_object_mut().unwrap().values_mut().find(|v| v.is_object() || v.is_array()) {
                Some(Value::Object(m)) if key.len() % 2 == 0 => {
                    m.insert(key, h);
                }
                Some(Value::Array(a)) if key.len() % 2 == 0 => a.push(h),
                _ => {
                    root[key] = h;
                }
            }
        }
        root
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn light_json_is_unchanged(v in light_json()) {
        let r = run("t", v.clone());
        prop_assert_eq!(&r.out.value, &v);
        prop_assert!(r.out.report.artifacts.is_empty());
        prop_assert!(r.out.report.warnings.is_empty());
    }

    #[test]
    fn idempotent_and_hashes_match(v in heavy_json()) {
        let first = run("t", v);
        first.check_hashes();
        prop_assert!(!first.out.report.artifacts.is_empty() || !first.out.report.links.is_empty());
        let second = run("t", first.out.value.clone());
        prop_assert_eq!(&second.out.value, &first.out.value);
        prop_assert!(second.out.report.artifacts.is_empty(), "{:?}", second.out.report.artifacts);
    }
}
