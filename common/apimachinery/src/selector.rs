//! Kubernetes label selectors: the string form (`a=b,c!=d,e in (x,y),f notin (z),g,!h`), the JSON
//! `LabelSelector` (matchLabels + matchExpressions) and the plain map of a Service's `spec.selector`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1 as metav1;

mod grammar;

/// Why a selector could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The string form breaks kube-apiserver's grammar: `found` (a token, empty at the end of the
    /// string) stands where `expected` should. Printed in kube-apiserver's words; every such error but
    /// one expecting [`Expected::CommaOrEnd`] is inside a requirement (which kube-apiserver prefixes
    /// with `unable to parse requirement: `).
    #[error("found '{found}', expected: {expected}")]
    Unexpected {
        /// The token found.
        found: String,
        /// What the grammar allows there.
        expected: Expected,
    },
    /// A value list is not closed before the end of the string (`a in (x`). kube-apiserver words it as
    /// the [`SelectorError::Unexpected`] end of string where `,` or `)` should be.
    #[error("unbalanced parentheses in label selector {0:?}")]
    UnbalancedParentheses(String),
    /// The key is not a valid label key (`[prefix/]name`).
    #[error("invalid label key {key:?}: {reason}")]
    InvalidKey {
        /// The offending key.
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A value is not a valid label value.
    #[error(
        "invalid label value {value:?} for key {key:?}: at most 63 characters, alphanumeric at both ends, `-`, `_` or `.` inside"
    )]
    InvalidValue {
        /// The key the value belongs to.
        key: String,
        /// The offending value.
        value: String,
    },
    /// matchExpressions In/NotIn without values (the string form's `in ()` is `in ("")`).
    #[error("{operator} for key {key:?} needs at least one value")]
    EmptyValueSet {
        /// The key.
        key: String,
        /// The operator.
        operator: String,
    },
    /// matchExpressions Exists/DoesNotExist with values.
    #[error("{operator} for key {key:?} takes no values")]
    UnexpectedValues {
        /// The key.
        key: String,
        /// The operator.
        operator: String,
    },
    /// matchExpressions with an operator other than In, NotIn, Exists, DoesNotExist.
    #[error("unknown label selector operator {operator:?} for key {key:?}")]
    UnknownOperator {
        /// The key.
        key: String,
        /// The operator found.
        operator: String,
    },
    /// `k>n` / `k<n` where `n` is not an integer.
    #[error("the value {value:?} of `>` / `<` for key {key:?} must be an integer")]
    NotAnInteger {
        /// The key.
        key: String,
        /// The value found.
        value: String,
    },
    /// The JSON is not a LabelSelector or a map of strings.
    #[error("malformed label selector json: {0}")]
    MalformedJson(String),
}

/// What the string form's grammar allows where [`SelectorError::Unexpected`] found something else;
/// printed as kube-apiserver words it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expected {
    /// A key or a value.
    Identifier,
    /// The end of a requirement: `,` or the end of the string.
    CommaOrEnd,
    /// The next value of a list, or its end: `,` or `)`.
    CommaOrClose,
    /// An operator after a key.
    Operator,
    /// The `(` of a value list.
    OpenParen,
}

impl fmt::Display for Expected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Identifier => "identifier",
            Self::CommaOrEnd => "',' or 'end of string'",
            Self::CommaOrClose => "',' or ')'",
            Self::Operator => "in, notin, =, ==, !=, gt, lt",
            Self::OpenParen => "'('",
        })
    }
}

/// What a requirement demands of one label.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Operator {
    /// The label exists with one of the values (`=`, `==`, `in`).
    In(BTreeSet<String>),
    /// The label is missing or has none of the values (`!=`, `notin`).
    NotIn(BTreeSet<String>),
    Exists,
    DoesNotExist,
    /// The label's value is an integer greater than this (`k>n`, string form only).
    Gt(i64),
    /// The label's value is an integer less than this (`k<n`, string form only).
    Lt(i64),
}

/// One comma-separated part of a selector.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Requirement {
    key: String,
    op: Operator,
}

/// A set of labels a selector is matched against: a map from key to value.
pub trait LabelSet {
    /// The value of label `key`, if the set has it.
    fn label(&self, key: &str) -> Option<&str>;
}

