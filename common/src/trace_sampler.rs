//! The trace sampler, as the OpenTelemetry SDK specification names them (`OTEL_TRACES_SAMPLER` /
//! `--trace-sampler`, with `OTEL_TRACES_SAMPLER_ARG` / `--trace-sample-ratio` as the ratio): where a
//! trace may start ([`TraceSampler::keeps_new_trace`], drawn before any span exists) and the SDK
//! sampler that decides the spans of a trace that came from elsewhere ([`FleetSampler`]).
//!
//! The decision for a new trace is made by `trace_context::sample_new_trace` *before* the root span
//! exists, so an unsampled watch event costs nothing; the SDK then sees only roots that were kept,
//! except with `traceidratio`, whose decision is a function of the trace id (so every process of the
//! fleet decides a trace alike) and so can only be made once the root has an id. A span whose parent
//! came from another process (a worker's reconcile under the leader's dispatch) is decided as the
//! specification says for each sampler: `always_off` drops it, `always_on` keeps it, `traceidratio`
//! decides by the parent's trace id, and the `parentbased_*` samplers follow the parent (always
//! sampled here: only sampled contexts travel). A span whose parent is in this process follows it. A
//! root that links to a sampled write (`flotilla.link.type = write`: a watch event that echoes a traced
//! reconcile's write) is kept whatever the sampler: its sampling follows its cause.

use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, SamplingResult, ShouldSample};

use crate::trace_context::LINK_TYPE;

/// A sampler of the specification's list that this SDK supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TraceSampler {
    /// `always_on`: every trace, whatever its parent says.
    AlwaysOn,
    /// `always_off`: no trace at all.
    AlwaysOff,
    /// `traceidratio`: the share `--trace-sample-ratio` of traces, by trace id, whatever the parent
    /// says.
    TraceIdRatio,
    /// `parentbased_always_on` (the specification's default): every new trace; a span with a parent
    /// follows it.
    #[default]
    ParentBasedAlwaysOn,
    /// `parentbased_always_off`: no new trace; a span with a sampled parent is kept.
    ParentBasedAlwaysOff,
    /// `parentbased_traceidratio`: the share `--trace-sample-ratio` of new traces; a span with a
    /// parent follows it.
    ParentBasedTraceIdRatio,
}

/// Every supported value, with its name.
const NAMES: [(&str, TraceSampler); 6] = [
    ("always_on", TraceSampler::AlwaysOn),
    ("always_off", TraceSampler::AlwaysOff),
    ("traceidratio", TraceSampler::TraceIdRatio),
    ("parentbased_always_on", TraceSampler::ParentBasedAlwaysOn),
    ("parentbased_always_off", TraceSampler::ParentBasedAlwaysOff),
    (
        "parentbased_traceidratio",
        TraceSampler::ParentBasedTraceIdRatio,
    ),
];

impl TraceSampler {
    /// The sampler named `text` (surrounding space and case ignored), or `Err(text)` for a value the
    /// specification lists but this SDK does not support (`jaeger_remote`, `xray`, …) or an unknown
    /// one: the caller warns and uses the default, as the specification requires.
    ///
    /// # Errors
    /// The trimmed text, when it names no supported sampler.
    pub fn parse(text: &str) -> Result<Self, String> {
        let name = text.trim().to_ascii_lowercase();
        NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .ok_or_else(|| text.trim().to_owned())
    }

    /// The specification's name of this sampler.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("parentbased_always_on", |(n, _)| n)
    }

    /// Whether this sampler takes the ratio.
    pub fn uses_ratio(self) -> bool {
        matches!(self, Self::TraceIdRatio | Self::ParentBasedTraceIdRatio)
    }

    pub(crate) fn to_u8(self) -> u8 {
        match self {
            Self::AlwaysOn => 0,
            Self::AlwaysOff => 1,
            Self::TraceIdRatio => 2,
            Self::ParentBasedAlwaysOn => 3,
            Self::ParentBasedAlwaysOff => 4,
            Self::ParentBasedTraceIdRatio => 5,
        }
    }

    pub(crate) fn from_u8(n: u8) -> Self {
        match n {
            0 => Self::AlwaysOn,
            1 => Self::AlwaysOff,
            2 => Self::TraceIdRatio,
            4 => Self::ParentBasedAlwaysOff,
            5 => Self::ParentBasedTraceIdRatio,
            _ => Self::ParentBasedAlwaysOn,
        }
    }

    /// Whether a trace may start here, before its root span exists; `draw` is a uniform number in
    /// `[0, 1)`, asked for only when the ratio decides. With `traceidratio` the answer is yes when the
    /// ratio is above 0: the SDK sampler then decides by the root's trace id.
    pub(crate) fn keeps_new_trace(self, ratio: f64, draw: impl FnOnce() -> f64) -> bool {
        match self {
            Self::AlwaysOn | Self::ParentBasedAlwaysOn => true,
            Self::AlwaysOff | Self::ParentBasedAlwaysOff => false,
            Self::TraceIdRatio => ratio > 0.0,
            Self::ParentBasedTraceIdRatio => ratio >= 1.0 || (ratio > 0.0 && draw() < ratio),
        }
    }
}

