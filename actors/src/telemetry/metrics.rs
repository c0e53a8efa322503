//! The engine's metrics, in Prometheus form (`prometheus-client`): the GenAI
//! client metrics of the OpenTelemetry conventions (`gen_ai.client.token.usage`,
//! `gen_ai.client.operation.duration`) and the runtime's own — runs started and
//! finished, run and tool-call durations, decisions by source and outcome, time
//! to a decision. The node's `/metrics` registers them beside its own.
//!
//! Labels are bounded: agent, provider and model ids come from configuration,
//! tool names from the agents' tools, outcomes from fixed sets; never a thread,
//! run or call id. The handles a run records into on every step (its agent's
//! inference meters) are created once per agent and cached, so a run pays
//! atomic adds, not label lookups.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

use super::mailbox::MailboxMetrics;
use super::store::StoreMetrics;
use crate::hashing::FastDashMap;

/// Bucket bounds of `gen_ai.client.token.usage` (the conventions' advice).
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];
/// Bucket bounds of `gen_ai.client.operation.duration` in seconds (the
/// conventions' advice).
const OPERATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// Bucket bounds of run, tool-call and decision waits in seconds: a millisecond
/// to a day.
const WAIT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.025, 0.1, 0.25, 1.0, 2.5, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
    43200.0, 86400.0,
];

fn token_histogram() -> Histogram {
    Histogram::new(TOKEN_BUCKETS)
}

fn operation_histogram() -> Histogram {
    Histogram::new(OPERATION_BUCKETS)
}

fn wait_histogram() -> Histogram {
    Histogram::new(WAIT_BUCKETS)
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TokenLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    gen_ai_token_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OperationLabels {
    gen_ai_operation_name: &'static str,
    gen_ai_provider_name: String,
    gen_ai_request_model: String,
    error_type: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct FinishLabels {
    agent: String,
    termination: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ToolLabels {
    tool: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    source: &'static str,
    outcome: &'static str,
}

/// Where a decision came from, for `awaken_decisions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionSource {
    /// An HTTP route (Run API or a protocol adapter).
    Http,
    /// The NATS decision bus.
    Nats,
}

/// What became of a decision, for `awaken_decisions_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionOutcome {
    /// Applied to its call.
    Applied,
    /// Its id had been applied before; nothing was done again.
    Duplicate,
    /// Refused for good (malformed, unknown call, wrong state).
    Rejected,
}

impl DecisionSource {
    fn label(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Nats => "nats",
        }
    }
}

impl DecisionOutcome {
    fn label(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::Duplicate => "duplicate",
            Self::Rejected => "rejected",
        }
    }
}

/// The engine's metric families; one per runtime, registered by the node.
#[derive(Debug, Default)]
pub struct RunMetrics {
    families: Families,
    agents: FastDashMap<String, Arc<AgentMeters>>,
    /// Each tool's histogram of successful attempts, the common case.
    tools_ok: FastDashMap<String, Histogram>,
    mailbox: MailboxMetrics,
    store: Arc<StoreMetrics>,
}

#[derive(Debug)]
struct Families {
    token_usage: Histograms<TokenLabels>,
    operation_duration: Histograms<OperationLabels>,
    runs_started: Family<AgentLabels, Counter>,
    runs_finished: Family<FinishLabels, Counter>,
    run_duration: Histograms<AgentLabels>,
    tool_duration: Histograms<ToolLabels>,
    decisions: Family<DecisionLabels, Counter>,
    time_to_decision: Histogram,
}

impl Default for Families {
    fn default() -> Self {
        Self {
            token_usage: Family::new_with_constructor(token_histogram),
            operation_duration: Family::new_with_constructor(operation_histogram),
            runs_started: Family::default(),
            runs_finished: Family::default(),
            run_duration: Family::new_with_constructor(wait_histogram),
            tool_duration: Family::new_with_constructor(wait_histogram),
            decisions: Family::default(),
            time_to_decision: wait_histogram(),
        }
    }
}

/// One agent's (and model's) meters, created once and reused by its runs.
#[derive(Debug)]
pub(crate) struct AgentMeters {
    provider: String,
    model: String,
    started: Counter,
    chat_ok: Histogram,
    input_tokens: Histogram,
    output_tokens: Histogram,
    run_duration: Histogram,
    /// The agent's finished-runs counter per termination code.
    finished: FastDashMap<String, Counter>,
}

/// The `outcome` of a tool call attempt that returned.
pub(crate) const TOOL_OK: &str = "ok";

impl RunMetrics {
    /// Registers the families in `root`: the GenAI ones under their convention
    /// names, the runtime's under the prefix `awaken`.
    pub fn register(&self, root: &mut Registry) {
        let f = &self.families;
        // `{token}` is an annotation, not a unit: Prometheus names drop it.
        root.register(
            "gen_ai_client_token_usage",
            "Tokens used per model call, by token type (input, output)",
            f.token_usage.clone(),
        );
        root.register_with_unit(
            "gen_ai_client_operation_duration",
            "Duration of model calls, by provider, model and error type",
            Unit::Seconds,
            f.operation_duration.clone(),
        );
        let awaken = root.sub_registry_with_prefix("awaken");
        awaken.register(
            "runs_started",
            "Runs started on this node, by agent",
            f.runs_started.clone(),
        );
        awaken.register(
            "runs_finished",
            "Runs finished on this node, by agent and termination",
            f.runs_finished.clone(),
        );
        awaken.register_with_unit(
            "run_duration",
            "Time from a run's creation to its end, waits for humans included, by agent",
            Unit::Seconds,
            f.run_duration.clone(),
        );
        awaken.register_with_unit(
            "tool_call_duration",
            "Duration of tool call attempts, by tool and outcome",
            Unit::Seconds,
            f.tool_duration.clone(),
        );
        awaken.register(
            "decisions",
            "Decisions handled, by source (http, nats) and outcome (applied, duplicate, rejected)",
            f.decisions.clone(),
        );
        awaken.register_with_unit(
            "time_to_decision",
            "Time from a tool call's suspension to the decision that resumed it",
            Unit::Seconds,
            f.time_to_decision.clone(),
        );
        self.mailbox.register(awaken);
        self.store.register(awaken);
    }