impl LabelSet for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Requirement {
    fn matches(&self, labels: &(impl LabelSet + ?Sized)) -> bool {
        let value = labels.label(&self.key);
        match &self.op {
            Operator::In(values) => value.is_some_and(|v| values.contains(v)),
            Operator::NotIn(values) => value.is_none_or(|v| !values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
            // A value that is not an integer matches neither, as in Kubernetes.
            Operator::Gt(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Operator::Lt(n) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |values: &BTreeSet<String>| {
            values
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",")
        };
        match &self.op {
            Operator::In(values) if values.len() == 1 => write!(f, "{}={}", self.key, list(values)),
            Operator::In(values) => write!(f, "{} in ({})", self.key, list(values)),
            Operator::NotIn(values) if values.len() == 1 => {
                write!(f, "{}!={}", self.key, list(values))
            }
            Operator::NotIn(values) => write!(f, "{} notin ({})", self.key, list(values)),
            Operator::Exists => write!(f, "{}", self.key),
            Operator::DoesNotExist => write!(f, "!{}", self.key),
            Operator::Gt(n) => write!(f, "{}>{n}", self.key),
            Operator::Lt(n) => write!(f, "{}<{n}", self.key),
        }
    }
}

/// A label selector: a conjunction of requirements on labels, or "nothing".
///
/// Two empty forms differ on purpose, as in Kubernetes: an empty string or an empty
/// `LabelSelector` (`{}`) selects **everything** ([`LabelSelector::from_label_selector`],
/// [`LabelSelector::parse`]), while an empty plain map (a Service without `spec.selector`)
/// selects **nothing** ([`LabelSelector::from_map`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    /// Sorted by key then operator, so equal selectors print equally.
    requirements: Vec<Requirement>,
    /// Set by an empty plain map: no label set matches.
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every label set (an empty string).
    pub fn everything() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: false,
        }
    }

    /// The selector that matches no label set.
    pub fn nothing() -> Self {
        Self {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Parses the string form, by kube-apiserver's grammar (`labels.Parse`): comma-separated
    /// requirements `k=v`, `k==v`, `k!=v`, `k in (v1,v2)`, `k notin (v1)`, `k` (exists), `!k` (does not
    /// exist) and `k>n` / `k<n` (the label's value is an integer above / below `n`). A value may be
    /// empty (`k=`, `k in ()`, `k in (,v)`). An empty or all-blank string selects everything.
    ///
    /// # Errors
    /// The first thing kube-apiserver would refuse, in its order: [`SelectorError::Unexpected`] where
    /// the grammar breaks ([`SelectorError::UnbalancedParentheses`] where that is an unclosed list), [`SelectorError::InvalidKey`] / [`SelectorError::InvalidValue`] for a key or
    /// value a label could not have, [`SelectorError::NotAnInteger`] for `>` / `<` without an integer.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        grammar::parse(input).map(Self::from_requirements)
    }

    /// The selector of a plain label map, as a Service's `spec.selector`: every pair must match.
    /// An **empty** map selects **nothing** (a Service without a selector has no pods). Keys and
    /// values are taken as given (an API object's, already validated); the string form of a map
    /// holding an invalid key or value does not parse back ([`LabelSelector::from_map_json`] checks).
    pub fn from_map(labels: &BTreeMap<String, String>) -> Self {
        if labels.is_empty() {
            return Self::nothing();
        }
        Self::from_requirements(
            labels
                .iter()
                .map(|(k, v)| Requirement {
                    key: k.clone(),
                    op: Operator::In(BTreeSet::from([v.clone()])),
                })
                .collect(),
        )
    }

    /// The selector of a JSON plain label map (`{"app": "web"}`); see [`LabelSelector::from_map`].
    ///
    /// Keys and values are checked as `matchLabels`' are (the API server refuses a Service whose
    /// selector fails them), so the selector's string form always parses back.
    ///
    /// # Errors
    /// [`SelectorError::MalformedJson`] when the value is not an object of strings (`null` is an
    /// empty map and selects nothing); [`SelectorError::InvalidKey`] / [`SelectorError::InvalidValue`]
    /// for a key or value that is not a valid label key or value.
    pub fn from_map_json(value: &serde_json::Value) -> Result<Self, SelectorError> {
        if value.is_null() {
            return Ok(Self::nothing());
        }
        let map: BTreeMap<String, String> = serde_json::from_value(value.clone())
            .map_err(|e| SelectorError::MalformedJson(e.to_string()))?;
        for (key, value) in &map {
            validate_key(key)?;
            validate_value(key, value)?;
        }
        Ok(Self::from_map(&map))
    }

    /// The selector of a Kubernetes `LabelSelector` (matchLabels AND matchExpressions).
    /// An **empty** `LabelSelector` selects **everything**, as the API defines it.
    ///
    /// # Errors
    /// [`SelectorError`] for an unknown operator, In/NotIn without values, Exists/DoesNotExist with
    /// values, or invalid keys and values.
    pub fn from_label_selector(selector: &metav1::LabelSelector) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for (key, value) in selector.match_labels.iter().flatten() {
            validate_key(key)?;
            validate_value(key, value)?;
            requirements.push(Requirement {
                key: key.clone(),
                op: Operator::In(BTreeSet::from([value.clone()])),
            });
        }
        for expr in selector.match_expressions.iter().flatten() {
            validate_key(&expr.key)?;
            let values = expr.values.clone().unwrap_or_default();
            let set = |values: Vec<String>| -> Result<BTreeSet<String>, SelectorError> {
                if values.is_empty() {
                    return Err(SelectorError::EmptyValueSet {
                        key: expr.key.clone(),
                        operator: expr.operator.clone(),
                    });
                }
                values
                    .iter()
                    .try_for_each(|v| validate_value(&expr.key, v))?;
                Ok(values.into_iter().collect())
            };
            let none = |op: Operator| -> Result<Operator, SelectorError> {
                if values.is_empty() {
                    Ok(op)
                } else {
                    Err(SelectorError::UnexpectedValues {
                        key: expr.key.clone(),
                        operator: expr.operator.clone(),
                    })
                }
            };
            let op = match expr.operator.as_str() {
                "In" => Operator::In(set(values.clone())?),
                "NotIn" => Operator::NotIn(set(values.clone())?),
                "Exists" => none(Operator::Exists)?,
                "DoesNotExist" => none(Operator::DoesNotExist)?,
                other => {
                    return Err(SelectorError::UnknownOperator {
                        key: expr.key.clone(),
                        operator: other.to_owned(),
                    });
                }
            };
            requirements.push(Requirement {
                key: expr.key.clone(),
                op,
            });
        }
        Ok(Self::from_requirements(requirements))
    }

    /// The selector of a JSON `LabelSelector`; see [`LabelSelector::from_label_selector`].
    /// `null` is an absent selector and selects everything.
    ///
    /// # Errors
    /// [`SelectorError::MalformedJson`] when the JSON does not have the LabelSelector shape, else
    /// as [`LabelSelector::from_label_selector`].
    pub fn from_label_selector_json(value: &serde_json::Value) -> Result<Self, SelectorError> {
        if value.is_null() {
            return Ok(Self::everything());
        }
        let selector: metav1::LabelSelector = serde_json::from_value(value.clone())
            .map_err(|e| SelectorError::MalformedJson(e.to_string()))?;
        Self::from_label_selector(&selector)
    }

    /// Whether the labels satisfy every requirement.
    pub fn matches(&self, labels: &(impl LabelSet + ?Sized)) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Whether this selector matches every label set (no requirements).
    pub fn is_everything(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// Whether this selector matches no label set.
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// A label that every matching label set carries, with the values it may have: the first `=` or
    /// `in` requirement. `None` when there is none (the selector may match label sets lacking any
    /// given label) or the selector matches nothing. What an index of selectors keys them by.
    pub fn required_label(&self) -> Option<(&str, &BTreeSet<String>)> {
        if self.nothing {
            return None;
        }
        self.requirements.iter().find_map(|r| match &r.op {
            Operator::In(values) => Some((r.key.as_str(), values)),
            _ => None,
        })
    }

    fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort();
        requirements.dedup();
        Self {
            requirements,
            nothing: false,
        }
    }
}

