//! Permission rules: allow / ask / deny per tool pattern, their wire form and how a
//! call is decided.

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::pattern::{PatternError, ToolPattern};
use crate::JsonValue;
use crate::contract::PluginConfigKey;

/// What a rule (or the default) does with a call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PermissionBehavior {
    /// Run the call without asking.
    Allow,
    /// Suspend the call until a human decides.
    #[default]
    Ask,
    /// Block the call.
    Deny,
}

/// One rule as written in a rules file or the `permission` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionRuleEntry {
    /// The tool pattern (see [`ToolPattern`] for the syntax).
    pub tool: String,
    /// What to do with matching calls.
    pub behavior: PermissionBehavior,
}

impl PermissionRuleEntry {
    /// A rule from a pattern and a behaviour.
    pub fn new(tool: impl Into<String>, behavior: PermissionBehavior) -> Self {
        Self {
            tool: tool.into(),
            behavior,
        }
    }
}

/// Rules as written (YAML, JSON, or an agent's `permission` section), before their
/// patterns are compiled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PermissionRulesConfig {
    /// For calls no rule matches; `ask` when absent (an agent section without it keeps
    /// the plugin's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_behavior: Option<PermissionBehavior>,
    /// The rules; their order only decides which rule is reported when several of the
    /// winning behaviour match.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PermissionRuleEntry>,
}

impl PermissionRulesConfig {
    /// Parses a YAML document.
    pub fn from_yaml(text: &str) -> Result<Self, RulesError> {
        serde_yaml_ng::from_str(text).map_err(|e| RulesError::Yaml(e.to_string()))
    }

    /// Parses a JSON document.
    pub fn from_json(text: &str) -> Result<Self, RulesError> {
        serde_json::from_str(text).map_err(|e| RulesError::Json(e.to_string()))
    }

    /// Compiles every pattern; the first bad one fails the whole set.
    pub fn compile(&self) -> Result<PermissionRules, RulesError> {
        let mut rules =
            PermissionRules::new(self.default_behavior.unwrap_or(PermissionBehavior::Ask));
        rules.push_entries(&self.rules)?;
        Ok(rules)
    }
}

/// Why rules could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RulesError {
    /// The YAML is malformed or has the wrong shape.
    #[error("invalid permission rules YAML: {0}")]
    Yaml(String),
    /// The JSON is malformed or has the wrong shape.
    #[error("invalid permission rules JSON: {0}")]
    Json(String),
    /// The rules file could not be read.
    #[error("cannot read permission rules: {0}")]
    Io(String),
    /// A rule's pattern does not parse or compile.
    #[error("permission rule {index}: {source}")]
    Pattern {
        /// The rule's 0-based position in its list.
        index: usize,
        /// The pattern error, naming the rule text.
        #[source]
        source: PatternError,
    },
}

/// The `permission` section of an agent spec, read by [`PermissionPlugin`](super::PermissionPlugin).
#[derive(Debug)]
pub struct PermissionConfigKey;

impl PluginConfigKey for PermissionConfigKey {
    const KEY: &'static str = "permission";
    type Config = PermissionRulesConfig;
}

/// A compiled rule.
#[derive(Debug, Clone)]
pub struct PermissionRule {
    /// Which calls it covers.
    pub pattern: ToolPattern,
    /// What it does with them.
    pub behavior: PermissionBehavior,
}

/// What the rules say about one call.
#[derive(Debug, Clone, Copy)]
pub struct PermissionVerdict<'a> {
    /// The decision.
    pub behavior: PermissionBehavior,
    /// The rule that decided it; `None` when the default applied.
    pub rule: Option<&'a PermissionRule>,
}

impl PermissionVerdict<'_> {
    /// The deciding rule's pattern, or `default` — for messages.
    pub fn source(&self) -> &str {
        self.rule.map_or("default", |r| r.pattern.as_str())
    }
}

/// Compiled rules with firewall-like priority: **deny > allow > ask**, then the
/// default (book: "Understand rule evaluation").
///
/// Every rule that matches a call is considered, whatever its position: one matching
/// `deny` blocks the call; otherwise one matching `allow` runs it; otherwise one
/// matching `ask` suspends it; otherwise the default behaviour applies. An `allow`
/// therefore overrides a broader `ask` (`Bash(npm *)` allow beside `Bash` ask runs npm
/// without asking), while narrowing an allowed tool down takes a `deny`.
#[derive(Debug, Clone)]
pub struct PermissionRules {
    default_behavior: PermissionBehavior,
    rules: Vec<PermissionRule>,
}

impl Default for PermissionRules {
    fn default() -> Self {
        Self::new(PermissionBehavior::Ask)
    }
}

impl PermissionRules {
    /// No rules, and `default_behavior` for every call.
    pub fn new(default_behavior: PermissionBehavior) -> Self {
        Self {
            default_behavior,
            rules: Vec::new(),
        }
    }

    /// Adds a rule, parsing its pattern.
    pub fn with_rule(
        mut self,
        pattern: &str,
        behavior: PermissionBehavior,
    ) -> Result<Self, PatternError> {
        self.rules.push(PermissionRule {
            pattern: ToolPattern::parse(pattern)?,
            behavior,
        });
        Ok(self)
    }

