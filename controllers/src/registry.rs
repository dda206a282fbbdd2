//! The registry of built-in controllers: each one's name, its `--concurrent-*-syncs` flag, its
//! default concurrency and the RBAC grants its reconcile needs, listed once, here. `flotilla worker`
//! grows a flag per entry, `--controllers` picks entries by name and `flotilla rbac` unites their
//! grants, without editing the commands.

use flotilla_sdk::DynController;
use flotilla_sdk::k8s_openapi::api::apps::v1::ReplicaSet;
use flotilla_sdk::k8s_openapi::api::core::v1::ReplicationController;

use crate::rbac::{self, Rules};
use crate::settings::Settings;
use crate::{
    cronjob, daemonset, deployment, disruption, endpoints, endpointslice, endpointslicemirroring,
    garbagecollector, job, namespace, nodeipam, nodelifecycle, podgc, replicaset, serviceaccount,
    servicecidrs, statefulset, tainteviction, ttl, ttlafterfinished,
};

/// One built-in controller.
#[derive(Debug, Clone, Copy)]
pub struct Builtin {
    /// kube-controller-manager's name (`replicaset`, `deployment`, …), used by `--controllers` and as
    /// the controller's name in the fleet.
    pub name: &'static str,
    /// kube-controller-manager's concurrency flag, without the leading dashes: mostly `concurrent-<name>-syncs`,
    /// but it abbreviates some (`concurrent-rc-syncs`, `concurrent-gc-syncs`) and words one otherwise
    /// (`mirroring-concurrent-service-endpoint-syncs`).
    pub flag: &'static str,
    /// kube-controller-manager's default of its concurrency flag.
    pub default_concurrency: u32,
    /// kube-controller-manager's canonical name of the same controller (`replicaset-controller`, …,
    /// from its `names` package), which its `--controllers` takes beside [`Self::name`] as an alias.
    pub kcm_name: &'static str,
    /// The source kube-controller-manager's controller reports its Events as (`source.component`,
    /// `reportingComponent`); ours reports the same.
    pub event_source: &'static str,
    build: fn(&str) -> DynController,
    worker_rules: fn() -> Rules,
}

impl Builtin {
    /// The controller, at its default concurrency.
    pub fn controller(&self) -> DynController {
        self.finish((self.build)(self.name))
    }

    /// The controller, at its default concurrency, configured by `settings` (the flags besides
    /// concurrency that kube-controller-manager has for it, e.g. `podgc`'s
    /// `--terminated-pod-gc-threshold`); [`Self::controller`] for a controller that takes none.
    pub fn controller_with(&self, settings: &Settings) -> DynController {
        let controller: DynController = match self.name {
            PODGC => podgc::controller(self.name, settings.terminated_pod_gc_threshold).into(),
            CRONJOB => {
                // The worker validates `--cronjob-minute`; a bad value from elsewhere keeps the
                // wall clock rather than failing.
                let clock = cronjob::ScheduleClock::with_minute(settings.cronjob_minute)
                    .unwrap_or_else(|err| {
                        tracing::warn!(error = %err, "keeping real minutes for the cronjob controller");
                        cronjob::ScheduleClock::default()
                    });
                cronjob::controller(self.name, clock).into()
            }
            ENDPOINTSLICE => {
                endpointslice::controller(self.name, settings.max_endpoints_per_slice).into()
            }
            NODELIFECYCLE => nodelifecycle::controller(self.name, settings.node_lifecycle).into(),
            ENDPOINT => {
                endpoints::controller(self.name, settings.endpoint_updates_batch_period).into()
            }
            ENDPOINTSLICEMIRRORING => endpointslicemirroring::controller(
                self.name,
                settings.mirroring_max_endpoints_per_subset,
                settings.mirroring_endpointslice_updates_batch_period,
            )
            .into(),
            NODEIPAM => nodeipam::controller(self.name, &settings.node_ipam).into(),
            _ => (self.build)(self.name),
        };
        self.finish(controller)
    }

    /// `controller` at this controller's default concurrency, reporting Events as its source.
    fn finish(&self, controller: DynController) -> DynController {
        controller
            .with_concurrency(self.default_concurrency)
            .with_event_source(self.event_source)
    }

    /// What the controller's reconcile asks of the Kubernetes API: the RBAC grants a worker running
    /// it needs (see [`crate::rbac`]).
    pub fn worker_rules(&self) -> Rules {
        (self.worker_rules)()
    }
}

