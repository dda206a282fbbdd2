//! The conversion of k8s-pb messages into their k8s-openapi twins, field by field, following Go's JSON
//! rules for zero values so that the JSON matches what kube-apiserver would have decoded.
//!
//! Why zero values need rules: Go's protobuf marshaller writes every non-pointer field, zero or not,
//! while its JSON marshaller drops the zero ones tagged `omitempty`. So `hostNetwork: false` is on the
//! wire of every Pod that kubectl sends, yet absent from the same Pod sent as JSON. A Go pointer field
//! (`*int32 replicas`) is on the wire only when set, and then its zero means something (`replicas: 0`).
//! The wire cannot tell the two apart, so each message's entry in `messages` lists its pointer scalars
//! under `keep`; every other optional scalar is dropped when zero ([`Field::omit`]). Fields that
//! k8s-openapi makes required (Go fields without `omitempty`) are always written, zero or not.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as oa_apiext;
use k8s_openapi::apimachinery::pkg::api::resource as oa_resource;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as oa_meta;
use k8s_openapi::apimachinery::pkg::runtime as oa_runtime;
use k8s_openapi::apimachinery::pkg::util::intstr as oa_intstr;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as pb_apiext;
use k8s_pb::apimachinery::pkg::api::resource as pb_resource;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime as pb_runtime;
use k8s_pb::apimachinery::pkg::util::intstr as pb_intstr;
use serde_json::Value;

use super::ProtobufError;

/// `Self` built from the k8s-pb value `P` (a whole value: list elements, map values, messages).
pub(super) trait FromPb<P>: Sized {
    /// Converts `p`.
    ///
    /// # Errors
    /// [`ProtobufError::Value`] when `p` holds something its JSON form cannot (an IntOrString of an
    /// unknown type, a RawExtension that is not JSON, a time out of range).
    fn from_pb(p: P) -> Result<Self, ProtobufError>;
}

/// Whether a decoded value is its type's zero value, which Go's `omitempty` leaves out of JSON.
pub(super) trait IsZero {
    /// True for "", 0, false, an empty byte string and the zero time; false for every other message.
    fn is_zero(&self) -> bool;
}

/// One struct field: the k8s-pb field type `P` into the k8s-openapi field type `Self`.
pub(super) trait Field<P>: Sized {
    /// A Go value field (`omitempty`): a zero scalar becomes absent.
    ///
    /// # Errors
    /// As [`FromPb::from_pb`].
    fn omit(p: P) -> Result<Self, ProtobufError>;

    /// A Go pointer field: present stays present, zero included.
    ///
    /// # Errors
    /// As [`FromPb::from_pb`].
    fn keep(p: P) -> Result<Self, ProtobufError>;
}

/// Scalars convert as themselves; required ones (k8s-openapi's non-`Option` fields) default to zero.
macro_rules! scalars {
    ($($t:ty),*) => {$(
        impl FromPb<$t> for $t {
            fn from_pb(p: $t) -> Result<Self, ProtobufError> {
                Ok(p)
            }
        }

        impl IsZero for $t {
            #[allow(clippy::float_cmp)] // Go's omitempty compares with exactly 0.0 too.
            fn is_zero(&self) -> bool {
                *self == <$t>::default()
            }
        }

        impl Field<Option<$t>> for $t {
            fn omit(p: Option<$t>) -> Result<Self, ProtobufError> {
                Ok(p.unwrap_or_default())
            }

            fn keep(p: Option<$t>) -> Result<Self, ProtobufError> {
                Ok(p.unwrap_or_default())
            }
        }
    )*};
}

scalars!(String, bool, i32, i64, f64);

/// A required k8s-openapi field of a message type: an absent message converts as the empty one,
/// like Go's zero struct.
macro_rules! required {
    ($($p:ty => $o:ty),* $(,)?) => {$(
        impl Field<Option<$p>> for $o {
            fn omit(p: Option<$p>) -> Result<Self, ProtobufError> {
                <$o as FromPb<$p>>::from_pb(p.unwrap_or_default())
            }

            fn keep(p: Option<$p>) -> Result<Self, ProtobufError> {
                <$o as FromPb<$p>>::from_pb(p.unwrap_or_default())
            }
        }
    )*};
}
pub(super) use required;