    /// Loads and compiles a YAML rules document.
    pub fn from_yaml(text: &str) -> Result<Self, RulesError> {
        PermissionRulesConfig::from_yaml(text)?.compile()
    }

    /// Loads and compiles a JSON rules document.
    pub fn from_json(text: &str) -> Result<Self, RulesError> {
        PermissionRulesConfig::from_json(text)?.compile()
    }

    /// Loads a rules file: JSON when the extension is `.json`, YAML otherwise.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, RulesError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| RulesError::Io(format!("{}: {e}", path.display())))?;
        if path.extension().is_some_and(|ext| ext == "json") {
            Self::from_json(&text)
        } else {
            Self::from_yaml(&text)
        }
    }

    /// These rules followed by `config`'s, with `config`'s default when it sets one.
    pub fn layered(&self, config: &PermissionRulesConfig) -> Result<Self, RulesError> {
        let mut rules = self.clone();
        if let Some(default) = config.default_behavior {
            rules.default_behavior = default;
        }
        rules.push_entries(&config.rules)?;
        Ok(rules)
    }

    fn push_entries(&mut self, entries: &[PermissionRuleEntry]) -> Result<(), RulesError> {
        for (index, entry) in entries.iter().enumerate() {
            let pattern = ToolPattern::parse(&entry.tool)
                .map_err(|source| RulesError::Pattern { index, source })?;
            self.rules.push(PermissionRule {
                pattern,
                behavior: entry.behavior,
            });
        }
        Ok(())
    }

    /// The behaviour for calls no rule matches.
    pub fn default_behavior(&self) -> PermissionBehavior {
        self.default_behavior
    }

    /// The rules, in order.
    pub fn rules(&self) -> &[PermissionRule] {
        &self.rules
    }

    /// Decides a call: deny > allow > ask > default; the first matching rule of the
    /// winning behaviour is reported.
    pub fn evaluate(&self, tool_name: &str, args: &JsonValue) -> PermissionVerdict<'_> {
        let mut allow = None;
        let mut ask = None;
        for rule in &self.rules {
            if !rule.pattern.matches(tool_name, args) {
                continue;
            }
            match rule.behavior {
                PermissionBehavior::Deny => {
                    return PermissionVerdict {
                        behavior: PermissionBehavior::Deny,
                        rule: Some(rule),
                    };
                }
                PermissionBehavior::Allow => {
                    allow.get_or_insert(rule);
                }
                PermissionBehavior::Ask => {
                    ask.get_or_insert(rule);
                }
            }
        }
        match (allow, ask) {
            (Some(rule), _) => PermissionVerdict {
                behavior: PermissionBehavior::Allow,
                rule: Some(rule),
            },
            (None, Some(rule)) => PermissionVerdict {
                behavior: PermissionBehavior::Ask,
                rule: Some(rule),
            },
            (None, None) => PermissionVerdict {
                behavior: self.default_behavior,
                rule: None,
            },
        }
    }

    /// Tools denied whatever their arguments, by exact name: deny rules that are a
    /// plain tool name. Pattern-based denials cannot be listed before a call names a
    /// tool, so they are enforced at BeforeToolExecute only.
    pub fn unconditionally_denied(&self) -> impl Iterator<Item = &str> {
        self.rules
            .iter()
            .filter(|r| r.behavior == PermissionBehavior::Deny)
            .filter_map(|r| r.pattern.exact_name())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const BOOK_YAML: &str = r#"
default_behavior: ask
rules:
  - tool: "read_file"
    behavior: allow
  - tool: "Bash(npm *)"
    behavior: allow
  - tool: "file_*"
    behavior: ask
  - tool: "delete_*"
    behavior: deny
  - tool: "mcp__*"
    behavior: ask
"#;

    fn decide(
        rules: &PermissionRules,
        tool: &str,
        args: JsonValue,
    ) -> (PermissionBehavior, String) {
        let verdict = rules.evaluate(tool, &args);
        (verdict.behavior, verdict.source().to_owned())
    }

    #[test]
    fn the_book_example_decides_as_documented() {
        use PermissionBehavior::*;
        let rules = PermissionRules::from_yaml(BOOK_YAML).unwrap();
        assert_eq!(rules.rules().len(), 5);
        assert_eq!(
            decide(&rules, "read_file", json!({})),
            (Allow, "read_file".into())
        );
        assert_eq!(
            decide(&rules, "Bash", json!({"command": "npm test"})),
            (Allow, "Bash(npm *)".into())
        );
        assert_eq!(
            decide(&rules, "Bash", json!({"command": "rm -rf /"})),
            (Ask, "default".into())
        );
        assert_eq!(
            decide(&rules, "file_write", json!({})),
            (Ask, "file_*".into())
        );
        assert_eq!(
            decide(&rules, "delete_all", json!({})),
            (Deny, "delete_*".into())
        );
        assert_eq!(
            decide(&rules, "mcp__gh__pr", json!({})),
            (Ask, "mcp__*".into())
        );
    }

    #[test]
    fn deny_beats_allow_beats_ask_regardless_of_order() {
        use PermissionBehavior::*;
        let rules = PermissionRules::new(Deny)
            .with_rule("Bash", Ask)
            .unwrap()
            .with_rule("Bash(npm *)", Allow)
            .unwrap()
            .with_rule(r#"Bash(command =~ "--force")"#, Deny)
            .unwrap();
        let bash = |c: &str| decide(&rules, "Bash", json!({ "command": c }));
        assert_eq!(bash("ls").0, Ask);
        assert_eq!(
            bash("npm install").0,
            Allow,
            "allow overrides the broader ask"
        );
        assert_eq!(
            bash("npm publish --force"),
            (Deny, r#"Bash(command =~ "--force")"#.into())
        );
        assert_eq!(decide(&rules, "Edit", json!({})), (Deny, "default".into()));

        let reversed = PermissionRules::new(Allow)
            .with_rule(r#"Bash(command =~ "--force")"#, Deny)
            .unwrap()
            .with_rule("*", Allow)
            .unwrap();
        assert_eq!(
            decide(&reversed, "Bash", json!({"command": "git push --force"})).0,
            Deny
        );
    }

    #[test]
    fn json_files_and_defaults() {
        let rules = PermissionRules::from_json(
            r#"{"rules": [{"tool": "/^danger_/", "behavior": "deny"}, {"tool": "danger_zone", "behavior": "allow"}]}"#,
        )
        .unwrap();
        assert_eq!(rules.default_behavior(), PermissionBehavior::Ask);
        assert_eq!(
            rules.evaluate("danger_zone", &json!({})).behavior,
            PermissionBehavior::Deny
        );
        assert_eq!(
            PermissionRules::from_json("{}")
                .unwrap()
                .evaluate("x", &json!({}))
                .behavior,
            PermissionBehavior::Ask
        );
    }

    #[test]
    fn load_errors_name_the_rule() {
        let err = PermissionRules::from_yaml("rules:\n  - tool: read_file\n    behavior: allow\n  - tool: \"Bash(npm *\"\n    behavior: allow\n")
            .unwrap_err();
        match &err {
            RulesError::Pattern { index, source } => {
                assert_eq!(*index, 1);
                assert_eq!(source.rule, "Bash(npm *");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(
            err.to_string()
                .starts_with("permission rule 1: invalid tool pattern `Bash(npm *`"),
            "{err}"
        );
        assert!(
            matches!(
                PermissionRules::from_yaml("rules:\n  - tool: x\n    behaviour: allow\n"),
                Err(RulesError::Yaml(_))
            ),
            "unknown fields are refused"
        );
        assert!(matches!(
            PermissionRules::from_json(r#"{"rules": [{"tool": "x", "behavior": "maybe"}]}"#),
            Err(RulesError::Json(_))
        ));
        assert!(matches!(
            PermissionRules::from_file("/nonexistent/permissions.yaml"),
            Err(RulesError::Io(_))
        ));
    }

    #[test]
    fn layering_appends_rules_and_may_replace_the_default() {
        let base = PermissionRules::new(PermissionBehavior::Allow)
            .with_rule("rm", PermissionBehavior::Deny)
            .unwrap();
        let section = PermissionRulesConfig {
            default_behavior: None,
            rules: vec![PermissionRuleEntry::new("mcp__*", PermissionBehavior::Ask)],
        };
        let layered = base.layered(&section).unwrap();
        assert_eq!(layered.default_behavior(), PermissionBehavior::Allow);
        assert_eq!(layered.rules().len(), 2);
        let strict = base
            .layered(&PermissionRulesConfig {
                default_behavior: Some(PermissionBehavior::Deny),
                rules: Vec::new(),
            })
            .unwrap();
        assert_eq!(strict.default_behavior(), PermissionBehavior::Deny);
    }

    #[test]
    fn only_plain_names_are_unconditionally_denied() {
        let rules = PermissionRules::new(PermissionBehavior::Ask)
            .with_rule("rm", PermissionBehavior::Deny)
            .unwrap()
            .with_rule("delete_*", PermissionBehavior::Deny)
            .unwrap()
            .with_rule("Bash(rm *)", PermissionBehavior::Deny)
            .unwrap()
            .with_rule("ls", PermissionBehavior::Allow)
            .unwrap();
        assert_eq!(rules.unconditionally_denied().collect::<Vec<_>>(), ["rm"]);
    }

    #[test]
    fn config_round_trips_and_has_a_schema() {
        let config = PermissionRulesConfig::from_yaml(BOOK_YAML).unwrap();
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(
            json["rules"][1],
            json!({"tool": "Bash(npm *)", "behavior": "allow"})
        );
        assert_eq!(
            PermissionRulesConfig::from_json(&json.to_string()).unwrap(),
            config
        );
        let schema = serde_json::to_value(schemars::schema_for!(PermissionRulesConfig)).unwrap();
        assert_eq!(schema["additionalProperties"], json!(false));
    }
}
