//! PolicyRule comparison as upstream's escalation check does it (`component-helpers/auth/rbac/validation`
//! `Covers`, `pkg/registry/rbac/validation` `CompactRules`, `pkg/apis/rbac/v1` `CompactString`): which
//! parts of some rules a set of held rules does not cover, described the way upstream's 403 lists them.

use serde_json::Value;

/// The verb, group and resource wildcard.
const ALL: &str = "*";

/// One RBAC PolicyRule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `resources` (`pods`, `pods/status`, `*/scale`, `*`).
    pub resources: Vec<String>,
    /// `resourceNames`.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    pub non_resource_urls: Vec<String>,
    /// `verbs`.
    pub verbs: Vec<String>,
}

impl Rule {
    /// The rule a stored PolicyRule JSON object describes (missing lists are empty).
    pub fn from_json(rule: &Value) -> Self {
        let strings = |field: &str| -> Vec<String> {
            rule[field]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        Rule {
            api_groups: strings("apiGroups"),
            resources: strings("resources"),
            resource_names: strings("resourceNames"),
            non_resource_urls: strings("nonResourceURLs"),
            verbs: strings("verbs"),
        }
    }

    /// The rules of a Role's or ClusterRole's `rules` list.
    pub fn list(rules: &Value) -> Vec<Rule> {
        rules
            .as_array()
            .map(|a| a.iter().map(Rule::from_json).collect())
            .unwrap_or_default()
    }

    /// Upstream's `CompactString`: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`,
    /// leaving out empty lists, each list printed as Go's `%q` prints a `[]string`.
    pub fn compact_string(&self) -> String {
        let parts: Vec<String> = [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ]
        .into_iter()
        .filter(|(_, list)| !list.is_empty())
        .map(|(name, list)| format!("{name}:{}", go_quote_list(list)))
        .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn go_quote_list(list: &[String]) -> String {
    let quoted: Vec<String> = list.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Go's `strconv.Quote` for the strings RBAC objects and user names hold.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Upstream's `BreakdownRule`: one rule per group × resource × verb (× resource name), and per
/// non-resource URL × verb.
fn breakdown(rule: &Rule) -> Vec<Rule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = Rule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..Rule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(Rule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(Rule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..Rule::default()
            });
        }
    }
    out
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

/// Upstream's `resourceCoversAll`: `*`, exact names, or `*/<subresource>` for a subresource.
fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    has(owner, ALL)
        || wanted.iter().all(|r| {
            has(owner, r)
                || r.split_once('/')
                    .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
        })
}

/// Upstream's `nonResourceURLsCoversAll`: exact paths, or a `prefix*` owner path.
fn urls_cover(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|path| {
        owner.iter().any(|o| {
            o == path
                || o.strip_suffix('*')
                    .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
        })
    })
}

/// Upstream's `ruleCovers`: whether `owner` allows everything the broken-down `sub` does.
fn rule_covers(owner: &Rule, sub: &Rule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resources_cover(&owner.resources, &sub.resources);
    let urls = urls_cover(&owner.non_resource_urls, &sub.non_resource_urls);
    let names = owner.resource_names.is_empty()
        || (!sub.resource_names.is_empty() && has_all(&owner.resource_names, &sub.resource_names));
    verbs && groups && resources && urls && names
}

/// Upstream's `Covers`: the broken-down parts of `wanted` that no rule of `held` covers (empty: all
/// covered), in `wanted`'s order.
pub fn uncovered(held: &[Rule], wanted: &[Rule]) -> Vec<Rule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !held.iter().any(|owner| rule_covers(owner, sub)))
        .collect()
}

/// Upstream's `CompactRules`: rules that name one group, one resource and at most one resource name
/// are merged into one rule per (group, resource, name) listing all their verbs; others stay as
/// they are.
pub fn compact(rules: Vec<Rule>) -> Vec<Rule> {
    let mut simple: Vec<Rule> = Vec::new();
    let mut other = Vec::new();
    for rule in rules {
        let is_simple = rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.resource_names.len() <= 1
            && rule.non_resource_urls.is_empty();
        if !is_simple {
            other.push(rule);
            continue;
        }
        let same = simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups
                && s.resources == rule.resources
                && s.resource_names == rule.resource_names
        });
        match same {
            Some(s) => s.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    other.extend(simple);
    other
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(v: Value) -> Rule {
        Rule::from_json(&v)
    }

    #[test]
    fn a_wildcard_owner_covers_everything_of_its_kind() {
        let admin = vec![
            rule(json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]})),
            rule(json!({"nonResourceURLs": ["*"], "verbs": ["*"]})),
        ];
        let wanted = vec![
            rule(
                json!({"apiGroups": ["", "apps"], "resources": ["pods", "deployments/scale"],
                "resourceNames": ["a"], "verbs": ["get", "update"]}),
            ),
            rule(json!({"nonResourceURLs": ["/healthz"], "verbs": ["get"]})),
        ];
        assert!(uncovered(&admin, &wanted).is_empty());
    }

    #[test]
    fn uncovered_parts_are_listed_one_verb_at_a_time_and_compacted_per_resource() {
        let held = vec![rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}),
        )];
        let wanted = vec![rule(
            json!({"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["get", "list"]}),
        )];
        let missing = uncovered(&held, &wanted);
        assert_eq!(missing.len(), 3);
        let described: Vec<String> = compact(missing).iter().map(Rule::compact_string).collect();
        assert_eq!(
            described,
            vec![
                r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["list"]}"#,
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "list"]}"#,
            ]
        );
    }

    #[test]
    fn resource_names_and_subresource_wildcards_cover_as_upstream() {
        let named = vec![rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]}),
        )];
        let one = rule(
            json!({"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"], "verbs": ["get"]}),
        );
        let any = rule(json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}));
        assert!(uncovered(&named, std::slice::from_ref(&one)).is_empty());
        assert_eq!(uncovered(&named, &[any]).len(), 1);
        let status = vec![rule(
            json!({"apiGroups": ["apps"], "resources": ["*/status"], "verbs": ["update"]}),
        )];
        let wanted = rule(
            json!({"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["update"]}),
        );
        assert!(uncovered(&status, &[wanted]).is_empty());
    }

    #[test]
    fn non_resource_urls_are_covered_by_prefix_stars() {
        let held = vec![rule(
            json!({"nonResourceURLs": ["/apis/*"], "verbs": ["get"]}),
        )];
        let inside = rule(json!({"nonResourceURLs": ["/apis/apps"], "verbs": ["get"]}));
        let outside = rule(json!({"nonResourceURLs": ["/version"], "verbs": ["get"]}));
        assert!(uncovered(&held, &[inside]).is_empty());
        assert_eq!(
            compact(uncovered(&held, &[outside]))[0].compact_string(),
            r#"{NonResourceURLs:["/version"], Verbs:["get"]}"#
        );
    }

    #[test]
    fn go_quoting_escapes_quotes_and_controls() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}"), r#""a\"b\\c\n\x01""#);
        assert_eq!(go_quote_list(&["x".into(), "y".into()]), r#"["x" "y"]"#);
    }
}