impl<P: IsZero, O: FromPb<P>> Field<Option<P>> for Option<O> {
    fn omit(p: Option<P>) -> Result<Self, ProtobufError> {
        p.filter(|v| !v.is_zero()).map(O::from_pb).transpose()
    }

    fn keep(p: Option<P>) -> Result<Self, ProtobufError> {
        p.map(O::from_pb).transpose()
    }
}

// Repeated fields and maps: empty and absent are the same on the wire and to `omitempty`.

impl<P, O: FromPb<P>> Field<Vec<P>> for Vec<O> {
    fn omit(p: Vec<P>) -> Result<Self, ProtobufError> {
        p.into_iter().map(O::from_pb).collect()
    }

    fn keep(p: Vec<P>) -> Result<Self, ProtobufError> {
        Self::omit(p)
    }
}

impl<P, O: FromPb<P>> Field<Vec<P>> for Option<Vec<O>> {
    fn omit(p: Vec<P>) -> Result<Self, ProtobufError> {
        if p.is_empty() {
            return Ok(None);
        }
        Field::omit(p).map(Some)
    }

    fn keep(p: Vec<P>) -> Result<Self, ProtobufError> {
        Self::omit(p)
    }
}

impl<P, O: FromPb<P>> Field<BTreeMap<String, P>> for BTreeMap<String, O> {
    fn omit(p: BTreeMap<String, P>) -> Result<Self, ProtobufError> {
        p.into_iter()
            .map(|(k, v)| Ok((k, O::from_pb(v)?)))
            .collect()
    }

    fn keep(p: BTreeMap<String, P>) -> Result<Self, ProtobufError> {
        Self::omit(p)
    }
}

impl<P, O: FromPb<P>> Field<BTreeMap<String, P>> for Option<BTreeMap<String, O>> {
    fn omit(p: BTreeMap<String, P>) -> Result<Self, ProtobufError> {
        if p.is_empty() {
            return Ok(None);
        }
        Field::omit(p).map(Some)
    }

    fn keep(p: BTreeMap<String, P>) -> Result<Self, ProtobufError> {
        Self::omit(p)
    }
}

impl<P, O: FromPb<P>> FromPb<Box<P>> for Box<O> {
    fn from_pb(p: Box<P>) -> Result<Self, ProtobufError> {
        O::from_pb(*p).map(Box::new)
    }
}

impl<P: IsZero> IsZero for Box<P> {
    fn is_zero(&self) -> bool {
        (**self).is_zero()
    }
}

// Bytes: base64 in JSON (k8s-openapi's ByteString), dropped when empty like a Go `[]byte`.

impl FromPb<Vec<u8>> for ByteString {
    fn from_pb(p: Vec<u8>) -> Result<Self, ProtobufError> {
        Ok(ByteString(p))
    }
}

impl IsZero for Vec<u8> {
    fn is_zero(&self) -> bool {
        self.is_empty()
    }
}

// The apimachinery types with a JSON form of their own.

/// Go's zero `time.Time`, which its Time marshals as an empty message (and JSON as null).
const GO_ZERO_TIME_SECONDS: i64 = -62_135_596_800;

fn timestamp(
    seconds: Option<i64>,
    nanos: Option<i32>,
) -> Result<k8s_openapi::jiff::Timestamp, ProtobufError> {
    let seconds = seconds.unwrap_or(GO_ZERO_TIME_SECONDS);
    k8s_openapi::jiff::Timestamp::new(seconds, nanos.unwrap_or(0))
        .map_err(|e| ProtobufError::Value(format!("time {seconds}s is out of range: {e}")))
}

fn time_is_zero(seconds: Option<i64>, nanos: Option<i32>) -> bool {
    seconds.is_none_or(|s| s == GO_ZERO_TIME_SECONDS) && nanos.unwrap_or(0) == 0
}