/// The pod GC's name: [`Builtin::controller_with`] sets its threshold.
const PODGC: &str = "podgc";

/// The cronjob controller's name: [`Builtin::controller_with`] sets its schedule minute.
const CRONJOB: &str = "cronjob";

/// The endpointslice controller's name: [`Builtin::controller_with`] sets its slice size.
const ENDPOINTSLICE: &str = "endpointslice";

/// The node-lifecycle controller's name: [`Builtin::controller_with`] sets its grace periods and
/// eviction rates.
const NODELIFECYCLE: &str = "nodelifecycle";

/// The endpoints controller's name: [`Builtin::controller_with`] sets its batch period.
const ENDPOINT: &str = "endpoint";

/// The endpointslice-mirroring controller's name: [`Builtin::controller_with`] sets its subset
/// limit and batch period.
const ENDPOINTSLICEMIRRORING: &str = "endpointslicemirroring";

/// The node-ipam controller's name: [`Builtin::controller_with`] sets its CIDRs.
const NODEIPAM: &str = "nodeipam";

/// Every built-in controller, in the order `flotilla worker --help` lists their flags.
pub fn builtins() -> &'static [Builtin] {
    &[
        Builtin {
            name: "serviceaccount",
            kcm_name: "serviceaccount-controller",
            event_source: "serviceaccount-controller",
            flag: "concurrent-serviceaccount-syncs",
            // kube-controller-manager runs this controller with one worker and has no flag for it
            // (`startServiceAccountController` calls `Run(ctx, 1)`;
            // `--concurrent-serviceaccount-token-syncs` belongs to the token controller); ours is
            // `--concurrent-serviceaccount-syncs` with that default.
            default_concurrency: 1,
            build: |name| serviceaccount::controller(name).into(),
            worker_rules: rbac::serviceaccount,
        },
        Builtin {
            name: "replicaset",
            kcm_name: "replicaset-controller",
            event_source: "replicaset-controller",
            flag: "concurrent-replicaset-syncs",
            default_concurrency: 5,
            build: |name| replicaset::controller::<ReplicaSet>(name).into(),
            worker_rules: rbac::replicaset,
        },
        Builtin {
            name: "deployment",
            kcm_name: "deployment-controller",
            event_source: "deployment-controller",
            flag: "concurrent-deployment-syncs",
            default_concurrency: 5,
            build: |name| deployment::controller(name).into(),
            worker_rules: rbac::deployment,
        },
        Builtin {
            name: "replicationcontroller",
            kcm_name: "replicationcontroller-controller",
            event_source: "replication-controller",
            flag: "concurrent-rc-syncs",
            default_concurrency: 5,
            build: |name| replicaset::controller::<ReplicationController>(name).into(),
            worker_rules: rbac::replicationcontroller,
        },
        Builtin {
            name: "garbagecollector",
            kcm_name: "garbage-collector-controller",
            event_source: "garbage-collector-controller",
            flag: "concurrent-gc-syncs",
            default_concurrency: 20,
            build: |name| garbagecollector::controller(name).into(),
            worker_rules: rbac::garbagecollector,
        },
        Builtin {
            name: "namespace",
            kcm_name: "namespace-controller",
            event_source: "namespace-controller",
            flag: "concurrent-namespace-syncs",
            default_concurrency: 10,
            build: |name| namespace::controller(name).into(),
            worker_rules: rbac::namespace,
        },
        Builtin {
            name: "job",
            kcm_name: "job-controller",
            event_source: "job-controller",
            flag: "concurrent-job-syncs",
            default_concurrency: 5,
            build: |name| job::controller(name).into(),
            worker_rules: rbac::job,
        },
        Builtin {
            name: "ttl-after-finished",
            kcm_name: "ttl-after-finished-controller",
            event_source: "ttl-after-finished-controller",
            flag: "concurrent-ttl-after-finished-syncs",
            default_concurrency: 5,
            build: |name| ttlafterfinished::controller(name).into(),
            worker_rules: rbac::ttlafterfinished,
        },
        Builtin {
            name: PODGC,
            kcm_name: "pod-garbage-collector-controller",
            event_source: "pod-garbage-collector-controller",
            flag: "concurrent-podgc-syncs",
            // kube-controller-manager runs the pod GC as one loop and has no flag for its
            // concurrency; one pass is one key here, so one at a time is all it uses.
            default_concurrency: 1,
            build: |name| {
                podgc::controller(name, Settings::default().terminated_pod_gc_threshold).into()
            },
            worker_rules: rbac::podgc,
        },
        Builtin {
            name: CRONJOB,
            kcm_name: "cronjob-controller",
            event_source: "cronjob-controller",
            flag: "concurrent-cron-job-syncs",
            default_concurrency: 5,
            build: |name| cronjob::controller(name, cronjob::ScheduleClock::default()).into(),
            worker_rules: rbac::cronjob,
        },
        Builtin {
            name: "statefulset",
            kcm_name: "statefulset-controller",
            event_source: "statefulset-controller",
            flag: "concurrent-statefulset-syncs",
            default_concurrency: 5,
            build: |name| statefulset::controller(name).into(),
            worker_rules: rbac::statefulset,
        },
        Builtin {
            name: "disruption",
            kcm_name: "disruption-controller",
            // Upstream's recorder in `pkg/controller/disruption` reports as `controllermanager`.
            event_source: "controllermanager",
            flag: "concurrent-disruption-syncs",
            // kube-controller-manager runs this controller with one worker (plus its recheck and
            // stale-pod queues) and has no flag for it; ours is `--concurrent-disruption-syncs`
            // with that default: one sync per PDB is cheap, and the fleet's workers add up.
            default_concurrency: 1,
            build: |name| disruption::controller(name).into(),
            worker_rules: rbac::disruption,
        },
        Builtin {
            name: "daemonset",
            kcm_name: "daemonset-controller",
            event_source: "daemonset-controller",
            flag: "concurrent-daemonset-syncs",
            default_concurrency: 2,
            build: |name| daemonset::controller(name).into(),
            worker_rules: rbac::daemonset,
        },
        Builtin {
            name: NODEIPAM,
            kcm_name: "node-ipam-controller",
            // Upstream's range allocator records as `cidrAllocator`.
            event_source: "cidrAllocator",
            flag: "concurrent-node-ipam-syncs",
            // kube-controller-manager has no flag for it (its range allocator runs 30 internal
            // workers). Here one key does every allocation, one pass at a time fleet-wide (see the
            // controller's documentation), so 1 is all it can use.
            default_concurrency: 1,
            build: |name| nodeipam::controller(name, &nodeipam::NodeIpamConfig::default()).into(),
            worker_rules: rbac::nodeipam,
        },
        Builtin {
            name: "ttl",
            kcm_name: "ttl-controller",
            // It writes no Events; upstream's has no recorder.
            event_source: "ttl-controller",
            flag: "concurrent-ttl-syncs",
            // kube-controller-manager has no flag for it and runs 5 workers.
            default_concurrency: 5,
            build: |name| ttl::controller(name).into(),
            worker_rules: rbac::ttl,
        },
        Builtin {
            name: "service-cidr",
            kcm_name: "service-cidr-controller",
            event_source: "service-cidr-controller",
            flag: "concurrent-service-cidr-syncs",
            // kube-controller-manager has no flag for it and runs 5 workers.
            default_concurrency: 5,
            build: |name| servicecidrs::controller(name).into(),
            worker_rules: rbac::servicecidrs,
        },
        Builtin {
            name: "taint-eviction",
            kcm_name: "taint-eviction-controller",
            event_source: "taint-eviction-controller",
            flag: "concurrent-taint-eviction-syncs",
            // kube-controller-manager has no flag for it: it runs 8 internal workers, hashing nodes
            // to them. Here one node is one key and a worker holds only its shards' nodes; 5 at once
            // per worker, the usual default, with the fleet's workers adding up.
            default_concurrency: 5,
            build: |name| tainteviction::controller(name).into(),
            worker_rules: rbac::tainteviction,
        },
        Builtin {
            name: ENDPOINTSLICE,
            kcm_name: "endpointslice-controller",
            // Upstream's recorder in `pkg/controller/endpointslice` reports as
            // `endpoint-slice-controller`.
            event_source: "endpoint-slice-controller",
            flag: "concurrent-service-endpoint-syncs",
            default_concurrency: 5,
            build: |name| {
                endpointslice::controller(name, endpointslice::DEFAULT_MAX_ENDPOINTS_PER_SLICE)
                    .into()
            },
            worker_rules: rbac::endpointslice,
        },
        Builtin {
            name: ENDPOINT,
            kcm_name: "endpoints-controller",
            event_source: "endpoint-controller",
            flag: "concurrent-endpoint-syncs",
            default_concurrency: 5,
            build: |name| endpoints::controller(name, std::time::Duration::ZERO).into(),
            worker_rules: rbac::endpoints,
        },
        Builtin {
            name: ENDPOINTSLICEMIRRORING,
            kcm_name: "endpointslice-mirroring-controller",
            event_source: "endpoint-slice-mirroring-controller",
            flag: "mirroring-concurrent-service-endpoint-syncs",
            default_concurrency: 5,
            build: |name| {
                endpointslicemirroring::controller(name, 1000, std::time::Duration::ZERO).into()
            },
            worker_rules: rbac::endpointslicemirroring,
        },
        Builtin {
            name: NODELIFECYCLE,
            kcm_name: "node-lifecycle-controller",
            event_source: "node-controller",
            flag: "concurrent-node-lifecycle-syncs",
            // kube-controller-manager has no flag for it: one loop looks at every node every
            // `--node-monitor-period` with 8 internal workers. Here one node is one key, looked at on
            // its heartbeats, and a worker holds only its shards' nodes; 5 at once per worker keeps a
            // burst of heartbeats (thousands of Leases renewed in the same seconds) moving without
            // one slow write holding the others back.
            default_concurrency: 5,
            build: |name| nodelifecycle::controller(name, Default::default()).into(),
            worker_rules: rbac::nodelifecycle,
        },
    ]
}

