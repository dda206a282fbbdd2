//! Label selectors as kube-apiserver reads them — the `labelSelector` query and the selector objects
//! of workloads, Services and budgets — on the shared parser of `flotilla-apimachinery`, with
//! kube-apiserver's error messages; and field selectors (`fieldSelector`), which are devcluster's own.

use std::collections::BTreeMap;

use flotilla_apimachinery::{Expected, LabelSelector as Shared, SelectorError};
use serde_json::{Map, Value};

use super::validation::{label_value_errors, qualified_name_errors};

/// A parsed label selector: all requirements must match. Empty matches everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector(Shared);

impl Default for LabelSelector {
    /// The selector that matches everything.
    fn default() -> Self {
        LabelSelector(Shared::everything())
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query form: `=`, `==`, `!=`, `in`, `notin`, exists, `!`, `>`, `<`.
    ///
    /// # Errors
    /// kube-apiserver's parse errors (the caller wraps them in a 400): what breaks inside a
    /// requirement prefixed with `unable to parse requirement: `, as upstream's parser words it.
    pub fn parse(s: &str) -> Result<Self, String> {
        Shared::parse(s).map(LabelSelector).map_err(|e| match e {
            SelectorError::Unexpected {
                expected: Expected::CommaOrEnd,
                ..
            } => e.to_string(),
            _ => format!("unable to parse requirement: {}", message(&e)),
        })
    }

    /// Converts a `metav1.LabelSelector` object (matchLabels + matchExpressions; empty or not an
    /// object selects everything), or a plain map (ReplicationController / Service selectors).
    ///
    /// # Errors
    /// An unknown operator, a malformed expression, or a key or value a label could not have (as the
    /// query form refuses them, so every selector this returns prints as a query that parses back).
    pub fn from_object(v: &Value) -> Result<Self, String> {
        let Some(m) = v.as_object() else {
            return Ok(LabelSelector::default());
        };
        let is_label_selector =
            m.contains_key("matchLabels") || m.contains_key("matchExpressions") || m.is_empty();
        let shared = if is_label_selector {
            Shared::from_label_selector_json(v)
        } else {
            Shared::from_map_json(v)
        };
        shared.map(LabelSelector).map_err(|e| message(&e))
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.0.is_everything()
    }

    /// Matches a labels map (values that are not strings count as absent).
    pub fn matches_map(&self, labels: &Map<String, Value>) -> bool {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect();
        self.0.matches(&labels)
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        match obj["metadata"]["labels"].as_object() {
            Some(l) => self.matches_map(l),
            None => self.matches_map(&Map::new()),
        }
    }

    /// The string form, requirements sorted by key (`a=b,c in (d,e)`), as the Scale subresource's
    /// `status.selector` shows it.
    pub fn to_query(&self) -> String {
        self.0.to_string()
    }
}

/// kube-apiserver's wording for what the shared parser refuses (the messages of its parser,
/// `LabelSelectorAsSelector` and `NewRequirement`) where it has one; most grammar errors already
/// print so.
fn message(e: &SelectorError) -> String {
    let kube = match e {
        SelectorError::InvalidKey { key, .. } => qualified_name_errors(key)
            .first()
            .map(|e| format!("key: Invalid value: \"{key}\": {e}")),
        SelectorError::InvalidValue { key, value } => label_value_errors(value)
            .first()
            .map(|e| format!("values[0][{key}]: Invalid value: \"{value}\": {e}")),
        SelectorError::UnbalancedParentheses(_) => {
            Some(format!("found '', expected: {}", Expected::CommaOrClose))
        }
        SelectorError::NotAnInteger { value, .. } => Some(format!(
            "for 'Gt', 'Lt' operators, the value must be an integer: {value}"
        )),
        SelectorError::UnknownOperator { operator, .. } => Some(format!(
            "\"{operator}\" is not a valid label selector operator"
        )),
        SelectorError::EmptyValueSet { .. } => {
            Some("for 'in', 'notin' operators, values set can't be empty".to_owned())
        }
        SelectorError::UnexpectedValues { .. } => {
            Some("values set must be empty for exists and does not exist".to_owned())
        }
        _ => None,
    };
    kube.unwrap_or_else(|| e.to_string())
}

/// A field selector: `field=value` / `field==value` / `field!=value` terms, all must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a `fieldSelector`, accepting only `metadata.name`, `metadata.namespace` and `allowed` fields.
    ///
    /// # Errors
    /// `field label not supported: X` or an invalid term, worded like upstream.
    pub fn parse(s: &str, allowed: &[String]) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                ));
            };
            let field = field.trim();
            if field != "metadata.name"
                && field != "metadata.namespace"
                && !allowed.iter().any(|a| a == field)
            {
                return Err(format!("field label not supported: {field}"));
            }
            terms.push((field.to_string(), eq, value.trim().to_string()));
        }
        Ok(FieldSelector { terms })
    }

    /// Whether the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Matches an object; a missing field compares as the empty string (as upstream field sets do).
    /// A field is its path in the object, except an Event's `source`, which upstream's field set takes
    /// from `source.component`, or `reportingComponent` when that is empty.
    pub fn matches(&self, obj: &Value) -> bool {
        self.terms.iter().all(|(field, eq, want)| {
            let got = if field == "source" {
                Some(&obj["source"]["component"])
                    .filter(|c| c.as_str().is_some_and(|c| !c.is_empty()))
                    .map_or_else(|| field_text(&obj["reportingComponent"]), field_text)
            } else {
                let mut cur = obj;
                for seg in field.split('.') {
                    cur = &cur[seg];
                }
                field_text(cur)
            };
            (got == *want) == *eq
        })
    }
}

