//! Validation of batch/v1 Jobs and CronJobs as kube-apiserver's `pkg/apis/batch/validation` does
//! it, on create and update, with upstream's field paths and messages (422 causes).
//!
//! Rules follow the Job and CronJob registry strategies with the default feature gates: a Job
//! update is checked as a Job (`ValidateJob`) and then as an update (`ValidateJobUpdate`, which
//! checks the spec again), so a bad spec reports its causes twice, as upstream's Status does.

use std::str::FromStr;

use serde_json::{Map, Value, json};

use super::cron_schedule;
use super::selector::LabelSelector;
use super::status::Cause;
use super::validation::{containers, qualified_name_errors, subdomain_errors};

const NEGATIVE: &str = "must be greater than or equal to 0";
const IMMUTABLE: &str = "field is immutable";
const INDEXED: &str = "Indexed";
/// Upstream `maxParallelismForIndexedJob` and `maxFailedIndexesForIndexedJob`.
const INDEXED_LIMIT: i64 = 100_000;
/// Upstream `completionsSoftLimit`.
const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
/// Upstream `parallelismLimitForHighCompletions` and `maxFailedIndexesLimitForHighCompletions`.
const HIGH_COMPLETIONS_LIMIT: i64 = 10_000;
const MAX_POD_FAILURE_POLICY_RULES: usize = 20;
const MAX_ON_EXIT_CODES_VALUES: usize = 255;
const MAX_ON_POD_CONDITIONS: usize = 20;
const MAX_SUCCESS_POLICY_RULES: usize = 20;
const MAX_SUCCEEDED_INDEXES_BYTES: usize = 64 * 1024;
const MAX_MANAGED_BY_LENGTH: usize = 63;
/// A CronJob's name leaves room for the 11-character `-<minutes>` suffix of its Jobs' names.
const MAX_CRONJOB_NAME: usize = 63 - 11;

const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

/// A `FieldValueInvalid` cause whose value upstream omits (`field.OmitValueType`).
fn invalid_without_value(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueInvalid",
        message: format!("Invalid value: {detail}"),
        field: field.to_string(),
    }
}

/// Upstream's `field.TooMany`.
fn too_many(field: &str, actual: usize, max: usize) -> Cause {
    Cause {
        reason: "FieldValueTooMany",
        message: format!("Too many: {actual}: must have at most {max} items"),
        field: field.to_string(),
    }
}

/// Upstream's `field.Duplicate`.
fn duplicate(field: &str, value: &Value) -> Cause {
    Cause {
        reason: "FieldValueDuplicate",
        message: format!("Duplicate value: {value}"),
        field: field.to_string(),
    }
}

fn non_negative(causes: &mut Vec<Cause>, field: &str, value: &Value) {
    if let Some(n) = value.as_i64().filter(|n| *n < 0) {
        causes.push(Cause::invalid(field, &json!(n), NEGATIVE));
    }
}

fn present(v: &Value) -> bool {
    !v.is_null()
}

/// `v` with nulls and empty lists and maps removed, so that two objects compare as upstream's
/// semantic equality compares their Go structs (nil and empty collections are equal).
fn semantic(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), semantic(v)))
                .filter(|(_, v)| !is_void(v))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(semantic).collect()),
        other => other.clone(),
    }
}