impl FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Prints the string form, which [`LabelSelector::parse`] reads back to an equivalent selector.
/// The "nothing" selector has no string form in Kubernetes; it prints as a contradiction
/// (`x,!x` on a reserved key) so that what is parsed back still selects nothing.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nothing {
            return write!(f, "{NOTHING_KEY},!{NOTHING_KEY}");
        }
        let parts: Vec<String> = self.requirements.iter().map(ToString::to_string).collect();
        write!(f, "{}", parts.join(","))
    }
}

const NOTHING_KEY: &str = "flotilla.io/nothing";

/// A qualified name: `[dns-subdomain/]name`, name at most 63 characters.
fn validate_key(key: &str) -> Result<(), SelectorError> {
    let invalid = |reason| {
        Err(SelectorError::InvalidKey {
            key: key.into(),
            reason,
        })
    };
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() || prefix.len() > 253 {
            return invalid("the prefix must be a DNS subdomain of 1 to 253 characters");
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if !prefix.split('.').all(label_ok) {
            return invalid("the prefix must be a lowercase DNS subdomain");
        }
    }
    if name.is_empty() {
        return invalid("the name part must not be empty");
    }
    if !is_name(name) {
        return invalid(
            "the name part must be at most 63 characters, alphanumeric at both ends, `-`, `_` or `.` inside",
        );
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), SelectorError> {
    if value.is_empty() || is_name(value) {
        Ok(())
    } else {
        Err(SelectorError::InvalidValue {
            key: key.into(),
            value: value.into(),
        })
    }
}

/// At most 63 characters, `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`.
fn is_name(s: &str) -> bool {
    let alnum_end = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.len() <= 63
        && alnum_end(s.chars().next())
        && alnum_end(s.chars().last())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_required_label_is_the_first_equality_or_in_requirement() {
        let s = LabelSelector::parse("x!=1, b in (p, q), a=z").unwrap();
        let (key, values) = s.required_label().unwrap();
        assert_eq!(key, "a", "requirements are sorted by key");
        assert_eq!(values.iter().collect::<Vec<_>>(), ["z"]);
        assert!(
            LabelSelector::parse("x!=1, y")
                .unwrap()
                .required_label()
                .is_none()
        );
        assert!(LabelSelector::nothing().required_label().is_none());
        assert!(LabelSelector::nothing().is_nothing());
    }

    #[test]
    fn every_operator_of_the_string_form_matches_as_kubernetes_does() {
        let s = LabelSelector::parse("a=b, c!=d, e in (x, y), f notin (z), g, !h, i==j").unwrap();
        let good = labels(&[
            ("a", "b"),
            ("c", "x"),
            ("e", "y"),
            ("f", "w"),
            ("g", ""),
            ("i", "j"),
        ]);
        assert!(s.matches(&good));
        for (k, v) in [
            ("a", "c"),
            ("c", "d"),
            ("e", "q"),
            ("f", "z"),
            ("h", "1"),
            ("i", "k"),
        ] {
            let mut bad = good.clone();
            bad.insert(k.into(), v.into());
            assert!(!s.matches(&bad), "{k}={v} should break the match");
        }
        let mut missing_g = good.clone();
        missing_g.remove("g");
        assert!(!s.matches(&missing_g));
    }

    #[test]
    fn not_equal_and_notin_match_when_the_label_is_absent() {
        let s = LabelSelector::parse("c!=d,f notin (z)").unwrap();
        assert!(s.matches(&BTreeMap::new()));
    }

    #[test]
    fn an_empty_string_selects_everything() {
        let s = LabelSelector::parse("  ").unwrap();
        assert!(s.is_everything());
        assert!(s.matches(&BTreeMap::new()));
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn an_empty_map_selects_nothing_but_an_empty_label_selector_selects_everything() {
        assert!(!LabelSelector::from_map(&BTreeMap::new()).matches(&labels(&[("a", "b")])));
        assert!(
            !LabelSelector::from_map_json(&serde_json::json!({}))
                .unwrap()
                .matches(&BTreeMap::new())
        );
        let all = LabelSelector::from_label_selector_json(&serde_json::json!({})).unwrap();
        assert!(all.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn the_nothing_selector_prints_to_a_string_that_still_selects_nothing() {
        let printed = LabelSelector::nothing().to_string();
        let reparsed = LabelSelector::parse(&printed).unwrap();
        assert!(!reparsed.matches(&labels(&[(NOTHING_KEY, "")])));
        assert!(!reparsed.matches(&BTreeMap::new()));
    }

    #[test]
    fn a_plain_map_requires_every_pair() {
        let s =
            LabelSelector::from_map_json(&serde_json::json!({"app": "web", "tier": "fe"})).unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "fe"), ("x", "y")])));
        assert!(!s.matches(&labels(&[("app", "web")])));
    }

    #[test]
    fn a_label_selector_combines_match_labels_and_expressions() {
        let s = LabelSelector::from_label_selector_json(&serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "staging"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "tier", "operator": "Exists"},
                {"key": "zone", "operator": "NotIn", "values": ["z1"]},
            ],
        }))
        .unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("env", "prod"), ("tier", "x")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("tier", "x"),
            ("canary", "1")
        ])));
        assert!(!s.matches(&labels(&[("app", "web"), ("env", "dev"), ("tier", "x")])));
        assert!(!s.matches(&labels(&[
            ("app", "web"),
            ("env", "prod"),
            ("tier", "x"),
            ("zone", "z1")
        ])));
        assert_eq!(
            s.to_string(),
            "app=web,!canary,env in (prod,staging),tier,zone!=z1"
        );
    }

    #[test]
    fn malformed_label_selectors_are_errors() {
        let cases = [
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Near"}]}),
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
            serde_json::json!({"matchLabels": {"a": 5}}),
            serde_json::json!({"matchLabels": {"bad key": "x"}}),
            serde_json::json!("a=b"),
        ];
        for case in cases {
            assert!(
                LabelSelector::from_label_selector_json(&case).is_err(),
                "{case} should be rejected"
            );
        }
        assert!(LabelSelector::from_map_json(&serde_json::json!({"a": {"b": "c"}})).is_err());
    }

    #[test]
    fn malformed_strings_are_errors_with_clear_messages() {
        let cases = [
            ("a=b,,c", "found ',', expected: identifier"),
            ("a in (x", "unbalanced parentheses"),
            ("a in x)", "found 'x', expected: '('"),
            ("a in x", "found 'x', expected: '('"),
            ("a ~ 3", "found '~', expected: in, notin"),
            ("a > x", "must be an integer"),
            ("a < -1", "invalid label value"),
            ("a=b c", "found 'c', expected: ',' or 'end of string'"),
            ("-a=b", "invalid label key"),
            ("Foo.com/a=b", "invalid label key"),
            ("/a", "invalid label key"),
            ("a=-x", "invalid label value"),
            ("!", "found '', expected: identifier"),
        ];
        for (input, message) in cases {
            let err = LabelSelector::parse(input).expect_err(input).to_string();
            assert!(
                err.contains(message),
                "{input:?} gave {err:?}, expected it to mention {message:?}"
            );
        }
    }

    #[test]
    fn greater_than_and_less_than_compare_integer_values_as_kubernetes_does() {
        let s = LabelSelector::parse("a>1, b < 10").unwrap();
        assert!(s.matches(&labels(&[("a", "2"), ("b", "9")])));
        assert!(!s.matches(&labels(&[("a", "1"), ("b", "9")])));
        assert!(
            !s.matches(&labels(&[("a", "x"), ("b", "9")])),
            "not an integer"
        );
        assert!(
            !s.matches(&labels(&[("b", "9")])),
            "a missing label matches neither"
        );
        assert_eq!(s.to_string(), "a>1,b<10");
        assert_eq!(LabelSelector::parse(&s.to_string()).unwrap(), s);
    }

    #[test]
    fn prefixed_keys_and_empty_values_parse() {
        let s =
            LabelSelector::parse("app.kubernetes.io/name=web,empty=,x in (,y),z in ()").unwrap();
        assert!(s.matches(&labels(&[
            ("app.kubernetes.io/name", "web"),
            ("empty", ""),
            ("x", ""),
            ("z", "")
        ])));
        assert!(!s.matches(&labels(&[
            ("app.kubernetes.io/name", "web"),
            ("empty", "v"),
            ("x", ""),
            ("z", "")
        ])));
    }

    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("app.kubernetes.io/c".to_owned()),
            "[a-z][a-z0-9]{0,3}"
        ]
    }

    fn value() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("x".to_owned()),
            Just("y".to_owned()),
            "[A-Za-z0-9]([-_.a-z0-9]{0,3}[a-z0-9])?"
        ]
    }

    fn requirement() -> impl Strategy<Value = Requirement> {
        let set = || proptest::collection::btree_set(value(), 1..4);
        let op = prop_oneof![
            set().prop_map(Operator::In),
            set().prop_map(Operator::NotIn),
            Just(Operator::Exists),
            Just(Operator::DoesNotExist),
            (0i64..1000).prop_map(Operator::Gt),
            (0i64..1000).prop_map(Operator::Lt),
        ];
        (name(), op).prop_map(|(key, op)| Requirement { key, op })
    }

    proptest! {
        #[test]
        fn a_printed_selector_reparses_to_one_that_matches_the_same_label_sets(
            reqs in proptest::collection::vec(requirement(), 0..5),
            sets in proptest::collection::vec(proptest::collection::btree_map(name(), value(), 0..4), 1..8),
        ) {
            let selector = LabelSelector::from_requirements(reqs);
            let reparsed = LabelSelector::parse(&selector.to_string()).unwrap();
            prop_assert_eq!(&reparsed, &selector);
            for labels in &sets {
                prop_assert_eq!(reparsed.matches(labels), selector.matches(labels));
            }
        }

        #[test]
        fn parsing_arbitrary_text_never_panics(input in ".{0,40}") {
            let _ = LabelSelector::parse(&input);
        }
    }
}