/// A field's value as a field selector compares it.
fn field_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn equality_and_inequality_match_like_upstream() {
        let s = LabelSelector::parse("env=prod,tier!=web").unwrap();
        assert!(s.matches_map(&labels(json!({"env": "prod"}))));
        assert!(s.matches_map(&labels(json!({"env": "prod", "tier": "db"}))));
        assert!(!s.matches_map(&labels(json!({"env": "prod", "tier": "web"}))));
        assert!(
            LabelSelector::parse("env==prod")
                .unwrap()
                .matches_map(&labels(json!({"env": "prod"})))
        );
    }

    #[test]
    fn set_based_selectors_match_and_notin_accepts_missing_keys() {
        let s = LabelSelector::parse("env in (prod,staging),!canary").unwrap();
        assert!(s.matches_map(&labels(json!({"env": "staging"}))));
        assert!(!s.matches_map(&labels(json!({"env": "staging", "canary": "1"}))));
        let n = LabelSelector::parse("env notin (prod)").unwrap();
        assert!(n.matches_map(&Map::new()));
        assert!(!n.matches_map(&labels(json!({"env": "prod"}))));
        let e = LabelSelector::parse("tier").unwrap();
        assert!(!e.matches_map(&Map::new()));
    }

    #[test]
    fn what_kube_apiserver_refuses_is_reported_in_its_words() {
        // Fixtures errors/list-invalid-labelselector-400.json and -value-400.json.
        assert_eq!(
            LabelSelector::parse("app in (a,b").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            LabelSelector::parse("app=not valid!").unwrap_err(),
            "found 'valid', expected: ',' or 'end of string'"
        );
        assert_eq!(
            LabelSelector::parse("a,").unwrap_err(),
            "unable to parse requirement: found '', expected: identifier"
        );
        assert_eq!(
            LabelSelector::parse("a>b").unwrap_err(),
            "unable to parse requirement: for 'Gt', 'Lt' operators, the value must be an integer: b"
        );
        assert!(
            LabelSelector::parse("Bad_/x=1")
                .unwrap_err()
                .starts_with("unable to parse requirement: key: Invalid value: \"Bad_/x\": ")
        );
        assert!(
            LabelSelector::parse("a=-x")
                .unwrap_err()
                .starts_with("unable to parse requirement: values[0][a]: Invalid value: \"-x\": ")
        );
    }

    #[test]
    fn what_kube_apiserver_accepts_passes() {
        for ok in [
            "",
            "a=b,c!=d,e==f",
            "a in (x, y),b notin (z),c,!d",
            "a>1,b<2",
            "a in (),b in (,x),c in (x,),d in (x,,y)",
            "app.kubernetes.io/name=web,empty=",
        ] {
            assert!(LabelSelector::parse(ok).is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn numeric_comparisons_and_empty_value_lists_parse_as_kube_apiserver_does() {
        let s = LabelSelector::parse("replicas>2,zone in ()").unwrap();
        assert!(s.matches_map(&labels(json!({"replicas": "3", "zone": ""}))));
        assert!(!s.matches_map(&labels(json!({"replicas": "2", "zone": ""}))));
        assert!(!s.matches_map(&labels(json!({"replicas": "3"}))));
        assert_eq!(s.to_query(), "replicas>2,zone=");
    }

    #[test]
    fn a_malformed_selector_object_is_refused_in_kube_apiserver_words() {
        let near = json!({"matchExpressions": [{"key": "a", "operator": "Near"}]});
        assert_eq!(
            LabelSelector::from_object(&near).unwrap_err(),
            "\"Near\" is not a valid label selector operator"
        );
        let empty_in = json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]});
        assert_eq!(
            LabelSelector::from_object(&empty_in).unwrap_err(),
            "for 'in', 'notin' operators, values set can't be empty"
        );
        assert!(LabelSelector::from_object(&json!({})).unwrap().is_empty());
        assert!(LabelSelector::from_object(&Value::Null).unwrap().is_empty());
    }

    #[test]
    fn a_label_selector_object_combines_labels_and_expressions() {
        let s = LabelSelector::from_object(&json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "NotIn", "values": ["x"]}]}))
            .unwrap();
        assert!(s.matches_map(&labels(json!({"a": "1"}))));
        assert!(!s.matches_map(&labels(json!({"a": "1", "b": "x"}))));
        assert_eq!(s.to_query(), "a=1,b!=x");
    }

    #[test]
    fn field_selectors_reject_unknown_fields_and_treat_missing_as_empty() {
        let allowed = vec!["spec.nodeName".to_string(), "status.phase".to_string()];
        assert_eq!(
            FieldSelector::parse("spec.bogus=x", &allowed).unwrap_err(),
            "field label not supported: spec.bogus"
        );
        let unscheduled = FieldSelector::parse("spec.nodeName=", &allowed).unwrap();
        assert!(unscheduled.matches(&json!({"spec": {}})));
        assert!(!unscheduled.matches(&json!({"spec": {"nodeName": "n1"}})));
        let both =
            FieldSelector::parse("status.phase!=Pending,spec.nodeName=node1", &allowed).unwrap();
        assert!(
            both.matches(&json!({"spec": {"nodeName": "node1"}, "status": {"phase": "Running"}}))
        );
        assert!(
            !both.matches(&json!({"spec": {"nodeName": "node1"}, "status": {"phase": "Pending"}}))
        );
    }
}