/// The built-in controller named `name`, if there is one.
pub fn builtin(name: &str) -> Option<&'static Builtin> {
    builtins().iter().find(|b| b.name == name)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn each_builtin_runs_at_kube_controller_managers_default_concurrency() {
        let concurrency = |name: &str| builtin(name).unwrap().controller().concurrency_limit();
        assert_eq!(concurrency("serviceaccount"), 1);
        assert_eq!(concurrency("replicaset"), 5);
        assert_eq!(concurrency("replicationcontroller"), 5);
        assert_eq!(concurrency("deployment"), 5);
        assert_eq!(concurrency("garbagecollector"), 20);
        assert_eq!(concurrency("namespace"), 10);
        assert_eq!(concurrency("job"), 5);
        assert_eq!(concurrency("ttl-after-finished"), 5);
        assert_eq!(concurrency("podgc"), 1);
        assert_eq!(concurrency("cronjob"), 5);
        assert_eq!(concurrency("daemonset"), 2);
        assert_eq!(concurrency("statefulset"), 5);
        assert_eq!(concurrency("disruption"), 1);
        assert_eq!(concurrency("taint-eviction"), 5);
        assert_eq!(concurrency("endpointslice"), 5);
        assert_eq!(concurrency("endpoint"), 5);
        assert_eq!(concurrency("endpointslicemirroring"), 5);
        assert_eq!(concurrency("nodelifecycle"), 5);
        assert_eq!(concurrency("nodeipam"), 1);
        assert_eq!(concurrency("ttl"), 5);
        assert_eq!(concurrency("service-cidr"), 5);
    }

    #[test]
    fn settings_reach_the_pod_gc_and_leave_the_others_as_they_are() {
        let settings = Settings {
            terminated_pod_gc_threshold: 3,
            ..Settings::default()
        };
        let podgc = builtin("podgc").unwrap();
        let configured = podgc.controller_with(&settings);
        assert_eq!(configured.name(), "podgc");
        assert_eq!(configured.concurrency_limit(), 1);
        assert_eq!(configured.spec(), podgc.controller().spec());
        let ttl = builtin("ttl-after-finished").unwrap();
        assert_eq!(
            ttl.controller_with(&settings).spec(),
            ttl.controller().spec()
        );
        assert_eq!(
            Settings::default().terminated_pod_gc_threshold,
            12500,
            "kube-controller-manager's default"
        );
    }

    #[test]
    fn every_entry_builds_the_controller_it_names_and_names_and_flags_are_unique() {
        let mut names = HashSet::new();
        let mut flags = HashSet::new();
        for b in builtins() {
            let controller = b.controller();
            assert_eq!(controller.name(), b.name);
            assert!(controller.has_reconcile(), "{} has no reconcile", b.name);
            assert!(
                names.insert(b.name) && flags.insert(b.flag),
                "{} twice",
                b.name
            );
        }
        assert_eq!(
            builtin("replicationcontroller").unwrap().flag,
            "concurrent-rc-syncs"
        );
        assert!(builtin("nope").is_none());
    }
}