impl FromPb<pb_meta::Time> for oa_meta::Time {
    fn from_pb(p: pb_meta::Time) -> Result<Self, ProtobufError> {
        timestamp(p.seconds, p.nanos).map(oa_meta::Time)
    }
}

impl IsZero for pb_meta::Time {
    fn is_zero(&self) -> bool {
        time_is_zero(self.seconds, self.nanos)
    }
}

impl FromPb<pb_meta::MicroTime> for oa_meta::MicroTime {
    fn from_pb(p: pb_meta::MicroTime) -> Result<Self, ProtobufError> {
        timestamp(p.seconds, p.nanos).map(oa_meta::MicroTime)
    }
}

impl IsZero for pb_meta::MicroTime {
    fn is_zero(&self) -> bool {
        time_is_zero(self.seconds, self.nanos)
    }
}

impl FromPb<pb_resource::Quantity> for oa_resource::Quantity {
    fn from_pb(p: pb_resource::Quantity) -> Result<Self, ProtobufError> {
        Ok(oa_resource::Quantity(p.string.unwrap_or_default()))
    }
}

impl FromPb<pb_intstr::IntOrString> for oa_intstr::IntOrString {
    fn from_pb(p: pb_intstr::IntOrString) -> Result<Self, ProtobufError> {
        match p.r#type.unwrap_or(0) {
            0 => Ok(Self::Int(p.int_val.unwrap_or(0))),
            1 => Ok(Self::String(p.str_val.unwrap_or_default())),
            other => Err(ProtobufError::Value(format!(
                "IntOrString has unknown type {other}"
            ))),
        }
    }
}

/// The JSON document held in a `raw` byte field (RawExtension, FieldsV1, apiextensions JSON); absent
/// is JSON null, as Go marshals a nil `Raw`.
fn raw_json(raw: Option<Vec<u8>>, what: &str) -> Result<Value, ProtobufError> {
    match raw {
        None => Ok(Value::Null),
        Some(bytes) if bytes.is_empty() => Ok(Value::Null),
        Some(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| ProtobufError::Value(format!("{what} does not hold JSON: {e}"))),
    }
}

impl FromPb<pb_runtime::RawExtension> for oa_runtime::RawExtension {
    fn from_pb(p: pb_runtime::RawExtension) -> Result<Self, ProtobufError> {
        raw_json(p.raw, "RawExtension").map(oa_runtime::RawExtension)
    }
}

impl FromPb<pb_meta::FieldsV1> for oa_meta::FieldsV1 {
    fn from_pb(p: pb_meta::FieldsV1) -> Result<Self, ProtobufError> {
        raw_json(p.raw, "FieldsV1").map(oa_meta::FieldsV1)
    }
}

impl FromPb<pb_apiext::Json> for oa_apiext::JSON {
    fn from_pb(p: pb_apiext::Json) -> Result<Self, ProtobufError> {
        raw_json(p.raw, "JSON").map(oa_apiext::JSON)
    }
}

impl FromPb<pb_apiext::CustomResourceSubresourceStatus>
    for oa_apiext::CustomResourceSubresourceStatus
{
    fn from_pb(_: pb_apiext::CustomResourceSubresourceStatus) -> Result<Self, ProtobufError> {
        Ok(oa_apiext::CustomResourceSubresourceStatus(Value::Object(
            Default::default(),
        )))
    }
}

impl FromPb<pb_apiext::JsonSchemaPropsOrArray> for oa_apiext::JSONSchemaPropsOrArray {
    fn from_pb(p: pb_apiext::JsonSchemaPropsOrArray) -> Result<Self, ProtobufError> {
        match p.schema {
            Some(schema) => FromPb::from_pb(schema).map(Self::Schema),
            None => Field::omit(p.j_son_schemas).map(Self::Schemas),
        }
    }
}