fn is_void(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

fn immutable(causes: &mut Vec<Cause>, field: &str, new: &Value, old: &Value) {
    if semantic(new) != semantic(old) {
        causes.push(Cause::invalid(field, new, IMMUTABLE));
    }
}

fn is_indexed(spec: &Value) -> bool {
    spec["completionMode"] == INDEXED
}

// === Job ===

/// Job create (upstream `ValidateJob`): the generated selector, the spec, and the pod hostnames
/// an Indexed Job will need.
pub fn job(obj: &Value) -> Vec<Cause> {
    let mut causes = generated_selector(obj, true);
    causes.extend(job_spec(&obj["spec"]));
    causes.extend(indexed_hostnames(obj));
    causes
}

/// Job update (upstream `ValidateJobUpdate` after `ValidateJob`): the spec once more, then the
/// fields that may not change.
pub fn job_update(new: &Value, old: &Value) -> Vec<Cause> {
    let (spec, old_spec) = (&new["spec"], &old["spec"]);
    let mut causes = job_spec(spec);
    causes.extend(completions_update(spec, old_spec));
    immutable(
        &mut causes,
        "spec.selector",
        &spec["selector"],
        &old_spec["selector"],
    );
    causes.extend(template_update(new, old));
    for field in [
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "managedBy",
        "successPolicy",
    ] {
        immutable(
            &mut causes,
            &format!("spec.{field}"),
            &spec[field],
            &old_spec[field],
        );
    }
    causes
}

/// Upstream `validateGeneratedSelector`: unless the selector is manual, the template carries the
/// job-name and controller-uid labels of this Job and the selector selects exactly those.
fn generated_selector(obj: &Value, prefixed_labels: bool) -> Vec<Cause> {
    let spec = &obj["spec"];
    let mut causes = Vec::new();
    if spec["manualSelector"] == json!(true) || !present(&spec["selector"]) {
        return causes;
    }
    let uid = obj["metadata"]["uid"].as_str().unwrap_or("");
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if uid.is_empty() {
        causes.push(Cause::required("metadata.uid", ""));
    }
    let labels = &spec["template"]["metadata"]["labels"];
    let mut expected = vec![(LEGACY_CONTROLLER_UID, uid), (LEGACY_JOB_NAME, name)];
    if prefixed_labels {
        expected.extend([(CONTROLLER_UID, uid), (JOB_NAME, name)]);
    }
    for (key, want) in &expected {
        let field = format!("spec.template.metadata.labels[{key}]");
        let detail = format!("must be '{want}'");
        match labels[*key].as_str() {
            None => causes.push(Cause::required(&field, &detail)),
            Some(have) if have != *want => causes.push(Cause::invalid(&field, labels, &detail)),
            Some(_) => {}
        }
    }
    if let Ok(selector) = LabelSelector::from_object(&spec["selector"]) {
        let expected: Map<String, Value> = expected
            .iter()
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        if !selector.matches_map(&expected) {
            causes.push(Cause::invalid(
                "spec.selector",
                &spec["selector"],
                "`selector` not auto-generated",
            ));
        }
    }
    causes
}

/// Upstream `ValidateJobSpec`: the spec rules plus a selector that matches the template labels.
fn job_spec(spec: &Value) -> Vec<Cause> {
    let mut causes = job_spec_rules(spec, "spec");
    let labels = &spec["template"]["metadata"]["labels"];
    let selector = &spec["selector"];
    let parsed = if present(selector) {
        LabelSelector::from_object(selector)
    } else {
        causes.push(Cause::required("spec.selector", ""));
        Ok(LabelSelector::default())
    };
    match parsed {
        Err(e) => causes.push(Cause::invalid("spec.selector", selector, &e)),
        Ok(s) => {
            // A missing selector selects nothing (upstream's `labels.Nothing()`).
            let map = labels.as_object().cloned().unwrap_or_default();
            if !present(selector) || !s.matches_map(&map) {
                causes.push(Cause::invalid(
                    "spec.template.metadata.labels",
                    labels,
                    "`selector` does not match template `labels`",
                ));
            }
        }
    }
    causes
}

/// Upstream `validateJobSpec` of the spec at `path` (`spec`, or a CronJob's `spec.jobTemplate.spec`).
fn job_spec_rules(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let at = |field: &str| format!("{path}.{field}");
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        non_negative(&mut causes, &at(field), &spec[field]);
    }
    if present(&spec["maxFailedIndexes"]) && !present(&spec["backoffLimitPerIndex"]) {
        causes.push(Cause::required(
            &at("backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    if let Some(managed_by) = spec["managedBy"].as_str() {
        causes.extend(domain_prefixed_path(&at("managedBy"), managed_by));
        if managed_by.len() > MAX_MANAGED_BY_LENGTH {
            causes.push(Cause::too_long(&at("managedBy"), MAX_MANAGED_BY_LENGTH));
        }
    }
    causes.extend(completion_mode(spec, path));
    if present(&spec["podFailurePolicy"]) {
        causes.extend(pod_failure_policy(spec, &at("podFailurePolicy")));
    }
    if present(&spec["successPolicy"]) {
        if is_indexed(spec) {
            causes.extend(success_policy(spec, &at("successPolicy")));
        } else {
            causes.push(Cause::invalid(
                &at("successPolicy"),
                &spec["successPolicy"],
                "requires indexed completion mode",
            ));
        }
    }
    causes.extend(pod_replacement_policy(spec, &at("podReplacementPolicy")));
    causes.extend(containers(&at("template.spec"), &spec["template"]["spec"]));
    let restart = &spec["template"]["spec"]["restartPolicy"];
    let restart_field = at("template.spec.restartPolicy");
    match restart.as_str().unwrap_or("") {
        "" | "Always" => causes.push(Cause::required(
            &restart_field,
            "valid values: \"OnFailure\", \"Never\"",
        )),
        "OnFailure" if present(&spec["podFailurePolicy"]) => causes.push(Cause::invalid(
            &restart_field,
            restart,
            "only \"Never\" is supported when podFailurePolicy is specified",
        )),
        "OnFailure" | "Never" => {}
        _ => causes.push(Cause::not_supported(
            &restart_field,
            restart,
            &["OnFailure", "Never"],
        )),
    }
    causes
}

/// Upstream's `IsDomainPrefixedPath` (for `managedBy`).
fn domain_prefixed_path(field: &str, value: &str) -> Vec<Cause> {
    if value.is_empty() {
        return vec![Cause::required(field, "")];
    }
    let Some((host, path)) = value
        .split_once('/')
        .filter(|(h, p)| !h.is_empty() && !p.is_empty())
    else {
        return vec![Cause::invalid(
            field,
            &json!(value),
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )];
    };
    let mut causes: Vec<Cause> = subdomain_errors(host)
        .iter()
        .map(|m| Cause::invalid(field, &json!(host), m))
        .collect();
    let path_ok = path
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/-._~%!$&'()*+,;=:".contains(c));
    if !path_ok {
        causes.push(Cause::invalid(
            field,
            &json!(path),
            "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')",
        ));
    }
    causes
}

/// `completionMode` values and the Indexed-only limits (`backoffLimitPerIndex`, `maxFailedIndexes`).
fn completion_mode(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let at = |field: &str| format!("{path}.{field}");
    let mode = &spec["completionMode"];
    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64();
    let max_failed = spec["maxFailedIndexes"].as_i64();
    if present(mode) {
        if mode != "NonIndexed" && mode != INDEXED {
            causes.push(Cause::not_supported(
                &at("completionMode"),
                mode,
                &["NonIndexed", INDEXED],
            ));
        }
        if mode == INDEXED {
            if completions.is_none() {
                causes.push(Cause::required(
                    &at("completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(p) = parallelism.filter(|p| *p > INDEXED_LIMIT) {
                causes.push(Cause::invalid(
                    &at("parallelism"),
                    &json!(p),
                    &format!(
                        "must be less than or equal to {INDEXED_LIMIT} when completion mode is Indexed"
                    ),
                ));
            }
            if let (Some(c), Some(m)) = (completions, max_failed)
                && m > c
            {
                causes.push(Cause::invalid(
                    &at("maxFailedIndexes"),
                    &json!(m),
                    "must be less than or equal to completions",
                ));
            }
            if let Some(m) = max_failed.filter(|m| *m > INDEXED_LIMIT) {
                causes.push(Cause::invalid(
                    &at("maxFailedIndexes"),
                    &json!(m),
                    &format!("must be less than or equal to {INDEXED_LIMIT}"),
                ));
            }
            if completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT)
                && present(&spec["backoffLimitPerIndex"])
            {
                let high = format!(
                    "must be less than or equal to {HIGH_COMPLETIONS_LIMIT} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
                );
                if max_failed.is_none() {
                    causes.push(Cause::required(
                        &at("maxFailedIndexes"),
                        &format!(
                            "must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"
                        ),
                    ));
                }
                if let Some(p) = parallelism.filter(|p| *p > HIGH_COMPLETIONS_LIMIT) {
                    causes.push(Cause::invalid(&at("parallelism"), &json!(p), &high));
                }
                if let Some(m) = max_failed.filter(|m| *m > HIGH_COMPLETIONS_LIMIT) {
                    causes.push(Cause::invalid(&at("maxFailedIndexes"), &json!(m), &high));
                }
            }
        }
    }
    if !present(mode) || mode == "NonIndexed" {
        for field in ["backoffLimitPerIndex", "maxFailedIndexes"] {
            if present(&spec[field]) {
                causes.push(Cause::invalid(
                    &at(field),
                    &spec[field],
                    "requires indexed completion mode",
                ));
            }
        }
    }
    causes
}

/// Upstream `validatePodFailurePolicy`: rule actions, exactly one of onExitCodes / onPodConditions.
fn pod_failure_policy(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let rules = spec["podFailurePolicy"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let rules_path = format!("{path}.rules");
    if rules.len() > MAX_POD_FAILURE_POLICY_RULES {
        causes.push(too_many(
            &rules_path,
            rules.len(),
            MAX_POD_FAILURE_POLICY_RULES,
        ));
    }
    let template = &spec["template"]["spec"];
    let container_names: Vec<&str> = ["containers", "initContainers"]
        .iter()
        .flat_map(|list| template[*list].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{rules_path}[{i}]");
        let action_path = format!("{rule_path}.action");
        const ACTIONS: [&str; 4] = ["Count", "FailIndex", "FailJob", "Ignore"];
        match rule["action"].as_str().unwrap_or("") {
            "" => causes.push(Cause::required(
                &action_path,
                "valid values: [\"Count\" \"FailIndex\" \"FailJob\" \"Ignore\"]",
            )),
            "FailIndex" if !present(&spec["backoffLimitPerIndex"]) => {
                causes.push(Cause::invalid(
                    &action_path,
                    &rule["action"],
                    "requires the backoffLimitPerIndex to be set",
                ));
            }
            action if !ACTIONS.contains(&action) => {
                causes.push(Cause::not_supported(
                    &action_path,
                    &rule["action"],
                    &ACTIONS,
                ));
            }
            _ => {}
        }
        let exit_codes = &rule["onExitCodes"];
        let conditions = rule["onPodConditions"].as_array().filter(|c| !c.is_empty());
        if present(exit_codes) {
            causes.extend(on_exit_codes(
                exit_codes,
                &format!("{rule_path}.onExitCodes"),
                &container_names,
            ));
        }
        if let Some(conditions) = conditions {
            causes.extend(on_pod_conditions(
                conditions,
                &format!("{rule_path}.onPodConditions"),
            ));
        }
        match (present(exit_codes), conditions.is_some()) {
            (true, true) => causes.push(invalid_without_value(
                &rule_path,
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (false, false) => causes.push(invalid_without_value(
                &rule_path,
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
    }
    causes
}

fn on_exit_codes(req: &Value, path: &str, container_names: &[&str]) -> Vec<Cause> {
    let mut causes = Vec::new();
    let operator = req["operator"].as_str().unwrap_or("");
    let operator_path = format!("{path}.operator");
    match operator {
        "" => causes.push(Cause::required(
            &operator_path,
            "valid values: [\"In\" \"NotIn\"]",
        )),
        "In" | "NotIn" => {}
        _ => causes.push(Cause::not_supported(
            &operator_path,
            &req["operator"],
            &["In", "NotIn"],
        )),
    }
    if let Some(name) = req["containerName"].as_str()
        && !container_names.contains(&name)
    {
        causes.push(Cause::invalid(
            &format!("{path}.containerName"),
            &req["containerName"],
            "must be one of the container or initContainer names in the pod template",
        ));
    }
    let values_path = format!("{path}.values");
    let values: Vec<i64> = req["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect();
    if values.is_empty() {
        causes.push(Cause::invalid(
            &values_path,
            &json!(values),
            "at least one value is required",
        ));
    } else if values.len() > MAX_ON_EXIT_CODES_VALUES {
        causes.push(too_many(
            &values_path,
            values.len(),
            MAX_ON_EXIT_CODES_VALUES,
        ));
    }
    let mut seen = Vec::new();
    for (j, value) in values.iter().enumerate() {
        let value_path = format!("{values_path}[{j}]");
        if operator == "In" && *value == 0 {
            causes.push(Cause::invalid(
                &value_path,
                &json!(value),
                "must not be 0 for the In operator",
            ));
        }
        if seen.contains(value) {
            causes.push(duplicate(&value_path, &json!(value)));
        } else {
            seen.push(*value);
        }
    }
    if values.windows(2).any(|w| w[0] > w[1]) {
        causes.push(Cause::invalid(
            &values_path,
            &json!(values),
            "must be ordered",
        ));
    }
    causes
}

fn on_pod_conditions(patterns: &[Value], path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if patterns.len() > MAX_ON_POD_CONDITIONS {
        causes.push(too_many(path, patterns.len(), MAX_ON_POD_CONDITIONS));
    }
    for (j, pattern) in patterns.iter().enumerate() {
        let pattern_path = format!("{path}[{j}]");
        let kind = pattern["type"].as_str().unwrap_or("");
        let type_path = format!("{pattern_path}.type");
        if kind.is_empty() {
            causes.push(Cause::required(&type_path, ""));
        } else {
            for m in qualified_name_errors(kind) {
                causes.push(Cause::invalid(&type_path, &pattern["type"], &m));
            }
        }
        let status_path = format!("{pattern_path}.status");
        match pattern["status"].as_str().unwrap_or("") {
            "" => causes.push(Cause::required(
                &status_path,
                "valid values: [\"False\" \"True\" \"Unknown\"]",
            )),
            "True" | "False" | "Unknown" => {}
            _ => causes.push(Cause::not_supported(
                &status_path,
                &pattern["status"],
                &["False", "True", "Unknown"],
            )),
        }
    }
    causes
}

fn pod_replacement_policy(spec: &Value, path: &str) -> Vec<Cause> {
    let policy = &spec["podReplacementPolicy"];
    let Some(value) = policy.as_str() else {
        return Vec::new();
    };
    if present(&spec["podFailurePolicy"]) {
        if value != "Failed" {
            return vec![Cause::not_supported(path, policy, &["Failed"])];
        }
    } else if value != "Failed" && value != "TerminatingOrFailed" {
        return vec![Cause::not_supported(
            path,
            policy,
            &["Failed", "TerminatingOrFailed"],
        )];
    }
    Vec::new()
}

/// Upstream `validateSuccessPolicy` of an Indexed Job.
fn success_policy(spec: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let rules = spec["successPolicy"]["rules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let rules_path = format!("{path}.rules");
    if rules.is_empty() {
        causes.push(Cause::required(
            &rules_path,
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if rules.len() > MAX_SUCCESS_POLICY_RULES {
        causes.push(too_many(&rules_path, rules.len(), MAX_SUCCESS_POLICY_RULES));
    }
    // Upstream dereferences completions here; a missing one is already reported as required.
    let Some(completions) = spec["completions"].as_i64() else {
        return causes;
    };
    for (i, rule) in rules.iter().enumerate() {
        let rule_path = format!("{rules_path}[{i}]");
        let indexes = &rule["succeededIndexes"];
        let count = &rule["succeededCount"];
        if !present(indexes) && !present(count) {
            causes.push(Cause::required(
                &rule_path,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total = 0;
        if let Some(text) = indexes.as_str() {
            let indexes_path = format!("{rule_path}.succeededIndexes");
            if text.len() > MAX_SUCCEEDED_INDEXES_BYTES {
                causes.push(Cause::too_long(&indexes_path, MAX_SUCCEEDED_INDEXES_BYTES));
            }
            match index_intervals(text, completions) {
                Ok(n) => total = n,
                Err(e) => causes.push(Cause::invalid(
                    &indexes_path,
                    indexes,
                    &format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(n) = count.as_i64() {
            let count_path = format!("{rule_path}.succeededCount");
            non_negative(&mut causes, &count_path, count);
            if n > completions {
                causes.push(Cause::invalid(
                    &count_path,
                    &json!(n),
                    &format!(
                        "must be less than or equal to {completions} (the number of specified completions)"
                    ),
                ));
            }
            if present(indexes) && n > total {
                causes.push(Cause::invalid(
                    &count_path,
                    &json!(n),
                    &format!(
                        "must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"
                    ),
                ));
            }
        }
    }
    causes
}

/// Upstream `validateIndexesFormat`: `1,3-5,7` with increasing intervals below `completions`;
/// returns how many indexes it names.
fn index_intervals(text: &str, completions: i64) -> Result<i64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    let mut last: Option<i64> = None;
    let mut total = 0;
    for interval in text.split(',') {
        let (x, y) = index_interval(interval, completions)?;
        if let Some(last) = last.filter(|last| *last >= x) {
            return Err(format!(
                "non-increasing order, previous: {last}, current: {x}"
            ));
        }
        total += y - x + 1;
        last = Some(y);
    }
    Ok(total)
}

fn index_interval(interval: &str, completions: i64) -> Result<(i64, i64), String> {
    let limits: Vec<&str> = interval.split('-').collect();
    if limits.len() > 2 {
        return Err(format!(
            "the fragment {} violates the requirement that an index interval can have at most two parts separated by '-'",
            json!(interval)
        ));
    }
    let parse = |s: &str| -> Result<i64, String> {
        let n = i64::from_str(s)
            .map_err(|_| format!("cannot convert string to integer for index: {}", json!(s)))?;
        if n >= completions {
            return Err(format!("too large index: {}", json!(s)));
        }
        Ok(n)
    };
    let x = parse(limits[0])?;
    match limits.get(1) {
        None => Ok((x, x)),
        Some(high) => {
            let y = parse(high)?;
            if x >= y {
                return Err(format!("non-increasing order, previous: {x}, current: {y}"));
            }
            Ok((x, y))
        }
    }
}

/// Upstream's check that an Indexed Job's last pod hostname (`<name>-<completions-1>`) is a DNS label.
fn indexed_hostnames(obj: &Value) -> Vec<Cause> {
    let spec = &obj["spec"];
    let Some(completions) = spec["completions"].as_i64().filter(|c| *c > 0) else {
        return Vec::new();
    };
    if !is_indexed(spec) {
        return Vec::new();
    }
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let hostname = format!("{name}-{}", completions - 1);
    let label_ok = hostname.len() <= 63
        && hostname
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !hostname.starts_with('-')
        && !hostname.ends_with('-');
    if label_ok {
        return Vec::new();
    }
    vec![Cause::invalid(
        "metadata.name",
        &json!(name),
        &format!("will not able to create pod with invalid DNS label: {hostname}"),
    )]
}

/// Upstream `validateCompletions`: completions are immutable, except that an Indexed Job may change
/// them together with parallelism (kept equal), which is how it is scaled.
fn completions_update(spec: &Value, old_spec: &Value) -> Vec<Cause> {
    let (new, old) = (&spec["completions"], &old_spec["completions"]);
    if !is_indexed(spec) {
        let mut causes = Vec::new();
        immutable(&mut causes, "spec.completions", new, old);
        return causes;
    }
    if semantic(new) == semantic(old) || !present(new) {
        return Vec::new();
    }
    if new.as_i64() != spec["parallelism"].as_i64() {
        return vec![Cause::invalid(
            "spec.completions",
            new,
            "can only be modified in tandem with spec.parallelism",
        )];
    }
    Vec::new()
}

/// The template may not change, except that a suspended Job which never started may change its
/// pods' scheduling directives (node affinity, nodeSelector, tolerations, scheduling gates) and
/// their labels and annotations (upstream `validatePodTemplateUpdate` with
/// `AllowMutableSchedulingDirectives`).
fn template_update(new: &Value, old: &Value) -> Vec<Cause> {
    let template = &new["spec"]["template"];
    let mut old_template = old["spec"]["template"].clone();
    let never_started = !present(&old["status"]["startTime"]);
    if old["spec"]["suspend"] == json!(true) && never_started {
        allow_scheduling_changes(template, &mut old_template);
    }
    let mut causes = Vec::new();
    immutable(&mut causes, "spec.template", template, &old_template);
    causes
}

/// Copies the mutable scheduling directives of `template` into `old`, so only other changes remain.
fn allow_scheduling_changes(template: &Value, old: &mut Value) {
    let set = |target: &mut Value, key: &str, value: &Value| {
        if let Some(m) = target.as_object_mut() {
            if present(value) {
                m.insert(key.to_string(), value.clone());
            } else {
                m.remove(key);
            }
        }
    };
    if !old["spec"].is_object() {
        old["spec"] = json!({});
    }
    if !old["metadata"].is_object() {
        old["metadata"] = json!({});
    }
    let affinity = &template["spec"]["affinity"];
    let node_affinity = &affinity["nodeAffinity"];
    let old_affinity = &mut old["spec"]["affinity"];
    match (present(affinity), present(old_affinity)) {
        // Clearing the affinity is allowed when node affinity was all it held.
        (false, true) => set(old_affinity, "nodeAffinity", &Value::Null),
        (true, false) => {
            *old_affinity = json!({});
            set(old_affinity, "nodeAffinity", node_affinity);
        }
        (true, true) => set(old_affinity, "nodeAffinity", node_affinity),
        (false, false) => {}
    }
    for key in ["nodeSelector", "tolerations", "schedulingGates"] {
        set(&mut old["spec"], key, &template["spec"][key]);
    }
    for key in ["labels", "annotations"] {
        set(&mut old["metadata"], key, &template["metadata"][key]);
    }
}

// === CronJob ===

/// CronJob create and update (upstream `ValidateCronJobCreate` / `validateCronJobSpec`): the name
/// leaves room for its Jobs' suffix, the schedule parses, the time zone exists, policies and limits
/// are in range, and the job template is a valid Job spec whose selector will be generated.
///
/// Upstream skips the name length and `TZ` in the schedule on update for objects that predate those
/// rules; devcluster never stores such objects, so the create rules serve both.
pub fn cronjob(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let spec = &obj["spec"];
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    if name.len() > MAX_CRONJOB_NAME {
        causes.push(Cause::invalid(
            "metadata.name",
            &json!(name),
            &format!("must be no more than {MAX_CRONJOB_NAME} characters"),
        ));
    }
    let schedule = spec["schedule"].as_str().unwrap_or("");
    if schedule.is_empty() {
        causes.push(Cause::required("spec.schedule", ""));
    } else {
        if let Err(e) = cron_schedule::parse_standard(schedule, is_time_zone) {
            causes.push(Cause::invalid("spec.schedule", &json!(schedule), &e));
        }
        if schedule.contains("TZ") {
            causes.push(Cause::invalid(
                "spec.schedule",
                &json!(schedule),
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    non_negative(
        &mut causes,
        "spec.startingDeadlineSeconds",
        &spec["startingDeadlineSeconds"],
    );
    if let Some(zone) = spec["timeZone"].as_str() {
        causes.extend(time_zone(zone));
    }
    let policy = &spec["concurrencyPolicy"];
    match policy.as_str().unwrap_or("") {
        "Allow" | "Forbid" | "Replace" => {}
        "" => causes.push(Cause::required("spec.concurrencyPolicy", "")),
        _ => causes.push(Cause::not_supported(
            "spec.concurrencyPolicy",
            policy,
            &["Allow", "Forbid", "Replace"],
        )),
    }
    let job_spec = &spec["jobTemplate"]["spec"];
    causes.extend(job_spec_rules(job_spec, "spec.jobTemplate.spec"));
    if present(&job_spec["selector"]) {
        causes.push(Cause::invalid(
            "spec.jobTemplate.spec.selector",
            &job_spec["selector"],
            "`selector` will be auto-generated",
        ));
    }
    if job_spec["manualSelector"] == json!(true) {
        causes.push(Cause::not_supported(
            "spec.jobTemplate.spec.manualSelector",
            &json!(true),
            &["nil", "false"],
        ));
    }
    for field in ["successfulJobsHistoryLimit", "failedJobsHistoryLimit"] {
        non_negative(&mut causes, &format!("spec.{field}"), &spec[field]);
    }
    causes
}

/// Whether `name` is a time zone of the IANA database (compiled in, as kube-apiserver embeds it).
fn is_time_zone(name: &str) -> bool {
    name == "UTC" || chrono_tz::Tz::from_str(name).is_ok()
}

/// Upstream `validateTimeZone`.
fn time_zone(zone: &str) -> Vec<Cause> {
    let field = "spec.timeZone";
    let value = json!(zone);
    if zone.is_empty() {
        return vec![Cause::invalid(
            field,
            &value,
            "timeZone must be nil or non-empty string",
        )];
    }
    let unknown = || {
        vec![Cause::invalid(
            field,
            &value,
            &format!("unknown time zone {zone}"),
        )]
    };
    let part_ok = |part: &str| {
        part != "."
            && part != ".."
            && !part.starts_with('-')
            && (1..=14).contains(&part.len())
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-+".contains(c))
    };
    if !zone.split('/').all(part_ok) {
        return unknown();
    }
    if zone.eq_ignore_ascii_case("Local") {
        return vec![Cause::invalid(
            field,
            &value,
            "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
        )];
    }
    if !is_time_zone(zone) {
        return unknown();
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_object(spec: Value) -> Value {
        let uid = "u-1";
        let mut obj = json!({
            "metadata": {"name": "pi", "uid": uid},
            "spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 6,
                "completionMode": "NonIndexed", "suspend": false, "manualSelector": false,
                "podReplacementPolicy": "TerminatingOrFailed",
                "selector": {"matchLabels": {CONTROLLER_UID: uid}},
                "template": {
                    "metadata": {"labels": {CONTROLLER_UID: uid, JOB_NAME: "pi",
                                            LEGACY_CONTROLLER_UID: uid, LEGACY_JOB_NAME: "pi"}},
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}
                }
            }
        });
        if let (Some(base), Some(extra)) = (obj["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        obj
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_defaulted_job_is_valid() {
        assert_eq!(job(&job_object(json!({}))), vec![]);
    }

    #[test]
    fn a_job_with_restart_policy_always_gets_upstreams_required_cause() {
        let mut obj = job_object(json!({}));
        obj["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        let causes = job(&obj);
        assert_eq!(
            causes,
            vec![Cause::required(
                "spec.template.spec.restartPolicy",
                "valid values: \"OnFailure\", \"Never\""
            )]
        );
        assert_eq!(
            causes[0].message,
            "Required value: valid values: \"OnFailure\", \"Never\""
        );
    }

    #[test]
    fn negative_counts_are_refused() {
        let obj =
            job_object(json!({"parallelism": -1, "backoffLimit": -2, "activeDeadlineSeconds": -3}));
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            [
                "spec.parallelism",
                "spec.activeDeadlineSeconds",
                "spec.backoffLimit"
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: -1: must be greater than or equal to 0"
        );
    }

    #[test]
    fn indexed_jobs_need_completions_and_per_index_limits_need_indexed_jobs() {
        let obj = job_object(json!({"completionMode": "Indexed", "completions": null}));
        assert_eq!(fields(&job(&obj)), ["spec.completions"]);
        let obj = job_object(json!({"backoffLimitPerIndex": 1, "maxFailedIndexes": 1}));
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            ["spec.backoffLimitPerIndex", "spec.maxFailedIndexes"]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: 1: requires indexed completion mode"
        );
        let obj = job_object(
            json!({"completionMode": "Indexed", "completions": 3, "maxFailedIndexes": 4}),
        );
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            ["spec.backoffLimitPerIndex", "spec.maxFailedIndexes"]
        );
        let obj = job_object(json!({"completionMode": "Sometimes"}));
        assert_eq!(
            job(&obj)[0].message,
            "Unsupported value: \"Sometimes\": supported values: \"NonIndexed\", \"Indexed\""
        );
    }

    #[test]
    fn pod_failure_policy_rules_need_exactly_one_requirement_and_known_values() {
        let obj = job_object(
            json!({"podReplacementPolicy": "Failed", "podFailurePolicy": {"rules": [
                {"action": "FailJob"},
                {"action": "Explode", "onExitCodes": {"operator": "In", "values": [3, 0, 3]},
                 "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                {"action": "FailIndex", "onExitCodes": {"operator": "NotIn", "values": [1], "containerName": "x"}},
            ]}}),
        );
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            [
                "spec.podFailurePolicy.rules[0]",
                "spec.podFailurePolicy.rules[1].action",
                "spec.podFailurePolicy.rules[1].onExitCodes.values[1]",
                "spec.podFailurePolicy.rules[1].onExitCodes.values[2]",
                "spec.podFailurePolicy.rules[1].onExitCodes.values",
                "spec.podFailurePolicy.rules[1]",
                "spec.podFailurePolicy.rules[2].action",
                "spec.podFailurePolicy.rules[2].onExitCodes.containerName",
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: specifying one of OnExitCodes and OnPodConditions is required"
        );
        assert_eq!(causes[3].message, "Duplicate value: 3");
    }

    #[test]
    fn a_pod_failure_policy_needs_restart_policy_never_and_replacement_policy_failed() {
        let mut obj = job_object(json!({"podFailurePolicy": {"rules": [
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]}}));
        obj["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            [
                "spec.podReplacementPolicy",
                "spec.template.spec.restartPolicy"
            ]
        );
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"TerminatingOrFailed\": supported values: \"Failed\""
        );
    }

    #[test]
    fn success_policies_need_an_indexed_job_and_well_formed_rules() {
        let obj = job_object(json!({"successPolicy": {"rules": [{"succeededCount": 1}]}}));
        assert_eq!(fields(&job(&obj)), ["spec.successPolicy"]);
        let obj = job_object(json!({"completionMode": "Indexed", "completions": 5,
            "successPolicy": {"rules": [{}, {"succeededIndexes": "0-2,2", "succeededCount": 6}, {"succeededIndexes": "1,3", "succeededCount": 3}]}}));
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            [
                "spec.successPolicy.rules[0]",
                "spec.successPolicy.rules[1].succeededIndexes",
                "spec.successPolicy.rules[1].succeededCount",
                "spec.successPolicy.rules[1].succeededCount",
                "spec.successPolicy.rules[2].succeededCount",
            ]
        );
        assert_eq!(
            causes[1].message,
            "Invalid value: \"0-2,2\": error parsing succeededIndexes: non-increasing order, previous: 2, current: 2"
        );
        assert_eq!(
            causes[4].message,
            "Invalid value: 3: must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"
        );
    }

    #[test]
    fn the_selector_must_be_generated_and_match_the_template() {
        let obj = job_object(json!({"selector": {"matchLabels": {"app": "x"}}}));
        let causes = job(&obj);
        assert_eq!(
            fields(&causes),
            ["spec.selector", "spec.template.metadata.labels"]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: {\"matchLabels\":{\"app\":\"x\"}}: `selector` not auto-generated"
        );
        let mut obj = job_object(json!({}));
        obj["spec"]["template"]["metadata"]["labels"][LEGACY_JOB_NAME] = json!("other");
        let causes = job(&obj);
        assert_eq!(fields(&causes), ["spec.template.metadata.labels[job-name]"]);
        assert!(
            causes[0].message.ends_with("must be 'pi'"),
            "{}",
            causes[0].message
        );
        let obj =
            job_object(json!({"manualSelector": true, "selector": {"matchLabels": {"app": "x"}}}));
        assert_eq!(fields(&job(&obj)), ["spec.template.metadata.labels"]);
    }

    #[test]
    fn an_indexed_jobs_last_hostname_must_be_a_dns_label() {
        let mut obj = job_object(json!({"completionMode": "Indexed", "completions": 10}));
        obj["metadata"]["name"] = json!("a".repeat(62));
        for key in [JOB_NAME, LEGACY_JOB_NAME] {
            obj["spec"]["template"]["metadata"]["labels"][key] = json!("a".repeat(62));
        }
        let causes = job(&obj);
        assert_eq!(fields(&causes), ["metadata.name"]);
        assert!(causes[0].message.ends_with(&format!(
            "will not able to create pod with invalid DNS label: {}-9",
            "a".repeat(62)
        )));
    }

    #[test]
    fn selector_completions_and_template_are_immutable() {
        let old = job_object(json!({}));
        assert_eq!(job_update(&old, &old), vec![]);
        let mut new = old.clone();
        new["spec"]["completions"] = json!(2);
        let causes = job_update(&new, &old);
        assert_eq!(fields(&causes), ["spec.completions"]);
        assert_eq!(causes[0].message, "Invalid value: 2: field is immutable");
        let mut new = old.clone();
        new["spec"]["selector"]["matchLabels"]["extra"] = json!("x");
        new["spec"]["template"]["metadata"]["labels"]["extra"] = json!("x");
        assert_eq!(
            fields(&job_update(&new, &old)),
            ["spec.selector", "spec.template"]
        );
        let mut new = old.clone();
        new["spec"]["podReplacementPolicy"] = json!("Failed");
        new["spec"]["parallelism"] = json!(4);
        new["spec"]["suspend"] = json!(true);
        assert_eq!(job_update(&new, &old), vec![]);
    }

    #[test]
    fn an_indexed_job_scales_by_changing_completions_and_parallelism_together() {
        let old =
            job_object(json!({"completionMode": "Indexed", "completions": 3, "parallelism": 3}));
        let mut new = old.clone();
        new["spec"]["completions"] = json!(5);
        new["spec"]["parallelism"] = json!(5);
        assert_eq!(job_update(&new, &old), vec![]);
        new["spec"]["parallelism"] = json!(4);
        let causes = job_update(&new, &old);
        assert_eq!(
            causes[0].message,
            "Invalid value: 5: can only be modified in tandem with spec.parallelism"
        );
    }

    #[test]
    fn a_suspended_job_that_never_started_may_change_its_scheduling_directives() {
        let mut old = job_object(json!({"suspend": true}));
        old["spec"]["template"]["spec"]["affinity"] =
            json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}});
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"zone": "a"});
        new["spec"]["template"]["spec"]["tolerations"] =
            json!([{"key": "k", "operator": "Exists"}]);
        new["spec"]["template"]["spec"]["schedulingGates"] = json!([{"name": "g"}]);
        new["spec"]["template"]["metadata"]["annotations"] = json!({"a": "b"});
        new["spec"]["template"]["spec"]["affinity"] = Value::Null;
        assert_eq!(job_update(&new, &old), vec![]);
        let mut started = old.clone();
        started["status"]["startTime"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(fields(&job_update(&new, &started)), ["spec.template"]);
        new["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other");
        assert_eq!(fields(&job_update(&new, &old)), ["spec.template"]);
    }

    fn cronjob_object(spec: Value) -> Value {
        let mut obj = json!({
            "metadata": {"name": "nightly"},
            "spec": {
                "schedule": "*/5 * * * *", "concurrencyPolicy": "Allow", "suspend": false,
                "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
                "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                    "containers": [{"name": "c", "image": "busybox"}]}}}}
            }
        });
        if let (Some(base), Some(extra)) = (obj["spec"].as_object_mut(), spec.as_object()) {
            for (k, v) in extra {
                base.insert(k.clone(), v.clone());
            }
        }
        obj
    }

    #[test]
    fn a_defaulted_cronjob_is_valid() {
        assert_eq!(
            cronjob(&cronjob_object(json!({"timeZone": "Europe/Berlin"}))),
            vec![]
        );
    }

    #[test]
    fn a_cronjob_with_a_bad_schedule_or_time_zone_is_refused() {
        let causes = cronjob(&cronjob_object(json!({"schedule": "61 * * * *"})));
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.schedule",
                &json!("61 * * * *"),
                "end of range (61) above maximum (59): 61"
            )]
        );
        let causes = cronjob(&cronjob_object(json!({"timeZone": "Mars/Olympus_Mons"})));
        assert_eq!(
            causes[0].message,
            "Invalid value: \"Mars/Olympus_Mons\": unknown time zone Mars/Olympus_Mons"
        );
        let causes = cronjob(&cronjob_object(json!({"timeZone": "local"})));
        assert!(
            causes[0]
                .message
                .ends_with("https://www.iana.org/time-zones")
        );
        let causes = cronjob(&cronjob_object(json!({"schedule": "TZ=UTC 0 * * * *"})));
        assert_eq!(
            causes[0].message,
            "Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        );
    }

    #[test]
    fn cronjob_policies_limits_and_template_are_checked() {
        let mut obj = cronjob_object(json!({"concurrencyPolicy": "Sometimes",
            "startingDeadlineSeconds": -1, "failedJobsHistoryLimit": -1}));
        obj["metadata"]["name"] = json!("n".repeat(53));
        obj["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        let causes = cronjob(&obj);
        assert_eq!(
            fields(&causes),
            [
                "metadata.name",
                "spec.startingDeadlineSeconds",
                "spec.concurrencyPolicy",
                "spec.jobTemplate.spec.template.spec.restartPolicy",
                "spec.jobTemplate.spec.selector",
                "spec.failedJobsHistoryLimit",
            ]
        );
        assert_eq!(
            causes[0].message,
            format!(
                "Invalid value: \"{}\": must be no more than 52 characters",
                "n".repeat(53)
            )
        );
    }
}
