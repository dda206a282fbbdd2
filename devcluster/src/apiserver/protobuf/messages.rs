//! Which field of each k8s-pb message becomes which field of its k8s-openapi twin: data for the
//! `messages!` macro, one entry per message reachable from a kind in `kinds`. The compiler checks the
//! lists are complete against both crates (a field added upstream fails the build until it is listed
//! here); what it cannot check is `keep`, the Go pointer scalars whose zero is meaningful (see
//! `convert`), kept by hand from the Go types of Kubernetes 1.35.

use k8s_openapi::api::apps::v1 as oa_apps;
use k8s_openapi::api::authentication::v1 as oa_authentication;
use k8s_openapi::api::authorization::v1 as oa_authorization;
use k8s_openapi::api::autoscaling::v2 as oa_autoscaling;
use k8s_openapi::api::batch::v1 as oa_batch;
use k8s_openapi::api::coordination::v1 as oa_coordination;
use k8s_openapi::api::core::v1 as oa_core;
use k8s_openapi::api::discovery::v1 as oa_discovery;
use k8s_openapi::api::events::v1 as oa_events;
use k8s_openapi::api::networking::v1 as oa_networking;
use k8s_openapi::api::policy::v1 as oa_policy;
use k8s_openapi::api::rbac::v1 as oa_rbac;
use k8s_openapi::api::scheduling::v1 as oa_scheduling;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as oa_apiext;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as oa_meta;
use k8s_pb::api::apps::v1 as pb_apps;
use k8s_pb::api::authentication::v1 as pb_authentication;
use k8s_pb::api::authorization::v1 as pb_authorization;
use k8s_pb::api::autoscaling::v2 as pb_autoscaling;
use k8s_pb::api::batch::v1 as pb_batch;
use k8s_pb::api::coordination::v1 as pb_coordination;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::api::discovery::v1 as pb_discovery;
use k8s_pb::api::events::v1 as pb_events;
use k8s_pb::api::networking::v1 as pb_networking;
use k8s_pb::api::policy::v1 as pb_policy;
use k8s_pb::api::rbac::v1 as pb_rbac;
use k8s_pb::api::scheduling::v1 as pb_scheduling;
use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as pb_apiext;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;

use super::ProtobufError;
use super::convert::{Field, FromPb, IsZero, messages, openapi_type, required};