impl FromPb<pb_apiext::JsonSchemaPropsOrBool> for oa_apiext::JSONSchemaPropsOrBool {
    fn from_pb(p: pb_apiext::JsonSchemaPropsOrBool) -> Result<Self, ProtobufError> {
        match p.schema {
            Some(schema) => FromPb::from_pb(schema).map(Self::Schema),
            None => Ok(Self::Bool(p.allows.unwrap_or(false))),
        }
    }
}

impl FromPb<pb_apiext::JsonSchemaPropsOrStringArray> for oa_apiext::JSONSchemaPropsOrStringArray {
    fn from_pb(p: pb_apiext::JsonSchemaPropsOrStringArray) -> Result<Self, ProtobufError> {
        match p.schema {
            Some(schema) => FromPb::from_pb(Box::new(schema)).map(Self::Schema),
            None => Ok(Self::Strings(p.property)),
        }
    }
}

/// The "or" types arrive boxed (they nest JSONSchemaProps) but k8s-openapi holds them unboxed.
macro_rules! unbox {
    ($($p:ty => $o:ty),* $(,)?) => {$(
        impl FromPb<Box<$p>> for $o {
            fn from_pb(p: Box<$p>) -> Result<Self, ProtobufError> {
                <$o as FromPb<$p>>::from_pb(*p)
            }
        }
    )*};
}

unbox!(
    pb_apiext::JsonSchemaPropsOrArray => oa_apiext::JSONSchemaPropsOrArray,
    pb_apiext::JsonSchemaPropsOrBool => oa_apiext::JSONSchemaPropsOrBool,
);

/// Messages that are never "zero": Go's `omitempty` does not apply to structs, so an empty one still
/// shows as `{}` (or, for these, as `"0"`, `0` and `null`).
macro_rules! never_zero {
    ($($p:ty),* $(,)?) => {$(
        impl IsZero for $p {
            fn is_zero(&self) -> bool {
                false
            }
        }
    )*};
}

never_zero!(
    pb_resource::Quantity,
    pb_intstr::IntOrString,
    pb_runtime::RawExtension,
    pb_meta::FieldsV1,
    pb_apiext::Json,
    pb_apiext::CustomResourceSubresourceStatus,
    pb_apiext::JsonSchemaPropsOrArray,
    pb_apiext::JsonSchemaPropsOrBool,
    pb_apiext::JsonSchemaPropsOrStringArray,
);

required!(
    pb_meta::Time => oa_meta::Time,
    pb_meta::MicroTime => oa_meta::MicroTime,
    pb_intstr::IntOrString => oa_intstr::IntOrString,
    pb_resource::Quantity => oa_resource::Quantity,
    pb_runtime::RawExtension => oa_runtime::RawExtension,
);

/// A k8s-openapi type named differently from its k8s-pb twin (`JSONSchemaProps` / `JsonSchemaProps`).
macro_rules! openapi_type {
    ($om:ident; $pt:ident) => {
        $om::$pt
    };
    ($om:ident; $pt:ident; $ot:ident) => {
        $om::$ot
    };
}
pub(super) use openapi_type;

