//! Label selectors (string and LabelSelector-object forms) and field selectors: parsing and matching.

use serde_json::{Map, Value};

use super::validation::{label_value_errors, qualified_name_errors};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value`, `key==value`, `key in (a,b)`.
    In(String, Vec<String>),
    /// `key!=value`, `key notin (a,b)` — also matches objects without the key.
    NotIn(String, Vec<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
    /// `key>n` / `key<n` (numeric, as upstream).
    Gt(String, i64),
    /// `key<n`.
    Lt(String, i64),
}

/// A parsed label selector: all requirements must match. Empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    reqs: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    End,
}

impl Tok {
    fn literal(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::Bang => "!".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::End => String::new(),
        }
    }
}

fn lex(s: &str) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '!' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::NotEq);
                i += 2;
            }
            '!' => {
                out.push(Tok::Bang);
                i += 1;
            }
            '=' if chars.get(i + 1) == Some(&'=') => {
                out.push(Tok::DoubleEq);
                i += 2;
            }
            '=' => {
                out.push(Tok::Eq);
                i += 1;
            }
            '>' => {
                out.push(Tok::Gt);
                i += 1;
            }
            '<' => {
                out.push(Tok::Lt);
                i += 1;
            }
            '(' => {
                out.push(Tok::Open);
                i += 1;
            }
            ')' => {
                out.push(Tok::Close);
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !"!=<>(),".contains(chars[i])
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
            }
        }
    }
    out.push(Tok::End);
    out
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> &Tok {
        self.toks.get(self.pos).unwrap_or(&Tok::End)
    }

    fn next(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = if *self.peek() == Tok::Bang {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            Tok::Ident(k) => k,
            other => return Err(format!("found '{}', expected: identifier", other.literal())),
        };
        check_key(&key)?;
        if negated {
            return Ok(Requirement::DoesNotExist(key));
        }
        match self.peek().clone() {
            Tok::Comma | Tok::End => return Ok(Requirement::Exists(key)),
            _ => {}
        }
        let op = self.next();
        match op {
            Tok::Eq | Tok::DoubleEq | Tok::NotEq => {
                let value = match self.peek().clone() {
                    Tok::Ident(v) => {
                        self.next();
                        v
                    }
                    Tok::Comma | Tok::End => String::new(),
                    other => {
                        return Err(format!("found '{}', expected: identifier", other.literal()));
                    }
                };
                check_value(&key, &value)?;
                Ok(if op == Tok::NotEq {
                    Requirement::NotIn(key, vec![value])
                } else {
                    Requirement::In(key, vec![value])
                })
            }
            Tok::Gt | Tok::Lt => {
                let v = match self.next() {
                    Tok::Ident(v) => v,
                    other => {
                        return Err(format!("found '{}', expected: identifier", other.literal()));
                    }
                };
                let n: i64 = v.parse().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer: {v}")
                })?;
                Ok(if op == Tok::Gt {
                    Requirement::Gt(key, n)
                } else {
                    Requirement::Lt(key, n)
                })
            }
            Tok::In | Tok::NotIn => {
                if self.next() != Tok::Open {
                    return Err(format!(
                        "found '{}', expected: '('",
                        self.toks[self.pos - 1].literal()
                    ));
                }
                let mut values = Vec::new();
                loop {
                    match self.next() {
                        Tok::Ident(v) => {
                            check_value(&key, &v)?;
                            values.push(v);
                            match self.next() {
                                Tok::Comma => continue,
                                Tok::Close => break,
                                other => {
                                    return Err(format!(
                                        "found '{}', expected: ',' or ')'",
                                        other.literal()
                                    ));
                                }
                            }
                        }
                        Tok::Close if values.is_empty() => break,
                        other => {
                            return Err(format!(
                                "found '{}', expected: ',' or ')'",
                                other.literal()
                            ));
                        }
                    }
                }
                Ok(if op == Tok::In {
                    Requirement::In(key, values)
                } else {
                    Requirement::NotIn(key, values)
                })
            }
            other => Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                other.literal()
            )),
        }
    }
}

fn check_key(key: &str) -> Result<(), String> {
    match qualified_name_errors(key).first() {
        Some(e) => Err(format!("key: Invalid value: \"{key}\": {e}")),
        None => Ok(()),
    }
}

fn check_value(key: &str, value: &str) -> Result<(), String> {
    match label_value_errors(value).first() {
        Some(e) => Err(format!("values[0][{key}]: Invalid value: \"{value}\": {e}")),
        None => Ok(()),
    }
}

impl LabelSelector {
    /// Parses the `labelSelector` query form.
    ///
    /// # Errors
    /// Upstream-worded parse errors (the caller wraps them in a 400).
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut p = Parser {
            toks: lex(s),
            pos: 0,
        };
        let mut reqs = Vec::new();
        if *p.peek() == Tok::End {
            return Ok(LabelSelector { reqs });
        }
        loop {
            let r = p
                .requirement()
                .map_err(|e| format!("unable to parse requirement: {e}"))?;
            reqs.push(r);
            match p.next() {
                Tok::End => break,
                Tok::Comma => {}
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.literal()
                    ));
                }
            }
        }
        Ok(LabelSelector { reqs })
    }

    /// Converts a `metav1.LabelSelector` object (matchLabels + matchExpressions), or a plain map
    /// (ReplicationController / Service selectors).
    ///
    /// # Errors
    /// An unknown operator, a malformed expression, or a key or value a label could not have (as the
    /// query form refuses them, so every selector this returns prints as a query that parses back).
    pub fn from_object(v: &Value) -> Result<Self, String> {
        let mut reqs = Vec::new();
        let Some(m) = v.as_object() else {
            return Ok(LabelSelector::default());
        };
        let equals = |k: &String, val: &Value| {
            let value = val.as_str().unwrap_or("");
            check_key(k)?;
            check_value(k, value)?;
            Ok::<_, String>(Requirement::In(k.clone(), vec![value.to_owned()]))
        };
        let is_label_selector =
            m.contains_key("matchLabels") || m.contains_key("matchExpressions") || m.is_empty();
        if !is_label_selector {
            for (k, val) in m {
                reqs.push(equals(k, val)?);
            }
            return Ok(LabelSelector { reqs });
        }
        if let Some(ml) = m.get("matchLabels").and_then(Value::as_object) {
            for (k, val) in ml {
                reqs.push(equals(k, val)?);
            }
        }
        for e in m
            .get("matchExpressions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let key = e["key"].as_str().unwrap_or("").to_string();
            check_key(&key)?;
            let values: Vec<String> = e["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(String::from))
                .collect();
            for value in &values {
                check_value(&key, value)?;
            }
            reqs.push(match e["operator"].as_str().unwrap_or("") {
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                other => {
                    return Err(format!(
                        "\"{other}\" is not a valid label selector operator"
                    ));
                }
            });
        }
        Ok(LabelSelector { reqs })
    }

    /// Whether the selector has no requirements.
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// Matches a labels map.
    pub fn matches_map(&self, labels: &Map<String, Value>) -> bool {
        self.reqs.iter().all(|r| {
            let get = |k: &str| labels.get(k).and_then(Value::as_str);
            match r {
                Requirement::In(k, vs) => get(k).is_some_and(|v| vs.iter().any(|x| x == v)),
                Requirement::NotIn(k, vs) => get(k).is_none_or(|v| !vs.iter().any(|x| x == v)),
                Requirement::Exists(k) => labels.contains_key(k),
                Requirement::DoesNotExist(k) => !labels.contains_key(k),
                Requirement::Gt(k, n) => get(k)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                Requirement::Lt(k, n) => get(k)
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        match obj["metadata"]["labels"].as_object() {
            Some(l) => self.matches_map(l),
            None => self.matches_map(&Map::new()),
        }
    }

    /// The string form (`a=b,c in (d,e)`), as the Scale subresource's `status.selector` shows it.
    pub fn to_query(&self) -> String {
        let mut parts: Vec<String> = self
            .reqs
            .iter()
            .map(|r| match r {
                Requirement::In(k, vs) if vs.len() == 1 => format!("{k}={}", vs[0]),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) if vs.len() == 1 => format!("{k}!={}", vs[0]),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
                Requirement::Gt(k, n) => format!("{k}>{n}"),
                Requirement::Lt(k, n) => format!("{k}<{n}"),
            })
            .collect();
        parts.sort();
        parts.join(",")
    }
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
    fn malformed_selectors_report_upstream_messages() {
        assert_eq!(
            LabelSelector::parse("app in (a,b").unwrap_err(),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            LabelSelector::parse("app=not valid!").unwrap_err(),
            "found 'valid', expected: ',' or 'end of string'"
        );
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