messages! { pb_core => oa_core;
    Affinity { node_affinity, pod_affinity, pod_anti_affinity }
    AppArmorProfile { ; keep localhost_profile; rename r#type => type_ }
    AttachedVolume { name, device_path }
    AwsElasticBlockStoreVolumeSource => AWSElasticBlockStoreVolumeSource {
        volume_id, fs_type, partition, read_only
    }
    AzureDiskVolumeSource { disk_name, disk_uri; keep caching_mode, fs_type, read_only, kind }
    AzureFileVolumeSource { secret_name, share_name, read_only }
    CSIVolumeSource { driver, volume_attributes, node_publish_secret_ref; keep read_only, fs_type }
    Capabilities { add, drop }
    CephFsVolumeSource => CephFSVolumeSource {
        monitors, path, user, secret_file, secret_ref, read_only
    }
    CinderVolumeSource { volume_id, fs_type, read_only, secret_ref }
    ClientIpConfig => ClientIPConfig { ; keep timeout_seconds }
    ClusterTrustBundleProjection { label_selector, path; keep name, signer_name, optional }
    ConfigMap { metadata, data, binary_data; keep immutable }
    ConfigMapEnvSource { ; keep optional; embed local_object_reference: LocalObjectReference { name } }
    ConfigMapKeySelector {
        key;
        keep optional;
        embed local_object_reference: LocalObjectReference {
            name
        }
    }
    ConfigMapNodeConfigSource { namespace, name, uid, resource_version, kubelet_config_key }
    ConfigMapProjection {
        items;
        keep optional;
        embed local_object_reference: LocalObjectReference {
            name
        }
    }
    ConfigMapVolumeSource {
        items;
        keep default_mode, optional;
        embed local_object_reference: LocalObjectReference {
            name
        }
    }
    Container {
        name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy,
        restart_policy_rules, volume_mounts, volume_devices, liveness_probe, readiness_probe,
        startup_probe, lifecycle, termination_message_path, termination_message_policy,
        image_pull_policy, security_context, stdin, stdin_once, tty;
        keep restart_policy
    }
    ContainerExtendedResourceRequest { container_name, resource_name, request_name }
    ContainerImage { names, size_bytes }
    ContainerPort { name, host_port, container_port, protocol, host_ip }
    ContainerResizePolicy { resource_name, restart_policy }
    ContainerRestartRule { action, exit_codes }
    ContainerRestartRuleOnExitCodes { operator, values }
    ContainerState { waiting, running, terminated }
    ContainerStateRunning { started_at }
    ContainerStateTerminated {
        exit_code, signal, reason, message, started_at, finished_at, container_id
    }
    ContainerStateWaiting { reason, message }
    ContainerStatus {
        name, state, last_state, ready, restart_count, image, image_id, container_id,
        allocated_resources, resources, volume_mounts, user, allocated_resources_status;
        keep started, stop_signal
    }
    ContainerUser { linux }
    DaemonEndpoint { port }
    DownwardAPIProjection { items }
    DownwardAPIVolumeFile { path, field_ref, resource_field_ref; keep mode }
    DownwardAPIVolumeSource { items; keep default_mode }
    EmptyDirVolumeSource { medium, size_limit }
    EndpointAddress { ip, hostname, target_ref; keep node_name }
    EndpointPort { name, port, protocol; keep app_protocol }
    EndpointSubset { addresses, not_ready_addresses, ports }
    Endpoints { metadata, subsets }
    EnvFromSource { prefix, config_map_ref, secret_ref }
    EnvVar { name, value, value_from }
    EnvVarSource { field_ref, resource_field_ref, config_map_key_ref, secret_key_ref, file_key_ref }
    EphemeralContainer {
        target_container_name;
        embed ephemeral_container_common: EphemeralContainerCommon {
            name, image, command, args, working_dir, ports, env_from, env, resources, resize_policy,
            restart_policy_rules, volume_mounts, volume_devices, liveness_probe, readiness_probe,
            startup_probe, lifecycle, termination_message_path, termination_message_policy,
            image_pull_policy, security_context, stdin, stdin_once, tty;
            keep restart_policy
        }
    }
    EphemeralVolumeSource { volume_claim_template }
    Event {
        metadata, involved_object, reason, message, source, first_timestamp, last_timestamp, count,
        event_time, series, action, related, reporting_component, reporting_instance;
        rename r#type => type_
    }
    EventSeries { count, last_observed_time }
    EventSource { component, host }
    ExecAction { command }
    FcVolumeSource => FCVolumeSource {
        fs_type, read_only, wwids;
        keep lun;
        rename target_ww_ns => target_wwns
    }
    FileKeySelector { volume_name, path, key; keep optional }
    FlexVolumeSource { driver, fs_type, secret_ref, read_only, options }
    FlockerVolumeSource { dataset_name, dataset_uuid }
    GcePersistentDiskVolumeSource => GCEPersistentDiskVolumeSource {
        pd_name, fs_type, partition, read_only
    }
    GitRepoVolumeSource { repository, revision, directory }
    GlusterfsVolumeSource { endpoints, path, read_only }
    GrpcAction => GRPCAction { port; keep service }
    HostAlias { ip, hostnames }
    HostIp => HostIP { ip }
    HostPathVolumeSource { path; rename_keep r#type => type_ }
    HttpGetAction => HTTPGetAction { path, port, host, scheme, http_headers }
    HttpHeader => HTTPHeader { name, value }
    ImageVolumeSource { reference, pull_policy }
    IscsiVolumeSource => ISCSIVolumeSource {
        target_portal, iqn, lun, iscsi_interface, fs_type, read_only, portals, chap_auth_discovery,
        chap_auth_session, secret_ref;
        keep initiator_name
    }
    KeyToPath { key, path; keep mode }
    Lifecycle { post_start, pre_stop; keep stop_signal }
    LifecycleHandler { exec, http_get, tcp_socket, sleep }
    LinuxContainerUser { uid, gid, supplemental_groups }
    LoadBalancerIngress { ip, hostname, ports; keep ip_mode }
    LoadBalancerStatus { ingress }
    LocalObjectReference { name }
    ModifyVolumeStatus { target_volume_attributes_class_name, status }
    Namespace { metadata, spec, status }
    NamespaceCondition { status, last_transition_time, reason, message; rename r#type => type_ }
    NamespaceSpec { finalizers }
    NamespaceStatus { phase, conditions }
    NfsVolumeSource => NFSVolumeSource { server, path, read_only }
    Node { metadata, spec, status }
    NodeAddress { address; rename r#type => type_ }
    NodeAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    NodeCondition {
        status, last_heartbeat_time, last_transition_time, reason, message;
        rename r#type => type_
    }
    NodeConfigSource { config_map }
    NodeConfigStatus { assigned, active, last_known_good, error }
    NodeDaemonEndpoints { kubelet_endpoint }
    NodeFeatures { ; keep supplemental_groups_policy }
    NodeRuntimeHandler { name, features }
    NodeRuntimeHandlerFeatures { ; keep recursive_read_only_mounts, user_namespaces }
    NodeSelector { node_selector_terms }
    NodeSelectorRequirement { key, operator, values }
    NodeSelectorTerm { match_expressions, match_fields }
    NodeSpec {
        pod_cidr, provider_id, unschedulable, taints, config_source, external_id;
        rename pod_cid_rs => pod_cidrs
    }
    NodeStatus {
        capacity, allocatable, phase, conditions, addresses, daemon_endpoints, node_info, images,
        volumes_in_use, volumes_attached, config, runtime_handlers, features, declared_features
    }
    NodeSwapStatus { ; keep capacity }
    NodeSystemInfo {
        machine_id, system_uuid, boot_id, kernel_version, os_image, container_runtime_version,
        kubelet_version, kube_proxy_version, operating_system, architecture, swap
    }
    ObjectFieldSelector { api_version, field_path }
    ObjectReference { kind, namespace, name, uid, api_version, resource_version, field_path }
    PersistentVolumeClaim { metadata, spec, status }
    PersistentVolumeClaimCondition {
        status, last_probe_time, last_transition_time, reason, message;
        rename r#type => type_
    }
    PersistentVolumeClaimSpec {
        access_modes, selector, resources, volume_name, data_source, data_source_ref;
        keep storage_class_name, volume_mode, volume_attributes_class_name
    }
    PersistentVolumeClaimStatus {
        phase, access_modes, capacity, conditions, allocated_resources, allocated_resource_statuses,
        modify_volume_status;
        keep current_volume_attributes_class_name
    }
    PersistentVolumeClaimTemplate { metadata, spec }
    PersistentVolumeClaimVolumeSource { claim_name, read_only }
    PhotonPersistentDiskVolumeSource { pd_id, fs_type }
    Pod { metadata, spec, status }
    PodAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    PodAffinityTerm {
        label_selector, namespaces, topology_key, namespace_selector, match_label_keys,
        mismatch_label_keys
    }
    PodAntiAffinity {
        required_during_scheduling_ignored_during_execution,
        preferred_during_scheduling_ignored_during_execution
    }
    PodCertificateProjection {
        signer_name, key_type, credential_bundle_path, key_path, certificate_chain_path,
        user_annotations;
        keep max_expiration_seconds
    }
    PodCondition {
        observed_generation, status, last_probe_time, last_transition_time, reason, message;
        rename r#type => type_
    }
    PodDnsConfig => PodDNSConfig { nameservers, searches, options }
    PodDnsConfigOption => PodDNSConfigOption { name; keep value }
    PodExtendedResourceClaimStatus { request_mappings, resource_claim_name }
    PodIp => PodIP { ip }
    PodOs => PodOS { name }
    PodReadinessGate { condition_type }
    PodResourceClaim { name; keep resource_claim_name, resource_claim_template_name }
    PodResourceClaimStatus { name; keep resource_claim_name }
    PodSchedulingGate { name }
    PodSecurityContext {
        se_linux_options, windows_options, supplemental_groups, sysctls, seccomp_profile,
        app_armor_profile;
        keep run_as_user, run_as_group, run_as_non_root, supplemental_groups_policy, fs_group,
            fs_group_change_policy, se_linux_change_policy
    }
    PodSpec {
        volumes, init_containers, containers, ephemeral_containers, restart_policy, dns_policy,
        node_selector, service_account_name, service_account, node_name, host_network, host_pid,
        host_ipc, security_context, image_pull_secrets, hostname, subdomain, affinity,
        scheduler_name, tolerations, host_aliases, priority_class_name, dns_config, readiness_gates,
        overhead, topology_spread_constraints, os, scheduling_gates, resource_claims, resources,
        workload_ref;
        keep termination_grace_period_seconds, active_deadline_seconds,
            automount_service_account_token, share_process_namespace, priority, runtime_class_name,
            enable_service_links, preemption_policy, set_hostname_as_fqdn, host_users,
            hostname_override
    }
    PodStatus {
        observed_generation, phase, conditions, message, reason, nominated_node_name, host_ip,
        host_ips, pod_ip, pod_ips, start_time, init_container_statuses, container_statuses,
        qos_class, ephemeral_container_statuses, resize, resource_claim_statuses,
        extended_resource_claim_status, allocated_resources, resources
    }
    PodTemplateSpec { metadata, spec }
    PortStatus { port, protocol, error }
    PortworxVolumeSource { volume_id, fs_type, read_only }
    PreferredSchedulingTerm { weight, preference }
    Probe {
        initial_delay_seconds, timeout_seconds, period_seconds, success_threshold, failure_threshold;
        keep termination_grace_period_seconds;
        embed handler: ProbeHandler {
            exec, http_get, tcp_socket, grpc
        }
    }
    ProjectedVolumeSource { sources; keep default_mode }
    QuobyteVolumeSource { registry, volume, read_only, user, group, tenant }
    RbdVolumeSource => RBDVolumeSource {
        monitors, image, fs_type, pool, user, keyring, secret_ref, read_only
    }
    ReplicationController { metadata, spec, status }
    ReplicationControllerCondition {
        status, last_transition_time, reason, message;
        rename r#type => type_
    }
    ReplicationControllerSpec { replicas, min_ready_seconds, selector, template }
    ReplicationControllerStatus {
        replicas, fully_labeled_replicas, ready_replicas, available_replicas, observed_generation,
        conditions
    }
    ResourceClaim { name, request }
    ResourceFieldSelector { container_name, resource, divisor }
    ResourceHealth { resource_id, health }
    ResourceQuota { metadata, spec, status }
    ResourceQuotaSpec { hard, scopes, scope_selector }
    ResourceQuotaStatus { hard, used }
    ResourceRequirements { limits, requests, claims }
    ResourceStatus { name, resources }
    ScaleIoVolumeSource => ScaleIOVolumeSource {
        gateway, system, secret_ref, ssl_enabled, protection_domain, storage_pool, storage_mode,
        volume_name, fs_type, read_only
    }
    ScopeSelector { match_expressions }
    ScopedResourceSelectorRequirement { scope_name, operator, values }
    SeLinuxOptions => SELinuxOptions { user, role, level; rename r#type => type_ }
    SeccompProfile { ; keep localhost_profile; rename r#type => type_ }
    Secret { metadata, data, string_data; keep immutable; rename r#type => type_ }
    SecretEnvSource { ; keep optional; embed local_object_reference: LocalObjectReference { name } }
    SecretKeySelector {
        key;
        keep optional;
        embed local_object_reference: LocalObjectReference {
            name
        }
    }
    SecretProjection {
        items;
        keep optional;
        embed local_object_reference: LocalObjectReference {
            name
        }
    }
    SecretVolumeSource { secret_name, items; keep default_mode, optional }
    SecurityContext {
        capabilities, se_linux_options, windows_options, seccomp_profile, app_armor_profile;
        keep privileged, run_as_user, run_as_group, run_as_non_root, read_only_root_filesystem,
            allow_privilege_escalation, proc_mount
    }
    Service { metadata, spec, status }
    ServiceAccount { metadata, secrets, image_pull_secrets; keep automount_service_account_token }
    ServiceAccountTokenProjection { audience, path; keep expiration_seconds }
    ServicePort { name, protocol, port, target_port, node_port; keep app_protocol }
    ServiceSpec {
        ports, selector, cluster_ip, cluster_ips, external_ips, session_affinity, load_balancer_ip,
        load_balancer_source_ranges, external_name, external_traffic_policy, health_check_node_port,
        publish_not_ready_addresses, session_affinity_config, ip_families;
        keep ip_family_policy, allocate_load_balancer_node_ports, load_balancer_class,
            internal_traffic_policy, traffic_distribution;
        rename r#type => type_
    }
    ServiceStatus { load_balancer, conditions }
    SessionAffinityConfig { client_ip }
    SleepAction { seconds }
    StorageOsVolumeSource => StorageOSVolumeSource {
        volume_name, volume_namespace, fs_type, read_only, secret_ref
    }
    Sysctl { name, value }
    Taint { key, value, effect, time_added }
    TcpSocketAction => TCPSocketAction { port, host }
    Toleration { key, operator, value, effect; keep toleration_seconds }
    TopologySpreadConstraint {
        max_skew, topology_key, when_unsatisfiable, label_selector, match_label_keys;
        keep min_domains, node_affinity_policy, node_taints_policy
    }
    TypedLocalObjectReference { kind, name; keep api_group }
    TypedObjectReference { kind, name; keep api_group, namespace }
    Volume {
        name;
        embed volume_source: VolumeSource {
            host_path, empty_dir, gce_persistent_disk, aws_elastic_block_store, git_repo, secret,
            nfs, iscsi, glusterfs, persistent_volume_claim, rbd, flex_volume, cinder, cephfs,
            flocker, downward_api, fc, azure_file, config_map, vsphere_volume, quobyte, azure_disk,
            photon_persistent_disk, projected, portworx_volume, scale_io, storageos, csi, ephemeral,
            image
        }
    }
    VolumeDevice { name, device_path }
    VolumeMount {
        name, read_only, mount_path, sub_path, sub_path_expr;
        keep recursive_read_only, mount_propagation
    }
    VolumeMountStatus { name, mount_path, read_only; keep recursive_read_only }
    VolumeProjection {
        secret, downward_api, config_map, service_account_token, cluster_trust_bundle,
        pod_certificate
    }
    VolumeResourceRequirements { limits, requests }
    VsphereVirtualDiskVolumeSource { volume_path, fs_type, storage_policy_name, storage_policy_id }
    WeightedPodAffinityTerm { weight, pod_affinity_term }
    WindowsSecurityContextOptions {
        ;
        keep gmsa_credential_spec_name, gmsa_credential_spec, run_as_user_name, host_process
    }
    WorkloadReference { name, pod_group, pod_group_replica_key }
}

messages! { pb_apps => oa_apps;
    ControllerRevision { metadata, data, revision }
    DaemonSet { metadata, spec, status }
    DaemonSetCondition { status, last_transition_time, reason, message; rename r#type => type_ }
    DaemonSetSpec {
        selector, template, update_strategy, min_ready_seconds;
        keep revision_history_limit
    }
    DaemonSetStatus {
        current_number_scheduled, number_misscheduled, desired_number_scheduled, number_ready,
        observed_generation, updated_number_scheduled, number_available, number_unavailable,
        conditions;
        keep collision_count
    }
    DaemonSetUpdateStrategy { rolling_update; rename r#type => type_ }
    Deployment { metadata, spec, status }
    DeploymentCondition {
        status, last_update_time, last_transition_time, reason, message;
        rename r#type => type_
    }
    DeploymentSpec {
        selector, template, strategy, min_ready_seconds, paused;
        keep replicas, revision_history_limit, progress_deadline_seconds
    }
    DeploymentStatus {
        observed_generation, replicas, updated_replicas, ready_replicas, available_replicas,
        unavailable_replicas, conditions;
        keep terminating_replicas, collision_count
    }
    DeploymentStrategy { rolling_update; rename r#type => type_ }
    ReplicaSet { metadata, spec, status }
    ReplicaSetCondition { status, last_transition_time, reason, message; rename r#type => type_ }
    ReplicaSetSpec { min_ready_seconds, selector, template; keep replicas }
    ReplicaSetStatus {
        replicas, fully_labeled_replicas, ready_replicas, available_replicas, observed_generation,
        conditions;
        keep terminating_replicas
    }
    RollingUpdateDaemonSet { max_unavailable, max_surge }
    RollingUpdateDeployment { max_unavailable, max_surge }
    RollingUpdateStatefulSetStrategy { max_unavailable; keep partition }
    StatefulSet { metadata, spec, status }
    StatefulSetCondition { status, last_transition_time, reason, message; rename r#type => type_ }
    StatefulSetOrdinals { start }
    StatefulSetPersistentVolumeClaimRetentionPolicy { when_deleted, when_scaled }
    StatefulSetSpec {
        selector, template, volume_claim_templates, service_name, pod_management_policy,
        update_strategy, min_ready_seconds, persistent_volume_claim_retention_policy, ordinals;
        keep replicas, revision_history_limit
    }
    StatefulSetStatus {
        observed_generation, replicas, ready_replicas, current_replicas, updated_replicas,
        current_revision, update_revision, conditions, available_replicas;
        keep collision_count
    }
    StatefulSetUpdateStrategy { rolling_update; rename r#type => type_ }
}

messages! { pb_batch => oa_batch;
    CronJob { metadata, spec, status }
    CronJobSpec {
        schedule, concurrency_policy, job_template;
        keep time_zone, starting_deadline_seconds, suspend, successful_jobs_history_limit,
            failed_jobs_history_limit
    }
    CronJobStatus { active, last_schedule_time, last_successful_time }
    Job { metadata, spec, status }
    JobCondition {
        status, last_probe_time, last_transition_time, reason, message;
        rename r#type => type_
    }
    JobSpec {
        pod_failure_policy, success_policy, selector, template;
        keep parallelism, completions, active_deadline_seconds, backoff_limit,
            backoff_limit_per_index, max_failed_indexes, manual_selector,
            ttl_seconds_after_finished, completion_mode, suspend, pod_replacement_policy, managed_by
    }
    JobStatus {
        conditions, start_time, completion_time, active, succeeded, failed, completed_indexes,
        uncounted_terminated_pods;
        keep terminating, failed_indexes, ready
    }
    JobTemplateSpec { metadata, spec }
    PodFailurePolicy { rules }
    PodFailurePolicyOnExitCodesRequirement { operator, values; keep container_name }
    PodFailurePolicyOnPodConditionsPattern { status; rename r#type => type_ }
    PodFailurePolicyRule { action, on_exit_codes, on_pod_conditions }
    SuccessPolicy { rules }
    SuccessPolicyRule { ; keep succeeded_indexes, succeeded_count }
    UncountedTerminatedPods { succeeded, failed }
}

messages! { pb_coordination => oa_coordination;
    Lease { metadata, spec }
    LeaseSpec {
        acquire_time, renew_time;
        keep holder_identity, lease_duration_seconds, lease_transitions, strategy, preferred_holder
    }
}

messages! { pb_discovery => oa_discovery;
    Endpoint {
        addresses, conditions, target_ref, deprecated_topology, hints;
        keep hostname, node_name, zone
    }
    EndpointConditions { ; keep ready, serving, terminating }
    EndpointHints { for_zones, for_nodes }
    EndpointPort { ; keep name, protocol, port, app_protocol }
    EndpointSlice { metadata, address_type, endpoints, ports }
    ForNode { name }
    ForZone { name }
}

messages! { pb_events => oa_events;
    Event {
        metadata, event_time, series, reporting_controller, reporting_instance, action, reason,
        regarding, related, note, deprecated_source, deprecated_first_timestamp,
        deprecated_last_timestamp, deprecated_count;
        rename r#type => type_
    }
    EventSeries { count, last_observed_time }
}

messages! { pb_autoscaling => oa_autoscaling;
    ContainerResourceMetricSource { name, target, container }
    ContainerResourceMetricStatus { name, current, container }
    CrossVersionObjectReference { kind, name, api_version }
    ExternalMetricSource { metric, target }
    ExternalMetricStatus { metric, current }
    HpaScalingPolicy => HPAScalingPolicy { value, period_seconds; rename r#type => type_ }
    HpaScalingRules => HPAScalingRules {
        policies, tolerance;
        keep stabilization_window_seconds, select_policy
    }
    HorizontalPodAutoscaler { metadata, spec, status }
    HorizontalPodAutoscalerBehavior { scale_up, scale_down }
    HorizontalPodAutoscalerCondition {
        status, last_transition_time, reason, message;
        rename r#type => type_
    }
    HorizontalPodAutoscalerSpec {
        scale_target_ref, max_replicas, metrics, behavior;
        keep min_replicas
    }
    HorizontalPodAutoscalerStatus {
        last_scale_time, current_replicas, desired_replicas, current_metrics, conditions;
        keep observed_generation
    }
    MetricIdentifier { name, selector }
    MetricSpec {
        object, pods, resource, container_resource, external;
        rename r#type => type_
    }
    MetricStatus {
        object, pods, resource, container_resource, external;
        rename r#type => type_
    }
    MetricTarget {
        value, average_value;
        keep average_utilization;
        rename r#type => type_
    }
    MetricValueStatus { value, average_value; keep average_utilization }
    ObjectMetricSource { described_object, target, metric }
    ObjectMetricStatus { metric, current, described_object }
    PodsMetricSource { metric, target }
    PodsMetricStatus { metric, current }
    ResourceMetricSource { name, target }
    ResourceMetricStatus { name, current }
}

messages! { pb_networking => oa_networking;
    IpBlock => IPBlock { cidr, except }
    NetworkPolicy { metadata, spec }
    NetworkPolicyEgressRule { ports, to }
    NetworkPolicyIngressRule { ports, from }
    NetworkPolicyPeer { pod_selector, namespace_selector, ip_block }
    NetworkPolicyPort { port; keep protocol, end_port }
    NetworkPolicySpec { pod_selector, ingress, egress, policy_types }
}

messages! { pb_policy => oa_policy;
    PodDisruptionBudget { metadata, spec, status }
    PodDisruptionBudgetSpec {
        min_available, selector, max_unavailable;
        keep unhealthy_pod_eviction_policy
    }
    PodDisruptionBudgetStatus {
        observed_generation, disrupted_pods, disruptions_allowed, current_healthy, desired_healthy,
        expected_pods, conditions
    }
}

messages! { pb_rbac => oa_rbac;
    AggregationRule { cluster_role_selectors }
    ClusterRole { metadata, rules, aggregation_rule }
    ClusterRoleBinding { metadata, subjects, role_ref }
    PolicyRule {
        verbs, api_groups, resources, resource_names;
        rename non_resource_ur_ls => non_resource_urls
    }
    Role { metadata, rules }
    RoleBinding { metadata, subjects, role_ref }
    RoleRef { api_group, kind, name }
    Subject { kind, api_group, name, namespace }
}

messages! { pb_scheduling => oa_scheduling;
    PriorityClass { metadata, value, global_default, description; keep preemption_policy }
}

messages! { pb_apiext => oa_apiext;
    CustomResourceColumnDefinition {
        name, format, description, priority, json_path;
        rename r#type => type_
    }
    CustomResourceConversion { strategy, webhook }
    CustomResourceDefinition { metadata, spec, status }
    CustomResourceDefinitionCondition {
        status, last_transition_time, reason, message, observed_generation;
        rename r#type => type_
    }
    CustomResourceDefinitionNames { plural, singular, short_names, kind, list_kind, categories }
    CustomResourceDefinitionSpec { group, names, scope, versions, conversion, preserve_unknown_fields }
    CustomResourceDefinitionStatus { conditions, accepted_names, stored_versions, observed_generation }
    CustomResourceDefinitionVersion {
        name, served, storage, deprecated, schema, subresources, additional_printer_columns,
        selectable_fields;
        keep deprecation_warning
    }
    CustomResourceSubresourceScale {
        spec_replicas_path, status_replicas_path;
        keep label_selector_path
    }
    CustomResourceSubresources { status, scale }
    CustomResourceValidation { ; rename open_apiv3_schema => open_api_v3_schema }
    ExternalDocumentation { description, url }
    JsonSchemaProps => JSONSchemaProps {
        id, schema, description, format, title, default, exclusive_maximum, exclusive_minimum,
        pattern, unique_items, required, items, all_of, one_of, any_of, not, properties,
        additional_properties, pattern_properties, dependencies, additional_items, definitions,
        external_docs, example, nullable, x_kubernetes_embedded_resource,
        x_kubernetes_int_or_string, x_kubernetes_list_map_keys, x_kubernetes_validations;
        keep maximum, minimum, max_length, min_length, max_items, min_items, multiple_of,
            max_properties, min_properties, x_kubernetes_preserve_unknown_fields,
            x_kubernetes_list_type, x_kubernetes_map_type;
        rename r#type => type_, r#enum => enum_;
        rename_keep r#ref => ref_path
    }
    SelectableField { json_path }
    ServiceReference { namespace, name; keep path, port }
    ValidationRule { rule, message, message_expression, field_path; keep reason, optional_old_self }
    WebhookClientConfig { service, ca_bundle; keep url }
    WebhookConversion { client_config, conversion_review_versions }
}

// TokenRequest (`kubectl create token`): not stored, answered by `auth::token_request`.
messages! { pb_authentication => oa_authentication;
    BoundObjectReference { kind, api_version, name; rename u_id => uid }
    TokenRequest { metadata, spec, status }
    TokenRequestSpec { audiences, bound_object_ref; keep expiration_seconds }
    TokenRequestStatus { token, expiration_timestamp }
}

// SelfSubjectAccessReview (`kubectl auth can-i`): not stored, answered by `auth::self_review`.
messages! { pb_authorization => oa_authorization;
    FieldSelectorAttributes { raw_selector, requirements }
    LabelSelectorAttributes { raw_selector, requirements }
    NonResourceAttributes { path, verb }
    ResourceAttributes {
        namespace, verb, group, version, resource, subresource, name, field_selector, label_selector
    }
    SelfSubjectAccessReview { metadata, spec, status }
    SelfSubjectAccessReviewSpec { resource_attributes, non_resource_attributes }
    SubjectAccessReviewStatus { allowed, denied, reason, evaluation_error }
}

messages! { pb_meta => oa_meta;
    Condition {
        status, observed_generation, last_transition_time, reason, message;
        rename r#type => type_
    }
    LabelSelector { match_labels, match_expressions }
    FieldSelectorRequirement { key, operator, values }
    LabelSelectorRequirement { key, operator, values }
    ManagedFieldsEntry { manager, operation, api_version, time, fields_type, fields_v1, subresource }
    ObjectMeta {
        name, generate_name, namespace, self_link, uid, resource_version, generation,
        creation_timestamp, deletion_timestamp, labels, annotations, owner_references, finalizers,
        managed_fields;
        keep deletion_grace_period_seconds
    }
    OwnerReference { api_version, kind, name, uid; keep controller, block_owner_deletion }
}