/// The conversion of every listed message of one API group version: `Type { fields }` per message,
/// every field of the k8s-pb struct named once (the destructuring and the struct literal are both
/// exhaustive, so a field added to either crate fails the build here rather than going missing).
///
/// Groups after the plain (omit-if-zero) fields: `keep` for Go pointer scalars; `rename` /
/// `rename_keep` for fields the two crates spell differently; `embed f: T { ... }` for a Go embedded
/// struct that protobuf nests under `f` but JSON (and k8s-openapi) flattens.
macro_rules! messages {
    ($pm:ident => $om:ident; $(
        $pt:ident $(=> $ot:ident)? {
            $($f:ident),* $(,)?
            $(; keep $($k:ident),* $(,)?)?
            $(; rename $($rp:ident => $ro:ident),* $(,)?)?
            $(; rename_keep $($rkp:ident => $rko:ident),* $(,)?)?
            $(; embed $ef:ident: $et:ident {
                $($ep:ident),* $(,)? $(; keep $($ek:ident),* $(,)?)?
            })*
        }
    )*) => {$(
        impl FromPb<$pm::$pt> for openapi_type!($om; $pt $(; $ot)?) {
            fn from_pb(p: $pm::$pt) -> Result<Self, ProtobufError> {
                let $pm::$pt {
                    $($f,)*
                    $($($k,)*)?
                    $($($rp: $ro,)*)?
                    $($($rkp: $rko,)*)?
                    $($ef,)*
                } = p;
                $(
                    let $pm::$et { $($ep,)* $($($ek,)*)? } = $ef.unwrap_or_default();
                )*
                Ok(Self {
                    $($f: Field::omit($f)?,)*
                    $($($k: Field::keep($k)?,)*)?
                    $($($ro: Field::omit($ro)?,)*)?
                    $($($rko: Field::keep($rko)?,)*)?
                    $($($ep: Field::omit($ep)?,)* $($($ek: Field::keep($ek)?,)*)?)*
                })
            }
        }

        impl IsZero for $pm::$pt {
            fn is_zero(&self) -> bool {
                false
            }
        }

        required!($pm::$pt => openapi_type!($om; $pt $(; $ot)?));
    )*};
}
pub(super) use messages;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_time_message_is_go_s_zero_time_and_left_out() {
        let zero = pb_meta::Time::default();
        assert!(zero.is_zero());
        let field: Option<oa_meta::Time> = Field::omit(Some(zero)).unwrap();
        assert_eq!(field, None);
    }

    #[test]
    fn a_time_converts_to_the_same_instant() {
        let t = pb_meta::Time {
            seconds: Some(1_700_000_000),
            nanos: Some(0),
        };
        let field: Option<oa_meta::Time> = Field::omit(Some(t)).unwrap();
        assert_eq!(
            serde_json::to_value(field).unwrap(),
            serde_json::json!("2023-11-14T22:13:20Z")
        );
    }

    #[test]
    fn zero_scalars_are_dropped_unless_kept() {
        let omitted: Option<i32> = Field::omit(Some(0)).unwrap();
        let kept: Option<i32> = Field::keep(Some(0)).unwrap();
        let set: Option<i32> = Field::omit(Some(3)).unwrap();
        assert_eq!((omitted, kept, set), (None, Some(0), Some(3)));
        let required: i32 = Field::omit(None).unwrap();
        assert_eq!(required, 0);
    }

    #[test]
    fn int_or_string_follows_its_type_tag() {
        let int = pb_intstr::IntOrString {
            r#type: Some(0),
            int_val: Some(8080),
            str_val: Some(String::new()),
        };
        let string = pb_intstr::IntOrString {
            r#type: Some(1),
            int_val: Some(0),
            str_val: Some("http".into()),
        };
        assert_eq!(
            oa_intstr::IntOrString::from_pb(int).unwrap(),
            oa_intstr::IntOrString::Int(8080)
        );
        assert_eq!(
            oa_intstr::IntOrString::from_pb(string).unwrap(),
            oa_intstr::IntOrString::String("http".into())
        );
        let bad = pb_intstr::IntOrString {
            r#type: Some(7),
            ..Default::default()
        };
        assert!(oa_intstr::IntOrString::from_pb(bad).is_err());
    }

    #[test]
    fn a_raw_extension_that_is_not_json_is_an_error_not_a_panic() {
        let raw = pb_runtime::RawExtension {
            raw: Some(b"\x00\x01not json".to_vec()),
        };
        let err = oa_runtime::RawExtension::from_pb(raw).unwrap_err();
        assert!(err.to_string().contains("RawExtension"), "{err}");
    }

    #[test]
    fn empty_lists_and_maps_are_left_out() {
        let list: Option<Vec<String>> = Field::omit(Vec::<String>::new()).unwrap();
        let map: Option<BTreeMap<String, String>> = Field::omit(BTreeMap::new()).unwrap();
        assert_eq!((list, map), (None, None));
    }
}