    /// The store's latency histograms, shared with the store's timing wrapper.
    pub(crate) fn store(&self) -> &Arc<StoreMetrics> {
        &self.store
    }

    /// The mailbox worker's meters.
    pub(crate) fn mailbox(&self) -> &MailboxMetrics {
        &self.mailbox
    }

    /// The meters of `agent` running `model` of `provider`.
    pub(crate) fn agent(&self, agent: &str, provider: &str, model: &str) -> Arc<AgentMeters> {
        if let Some(meters) = self.agents.get(agent)
            && meters.provider == provider
            && meters.model == model
        {
            return Arc::clone(&meters);
        }
        let f = &self.families;
        let token = |token_type| TokenLabels {
            gen_ai_operation_name: "chat",
            gen_ai_provider_name: provider.to_owned(),
            gen_ai_request_model: model.to_owned(),
            gen_ai_token_type: token_type,
        };
        let agent_labels = AgentLabels {
            agent: agent.to_owned(),
        };
        let meters = Arc::new(AgentMeters {
            provider: provider.to_owned(),
            model: model.to_owned(),
            started: f.runs_started.get_or_create_owned(&agent_labels),
            chat_ok: f.operation_duration.get_or_create_owned(&OperationLabels {
                gen_ai_operation_name: "chat",
                gen_ai_provider_name: provider.to_owned(),
                gen_ai_request_model: model.to_owned(),
                error_type: "",
            }),
            input_tokens: f.token_usage.get_or_create_owned(&token("input")),
            output_tokens: f.token_usage.get_or_create_owned(&token("output")),
            run_duration: f.run_duration.get_or_create_owned(&agent_labels),
            finished: FastDashMap::default(),
        });
        self.agents.insert(agent.to_owned(), Arc::clone(&meters));
        meters
    }

    /// A run of `meters`' agent ended with `termination` after `elapsed`.
    pub(crate) fn run_finished(
        &self,
        agent: &str,
        meters: &AgentMeters,
        termination: &str,
        elapsed: Duration,
    ) {
        let counter = match meters.finished.get(termination) {
            Some(counter) => counter.clone(),
            None => {
                let counter = self
                    .families
                    .runs_finished
                    .get_or_create_owned(&FinishLabels {
                        agent: agent.to_owned(),
                        termination: termination.to_owned(),
                    });
                meters
                    .finished
                    .insert(termination.to_owned(), counter.clone());
                counter
            }
        };
        counter.inc();
        meters.run_duration.observe(elapsed.as_secs_f64());
    }

    /// A model call failed with `error_type` after `elapsed`.
    pub(crate) fn chat_failed(
        &self,
        meters: &AgentMeters,
        error_type: &'static str,
        elapsed: Duration,
    ) {
        self.families
            .operation_duration
            .get_or_create(&OperationLabels {
                gen_ai_operation_name: "chat",
                gen_ai_provider_name: meters.provider.clone(),
                gen_ai_request_model: meters.model.clone(),
                error_type,
            })
            .observe(elapsed.as_secs_f64());
    }

    /// A tool call attempt of `tool` ended with `outcome` after `elapsed`.
    pub(crate) fn tool_finished(&self, tool: &str, outcome: &'static str, elapsed: Duration) {
        let labels = || ToolLabels {
            tool: tool.to_owned(),
            outcome,
        };
        if outcome != TOOL_OK {
            // Failures are rare: a label lookup is fine.
            self.families
                .tool_duration
                .get_or_create(&labels())
                .observe(elapsed.as_secs_f64());
            return;
        }
        let histogram = match self.tools_ok.get(tool) {
            Some(histogram) => histogram.clone(),
            None => {
                let histogram = self.families.tool_duration.get_or_create_owned(&labels());
                self.tools_ok.insert(tool.to_owned(), histogram.clone());
                histogram
            }
        };
        histogram.observe(elapsed.as_secs_f64());
    }

    /// Claims of queued work the mailbox worker put off because active runs
    /// filled the node's admitted memory (decision 0089).
    pub fn claims_deferred(&self) -> u64 {
        self.mailbox().claims_deferred()
    }

    /// A decision from `source` ended as `outcome`.
    pub fn decision(&self, source: DecisionSource, outcome: DecisionOutcome) {
        self.families
            .decisions
            .get_or_create(&DecisionLabels {
                source: source.label(),
                outcome: outcome.label(),
            })
            .inc();
    }

    /// A suspended call was decided `waited` after it suspended.
    pub(crate) fn decided_after(&self, waited: Duration) {
        self.families.time_to_decision.observe(waited.as_secs_f64());
    }
}

impl AgentMeters {
    /// A run started.
    pub(crate) fn run_started(&self) {
        self.started.inc();
    }

    /// A model call answered after `elapsed`, with the usage it reported.
    pub(crate) fn chat_answered(&self, elapsed: Duration, input: Option<u64>, output: Option<u64>) {
        self.chat_ok.observe(elapsed.as_secs_f64());
        // Token counts are far below 2^53: exact as f64.
        #[allow(clippy::cast_precision_loss)]
        {
            if let Some(tokens) = input {
                self.input_tokens.observe(tokens as f64);
            }
            if let Some(tokens) = output {
                self.output_tokens.observe(tokens as f64);
            }
        }
    }
}