/// The SDK sampler of the tracer provider (see the module documentation).
#[derive(Debug, Clone)]
pub(crate) struct FleetSampler {
    sampler: TraceSampler,
    ratio: f64,
}

impl FleetSampler {
    pub(crate) fn new(sampler: TraceSampler, ratio: f64) -> Self {
        Self {
            sampler,
            ratio: ratio.clamp(0.0, 1.0),
        }
    }

    fn decide(
        &self,
        parent: Option<&Context>,
        trace_id: TraceId,
        links: &[Link],
    ) -> SamplingDecision {
        let by_trace_id = || {
            Sampler::TraceIdRatioBased(self.ratio)
                .should_sample(None, trace_id, "", &SpanKind::Internal, &[], &[])
                .decision
        };
        let keep = |yes: bool| {
            if yes {
                SamplingDecision::RecordAndSample
            } else {
                SamplingDecision::Drop
            }
        };
        let parent = parent
            .filter(|cx| cx.has_active_span())
            .map(|cx| cx.span().span_context().clone())
            .filter(opentelemetry::trace::SpanContext::is_valid);
        match parent {
            None if links.iter().any(echoes_a_sampled_write) => SamplingDecision::RecordAndSample,
            // A root reaches the SDK only once `keeps_new_trace` kept it.
            None => match self.sampler {
                TraceSampler::AlwaysOff => SamplingDecision::Drop,
                TraceSampler::TraceIdRatio => by_trace_id(),
                _ => SamplingDecision::RecordAndSample,
            },
            Some(parent) if !parent.is_remote() => keep(parent.is_sampled()),
            Some(parent) => match self.sampler {
                TraceSampler::AlwaysOn => SamplingDecision::RecordAndSample,
                TraceSampler::AlwaysOff => SamplingDecision::Drop,
                TraceSampler::TraceIdRatio => by_trace_id(),
                TraceSampler::ParentBasedAlwaysOn
                | TraceSampler::ParentBasedAlwaysOff
                | TraceSampler::ParentBasedTraceIdRatio => keep(parent.is_sampled()),
            },
        }
    }
}

/// Whether `link` points at a sampled span whose write this span echoes.
fn echoes_a_sampled_write(link: &Link) -> bool {
    link.span_context.is_sampled()
        && link
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == LINK_TYPE && kv.value.as_str() == "write")
}

