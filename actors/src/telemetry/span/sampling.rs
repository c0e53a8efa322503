//! Which traces are recorded (`OTEL_TRACES_SAMPLER`): the rules of the
//! OpenTelemetry specification, decided once per span from its parent's
//! `sampled` flag and its trace id.

/// Which traces are recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    /// Every trace.
    AlwaysOn,
    /// None.
    AlwaysOff,
    /// This share of traces, by trace id.
    Ratio(f64),
    /// As the caller decided, else the inner rule for new traces.
    ParentBased(RootSampling),
}

/// The rule for new traces under [`Sampling::ParentBased`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RootSampling {
    /// Every new trace.
    AlwaysOn,
    /// No new trace.
    AlwaysOff,
    /// This share of new traces.
    Ratio(f64),
}

impl Sampling {
    /// Whether a span of `trace_id` is recorded; `parent_sampled` is its
    /// parent's flag, `None` for the root of a new trace.
    pub(super) fn samples(self, parent_sampled: Option<bool>, trace_id: &[u8; 16]) -> bool {
        match self {
            Self::AlwaysOn => true,
            Self::AlwaysOff => false,
            Self::Ratio(ratio) => by_trace_id(ratio, trace_id),
            Self::ParentBased(root) => match parent_sampled {
                Some(sampled) => sampled,
                None => match root {
                    RootSampling::AlwaysOn => true,
                    RootSampling::AlwaysOff => false,
                    RootSampling::Ratio(ratio) => by_trace_id(ratio, trace_id),
                },
            },
        }
    }
}

/// The specification's `TraceIdRatioBased`: the trace id's low 63 bits below
/// `ratio` of their range, so every service sampling a trace at the same ratio
/// makes the same choice.
fn by_trace_id(ratio: f64, trace_id: &[u8; 16]) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    // Saturating float-to-int conversion: NaN and negatives give 0.
    let bound = (ratio * (1u64 << 63) as f64) as u64;
    let mut low = [0u8; 8];
    low.copy_from_slice(&trace_id[8..]);
    (u64::from_be_bytes(low) >> 1) < bound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(low: u64) -> [u8; 16] {
        let mut id = [0xab; 16];
        id[8..].copy_from_slice(&low.to_be_bytes());
        id
    }

    #[test]
    fn a_ratio_keeps_the_trace_ids_below_its_share() {
        let half = Sampling::Ratio(0.5);
        assert!(half.samples(None, &trace(0)));
        assert!(half.samples(None, &trace(u64::MAX / 2 - 2)));
        assert!(!half.samples(None, &trace(u64::MAX / 2 + 2)));
        assert!(!Sampling::Ratio(0.0).samples(None, &trace(0)));
        assert!(Sampling::Ratio(1.0).samples(None, &trace(u64::MAX)));
        // A ratio ignores the parent's choice.
        assert!(half.samples(Some(false), &trace(1)));
    }

    #[test]
    fn parent_based_follows_the_parent_and_asks_its_root_rule_otherwise() {
        let parent_based = Sampling::ParentBased(RootSampling::AlwaysOff);
        assert!(parent_based.samples(Some(true), &trace(0)));
        assert!(!parent_based.samples(Some(false), &trace(0)));
        assert!(!parent_based.samples(None, &trace(0)));
        let ratio = Sampling::ParentBased(RootSampling::Ratio(0.5));
        assert!(ratio.samples(None, &trace(3)));
        assert!(!ratio.samples(None, &trace(u64::MAX)));
        assert!(Sampling::AlwaysOn.samples(Some(false), &trace(0)));
        assert!(!Sampling::AlwaysOff.samples(Some(true), &trace(0)));
    }
}
