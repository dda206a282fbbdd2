//! Defaulting and create-time preparation of autoscaling/v2 HorizontalPodAutoscalers and
//! networking.k8s.io/v1 NetworkPolicies, as kube-apiserver v1.36's defaulters and strategies set them
//! (`pkg/apis/autoscaling/v2/defaults.go`, `pkg/apis/networking/v1/defaults.go`).

use serde_json::{Value, json};

use super::defaults::dflt;

/// HPA defaults: `minReplicas` 1; no metrics means 80 % average CPU utilization; a `behavior` given in
/// part gets upstream's scale-up and scale-down rules for what it leaves out.
pub fn horizontal_pod_autoscaler(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    dflt(spec, "minReplicas", json!(1));
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) else {
        return;
    };
    let scale_up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ]});
    // No stabilization default for scale-down: the controller's --horizontal-pod-autoscaler-
    // downscale-stabilization applies instead.
    let scale_down = json!({"selectPolicy": "Max", "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ]});
    for (key, defaults) in [("scaleUp", scale_up), ("scaleDown", scale_down)] {
        let rules = behavior.entry(key).or_insert(Value::Null);
        if !rules.is_object() {
            *rules = json!({});
        }
        if let (Some(rules), Value::Object(defaults)) = (rules.as_object_mut(), defaults) {
            for (field, value) in defaults {
                dflt(rules, &field, value);
            }
        }
    }
}

/// A new HPA's status is the zero status, serialized with Go's rules: only `desiredReplicas` has no
/// `omitempty`.
pub fn horizontal_pod_autoscaler_create(v: &mut Value) {
    if let Some(m) = v.as_object_mut() {
        m.insert("status".into(), json!({"desiredReplicas": 0}));
    }
}

/// NetworkPolicy defaults: every port's protocol is TCP; without `policyTypes`, a policy is an
/// Ingress policy, and an Egress one too when it has egress rules.
pub fn network_policy(v: &mut Value) {
    let Some(spec) = v.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for direction in ["ingress", "egress"] {
        let rules = spec.get_mut(direction).and_then(Value::as_array_mut);
        for rule in rules.into_iter().flatten() {
            let ports = rule.get_mut("ports").and_then(Value::as_array_mut);
            for port in ports.into_iter().flatten().filter_map(Value::as_object_mut) {
                dflt(port, "protocol", json!("TCP"));
            }
        }
    }
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let egress = spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty());
        let types = if egress {
            json!(["Ingress", "Egress"])
        } else {
            json!(["Ingress"])
        };
        spec.insert("policyTypes".into(), types);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hpa_without_metrics_scales_on_80_percent_cpu_from_one_replica() {
        let mut hpa = json!({"spec": {"maxReplicas": 5, "scaleTargetRef": {"kind": "Deployment", "name": "w"}}});
        horizontal_pod_autoscaler(&mut hpa);
        assert_eq!(hpa["spec"]["minReplicas"], 1);
        assert_eq!(
            hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(
            hpa["spec"].get("behavior").is_none(),
            "no behavior is made up"
        );
    }

    #[test]
    fn a_partial_behavior_gets_upstreams_rules_for_what_it_leaves_out() {
        let mut hpa =
            json!({"spec": {"behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}}}});
        horizontal_pod_autoscaler(&mut hpa);
        let b = &hpa["spec"]["behavior"];
        assert_eq!(b["scaleDown"]["stabilizationWindowSeconds"], 60);
        assert_eq!(b["scaleDown"]["selectPolicy"], "Max");
        assert_eq!(b["scaleDown"]["policies"][0]["type"], "Percent");
        assert_eq!(b["scaleUp"]["stabilizationWindowSeconds"], 0);
        assert_eq!(b["scaleUp"]["policies"][0]["value"], 4);
    }

    #[test]
    fn a_network_policy_is_ingress_unless_it_has_egress_rules_and_ports_default_to_tcp() {
        let mut np = json!({"spec": {"podSelector": {}, "ingress": [{"ports": [{"port": 7450}]}]}});
        network_policy(&mut np);
        assert_eq!(np["spec"]["policyTypes"], json!(["Ingress"]));
        assert_eq!(np["spec"]["ingress"][0]["ports"][0]["protocol"], "TCP");
        let mut both = json!({"spec": {"podSelector": {}, "egress": [{}]}});
        network_policy(&mut both);
        assert_eq!(both["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    }
}