impl ShouldSample for FleetSampler {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        links: &[Link],
    ) -> SamplingResult {
        SamplingResult {
            decision: self.decide(parent_context, trace_id, links),
            attributes: Vec::new(),
            trace_state: parent_context
                .map(|cx| cx.span().span_context().trace_state().clone())
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};

    use super::*;

    /// A trace id whose low 63 bits put it at `share` of the id space (what the ratio compares).
    fn trace_at(share: f64) -> TraceId {
        let low = ((share * (1u64 << 63) as f64) as u64) << 1;
        let mut bytes = [0u8; 16];
        bytes[0] = 1;
        bytes[8..].copy_from_slice(&low.to_be_bytes());
        TraceId::from_bytes(bytes)
    }

    fn parent(trace: TraceId, remote: bool, sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        let sc = SpanContext::new(
            trace,
            SpanId::from_bytes([1; 8]),
            flags,
            remote,
            TraceState::default(),
        );
        Context::new().with_remote_span_context(sc)
    }

    fn decide(sampler: TraceSampler, ratio: f64, parent: Option<&Context>, trace: TraceId) -> bool {
        FleetSampler::new(sampler, ratio).decide(parent, trace, &[])
            == SamplingDecision::RecordAndSample
    }

    #[test]
    fn every_value_of_the_specification_parses_and_names_itself() {
        for (name, sampler) in NAMES {
            assert_eq!(TraceSampler::parse(name), Ok(sampler));
            assert_eq!(sampler.name(), name);
            assert_eq!(TraceSampler::from_u8(sampler.to_u8()), sampler);
        }
        assert_eq!(
            TraceSampler::parse(" ParentBased_TraceIdRatio "),
            Ok(TraceSampler::ParentBasedTraceIdRatio)
        );
        assert_eq!(TraceSampler::default(), TraceSampler::ParentBasedAlwaysOn);
    }

    #[test]
    fn an_unsupported_or_unknown_value_is_refused_for_the_caller_to_warn_about() {
        for bad in [
            "jaeger_remote",
            "xray",
            "parentbased_jaeger_remote",
            "",
            "on",
        ] {
            assert_eq!(TraceSampler::parse(bad), Err(bad.to_owned()), "{bad:?}");
        }
    }

    #[test]
    fn new_traces_are_kept_as_each_sampler_says() {
        let never = || -> f64 { panic!("no draw expected") };
        assert!(TraceSampler::AlwaysOn.keeps_new_trace(0.0, never));
        assert!(TraceSampler::ParentBasedAlwaysOn.keeps_new_trace(0.0, never));
        assert!(!TraceSampler::AlwaysOff.keeps_new_trace(1.0, never));
        assert!(!TraceSampler::ParentBasedAlwaysOff.keeps_new_trace(1.0, never));
        // traceidratio defers to the trace id, known only once the root exists.
        assert!(TraceSampler::TraceIdRatio.keeps_new_trace(0.5, never));
        assert!(!TraceSampler::TraceIdRatio.keeps_new_trace(0.0, never));
        let pb = TraceSampler::ParentBasedTraceIdRatio;
        assert!(pb.keeps_new_trace(1.0, never));
        assert!(!pb.keeps_new_trace(0.0, never));
        assert!(pb.keeps_new_trace(0.5, || 0.49));
        assert!(!pb.keeps_new_trace(0.5, || 0.5));
    }

    #[test]
    fn a_span_whose_parent_is_local_follows_it_whatever_the_sampler() {
        let trace = trace_at(0.9);
        for (_, sampler) in NAMES {
            let sampled = parent(trace, false, true);
            let unsampled = parent(trace, false, false);
            assert!(decide(sampler, 0.1, Some(&sampled), trace), "{sampler:?}");
            assert!(
                !decide(sampler, 0.1, Some(&unsampled), trace),
                "{sampler:?}"
            );
        }
    }

    #[test]
    fn a_span_under_a_remote_sampled_parent_is_decided_per_the_sampler() {
        let (low, high) = (trace_at(0.1), trace_at(0.9));
        let remote = |t| parent(t, true, true);
        for sampler in [
            TraceSampler::ParentBasedAlwaysOn,
            TraceSampler::ParentBasedAlwaysOff,
            TraceSampler::ParentBasedTraceIdRatio,
            TraceSampler::AlwaysOn,
        ] {
            assert!(
                decide(sampler, 0.0, Some(&remote(high)), high),
                "{sampler:?}"
            );
        }
        assert!(!decide(
            TraceSampler::AlwaysOff,
            1.0,
            Some(&remote(low)),
            low
        ));
        // Not parent-based: the parent's trace id against the ratio, as the root's was.
        assert!(decide(
            TraceSampler::TraceIdRatio,
            0.5,
            Some(&remote(low)),
            low
        ));
        assert!(!decide(
            TraceSampler::TraceIdRatio,
            0.5,
            Some(&remote(high)),
            high
        ));
    }

    #[test]
    fn roots_that_reach_the_sdk_are_kept_except_by_trace_id_or_always_off() {
        let (low, high) = (trace_at(0.1), trace_at(0.9));
        assert!(decide(TraceSampler::ParentBasedAlwaysOn, 1.0, None, high));
        assert!(decide(
            TraceSampler::ParentBasedTraceIdRatio,
            0.5,
            None,
            high
        ));
        assert!(!decide(TraceSampler::AlwaysOff, 1.0, None, low));
        assert!(decide(TraceSampler::TraceIdRatio, 0.5, None, low));
        assert!(!decide(TraceSampler::TraceIdRatio, 0.5, None, high));
        let empty = Context::new();
        assert!(decide(TraceSampler::AlwaysOn, 1.0, Some(&empty), high));
    }

    #[test]
    fn a_root_echoing_a_sampled_write_is_kept_whatever_the_sampler() {
        let high = trace_at(0.9);
        let write = |link_type: &'static str| {
            let sc = SpanContext::new(
                trace_at(0.5),
                SpanId::from_bytes([2; 8]),
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            );
            Link::new(sc, vec![KeyValue::new(LINK_TYPE, link_type)], 0)
        };
        for (_, sampler) in NAMES {
            let decide = |links: &[Link]| {
                FleetSampler::new(sampler, 0.0).decide(None, high, links)
                    == SamplingDecision::RecordAndSample
            };
            assert!(decide(&[write("write")]), "{sampler:?}");
        }
        let by_ratio = FleetSampler::new(TraceSampler::TraceIdRatio, 0.0);
        assert_eq!(
            by_ratio.decide(None, high, &[write("coalesced")]),
            SamplingDecision::Drop,
            "only a write's echo follows its cause"
        );
    }
}
