//! `ToolPattern`: the rule DSL that says which tool calls a permission rule covers.
//!
//! | form | matches |
//! |---|---|
//! | `read_file` | the tool named exactly `read_file` |
//! | `mcp__*`, `file_{read,write}` | tool names matching the glob |
//! | `/mcp__(gh\|gl)__.*/` | tool names in which the regex is found |
//! | `Bash(npm *)` | tool `Bash` whose *primary argument* matches the glob |
//! | `Edit(file_path ~ "src/**")` | tool `Edit` whose `file_path` argument matches the glob |
//! | `Bash(command =~ "(?i)\brm\b")` | tool `Bash` whose `command` argument contains a regex match |
//!
//! The name part of the argument forms may itself be a glob (`mcp__*(query ~ "*secret*")`).
//!
//! **Globs** (globset syntax: `*`, `?`, `[a-z]`, `{a,b}`, `\` escapes) match the whole
//! text, and `*` also crosses `/`, so `src/*` covers `src/a/b.rs`: rules are about
//! strings, not path segments. `*` matches any text, newlines and shell separators
//! included: `Bash(npm *)` also allows `npm test; rm -rf /`, so keep dangerous
//! commands under deny rules, which win over allows. **Regexes** (Rust `regex` syntax) are searched for
//! anywhere, as `=~` does in shells; anchor them with `^…$` to match whole names or
//! values.
//!
//! **Primary argument**: when the arguments are a JSON string, that string; when they
//! are an object with exactly one field and that field is a string, the field's value
//! (so `Bash(npm *)` works for `{"command": "npm test"}`); otherwise the canonical
//! JSON text of the arguments (keys sorted, no whitespace). For tools with several
//! arguments, name the field instead.
//!
//! **Fields** are dotted paths into the JSON arguments (`options.mode`, `files.0`; a
//! numeric segment indexes an array). A missing field never matches. A string field is
//! matched as is; any other value through its canonical JSON text (`true`, `42`).
//!
//! Quoted values take `"…"` or `'…'`; inside, `\"`, `\'` and `\\` stand for the
//! character itself and every other backslash is kept, so regex escapes such as `\b`
//! need no doubling. Everything is compiled once, when the pattern is parsed.

use std::fmt;
use std::str::FromStr;

use globset::{Candidate, GlobBuilder, GlobMatcher};
use regex::Regex;

use crate::JsonValue;
use crate::codec::canonical_json;

/// A parsed, compiled tool pattern.
#[derive(Debug, Clone)]
pub struct ToolPattern {
    source: String,
    name: NameMatcher,
    argument: Option<ArgumentMatcher>,
}

#[derive(Debug, Clone)]
enum NameMatcher {
    Exact(String),
    Glob(GlobMatcher),
    Regex(Regex),
}

#[derive(Debug, Clone)]
enum ArgumentMatcher {
    Primary(GlobMatcher),
    FieldGlob { path: FieldPath, glob: GlobMatcher },
    FieldRegex { path: FieldPath, regex: Regex },
}

/// A dotted path into JSON arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldPath(Vec<String>);

impl FieldPath {
    fn lookup<'a>(&self, args: &'a JsonValue) -> Option<&'a JsonValue> {
        self.0.iter().try_fold(args, |value, segment| match value {
            JsonValue::Object(map) => map.get(segment),
            JsonValue::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            _ => None,
        })
    }
}

/// Why a rule's pattern was refused: the rule text, where, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tool pattern `{rule}` at byte {position}: {kind}")]
pub struct PatternError {
    /// The pattern as written.
    pub rule: String,
    /// Byte offset in `rule` where the problem was found.
    pub position: usize,
    /// What is wrong.
    pub kind: PatternErrorKind,
}

/// The ways a tool pattern can be malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PatternErrorKind {
    /// Nothing but whitespace.
    #[error("the pattern is empty")]
    Empty,
    /// `(…)` with nothing before it.
    #[error("the tool name is empty")]
    EmptyName,
    /// A character tool names cannot contain outside the argument part.
    #[error("unexpected `{0}`")]
    UnexpectedChar(char),
    /// `(` without a final `)`.
    #[error("`(` is not closed by a `)` at the end")]
    UnclosedParen,
    /// `Tool()`.
    #[error("the argument condition is empty")]
    EmptyArgument,
    /// `/regex` without the final `/`.
    #[error("the regex is not closed by a `/` at the end")]
    UnterminatedRegex,
    /// `//`.
    #[error("the regex is empty")]
    EmptyRegex,
    /// A quote that is never closed.
    #[error("the quoted value is not closed")]
    UnterminatedQuote,
    /// `=~` not followed by a quoted regex.
    #[error("expected a quoted value after `{0}`")]
    ExpectedQuote(&'static str),
    /// Text after the quoted value.
    #[error("unexpected text after the quoted value")]
    TrailingInput,
    /// A dotted path with an empty segment.
    #[error("invalid field path `{0}`")]
    InvalidField(String),
    /// The glob does not compile.
    #[error("invalid glob: {0}")]
    InvalidGlob(String),
    /// The regex does not compile.
    #[error("invalid regex: {0}")]
    InvalidRegex(String),
}

impl ToolPattern {
    /// Parses and compiles a pattern.
    pub fn parse(rule: &str) -> Result<Self, PatternError> {
        Parser { rule }.parse()
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether a call to `tool_name` with `args` is covered by the pattern.
    pub fn matches(&self, tool_name: &str, args: &JsonValue) -> bool {
        let name_matches = match &self.name {
            NameMatcher::Exact(name) => name == tool_name,
            NameMatcher::Glob(glob) => glob_matches(glob, tool_name),
            NameMatcher::Regex(regex) => regex.is_match(tool_name),
        };
        name_matches
            && match &self.argument {
                None => true,
                Some(ArgumentMatcher::Primary(glob)) => match primary_argument(args) {
                    PrimaryArgument::Str(s) => glob_matches(glob, s),
                    PrimaryArgument::Json(text) => glob_matches(glob, &text),
                },
                Some(ArgumentMatcher::FieldGlob { path, glob }) => {
                    field_text(path, args, |text| glob_matches(glob, text))
                }
                Some(ArgumentMatcher::FieldRegex { path, regex }) => {
                    field_text(path, args, |text| regex.is_match(text))
                }
            }
    }

    /// The tool name, when the pattern is an exact name without argument condition —
    /// the only form whose tools can be named before any call is seen.
    pub fn exact_name(&self) -> Option<&str> {
        match (&self.name, &self.argument) {
            (NameMatcher::Exact(name), None) => Some(name),
            _ => None,
        }
    }

    /// Whether the pattern looks at the tool name only (no argument condition).
    pub fn is_name_only(&self) -> bool {
        self.argument.is_none()
    }
}

impl FromStr for ToolPattern {
    type Err = PatternError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for ToolPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn glob_matches(glob: &GlobMatcher, text: &str) -> bool {
    glob.is_match_candidate(&Candidate::from_bytes(text.as_bytes()))
}

enum PrimaryArgument<'a> {
    Str(&'a str),
    Json(String),
}

/// See the module docs: a bare string, the value of a lone string field, or the
/// canonical JSON of the arguments.
fn primary_argument(args: &JsonValue) -> PrimaryArgument<'_> {
    match args {
        JsonValue::String(s) => PrimaryArgument::Str(s),
        JsonValue::Object(map) if map.len() == 1 => match map.values().next() {
            Some(JsonValue::String(s)) => PrimaryArgument::Str(s),
            _ => PrimaryArgument::Json(canonical_json(args)),
        },
        _ => PrimaryArgument::Json(canonical_json(args)),
    }
}

fn field_text(path: &FieldPath, args: &JsonValue, test: impl Fn(&str) -> bool) -> bool {
    match path.lookup(args) {
        None => false,
        Some(JsonValue::String(s)) => test(s),
        Some(other) => test(&canonical_json(other)),
    }
}

/// Characters a tool name (or name glob) may not contain.
fn forbidden_in_name(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '"' | '\'')
}

fn has_glob_syntax(name: &str) -> bool {
    name.contains(['*', '?', '[', '{', '\\'])
}

struct Parser<'a> {
    rule: &'a str,
}

impl Parser<'_> {
    fn error(&self, position: usize, kind: PatternErrorKind) -> PatternError {
        PatternError {
            rule: self.rule.to_owned(),
            position,
            kind,
        }
    }

    fn parse(&self) -> Result<ToolPattern, PatternError> {
        let start = self.rule.len() - self.rule.trim_start().len();
        let text = self.rule.trim();
        if text.is_empty() {
            return Err(self.error(0, PatternErrorKind::Empty));
        }
        let end = start + text.len();
        let (name, argument) = if text.starts_with('/') {
            (self.regex_name(start, end)?, None)
        } else {
            match text.find('(') {
                None => (self.name(start, end)?, None),
                Some(open) => {
                    let open = start + open;
                    if open == start {
                        return Err(self.error(start, PatternErrorKind::EmptyName));
                    }
                    if !self.rule[..end].ends_with(')') {
                        return Err(self.error(end, PatternErrorKind::UnclosedParen));
                    }
                    let name = self.name(start, open)?;
                    (name, Some(self.argument(open + 1, end - 1)?))
                }
            }
        };
        Ok(ToolPattern {
            source: text.to_owned(),
            name,
            argument,
        })
    }

    fn regex_name(&self, start: usize, end: usize) -> Result<NameMatcher, PatternError> {
        let text = &self.rule[start..end];
        if text.len() < 2 || !text.ends_with('/') {
            return Err(self.error(end, PatternErrorKind::UnterminatedRegex));
        }
        let body = &text[1..text.len() - 1];
        if body.is_empty() {
            return Err(self.error(start + 1, PatternErrorKind::EmptyRegex));
        }
        Regex::new(body)
            .map(NameMatcher::Regex)
            .map_err(|e| self.error(start + 1, PatternErrorKind::InvalidRegex(e.to_string())))
    }

    fn name(&self, start: usize, end: usize) -> Result<NameMatcher, PatternError> {
        let name = &self.rule[start..end];
        if let Some((offset, c)) = name.char_indices().find(|(_, c)| forbidden_in_name(*c)) {
            return Err(self.error(start + offset, PatternErrorKind::UnexpectedChar(c)));
        }
        if has_glob_syntax(name) {
            self.glob(name, start).map(NameMatcher::Glob)
        } else {
            Ok(NameMatcher::Exact(name.to_owned()))
        }
    }

    fn glob(&self, glob: &str, position: usize) -> Result<GlobMatcher, PatternError> {
        GlobBuilder::new(glob)
            .literal_separator(false)
            .backslash_escape(true)
            .build()
            .map(|g| g.compile_matcher())
            .map_err(|e| {
                self.error(
                    position,
                    PatternErrorKind::InvalidGlob(e.kind().to_string()),
                )
            })
    }

    /// Parses `rule[start..end]`, the text between the parentheses.
    fn argument(&self, start: usize, end: usize) -> Result<ArgumentMatcher, PatternError> {
        let inner = &self.rule[start..end];
        let lead = inner.len() - inner.trim_start().len();
        let body = inner.trim();
        if body.is_empty() {
            return Err(self.error(start, PatternErrorKind::EmptyArgument));
        }
        let body_start = start + lead;
        match split_field_condition(body) {
            Some((field, operator, rest_offset)) => {
                let path = self.field_path(field, body_start)?;
                let (value, value_start) =
                    self.quoted(body_start + rest_offset, body_start + body.len(), operator)?;
                Ok(match operator {
                    "~" => ArgumentMatcher::FieldGlob {
                        path,
                        glob: self.glob(&value, value_start)?,
                    },
                    _ => ArgumentMatcher::FieldRegex {
                        path,
                        regex: Regex::new(&value).map_err(|e| {
                            self.error(value_start, PatternErrorKind::InvalidRegex(e.to_string()))
                        })?,
                    },
                })
            }
            None => self.glob(body, body_start).map(ArgumentMatcher::Primary),
        }
    }

    fn field_path(&self, field: &str, position: usize) -> Result<FieldPath, PatternError> {
        let segments: Vec<String> = field.split('.').map(str::to_owned).collect();
        if segments.iter().any(String::is_empty) {
            return Err(self.error(position, PatternErrorKind::InvalidField(field.to_owned())));
        }
        Ok(FieldPath(segments))
    }

    /// Reads the quoted value starting (after whitespace) at `start`, which must be the
    /// last thing before `end`; returns it with the position of its opening quote.
    fn quoted(
        &self,
        start: usize,
        end: usize,
        operator: &'static str,
    ) -> Result<(String, usize), PatternError> {
        let text = &self.rule[start..end];
        let lead = text.len() - text.trim_start().len();
        let mut chars = text[lead..].char_indices();
        let quote = match chars.next() {
            Some((_, q @ ('"' | '\''))) => q,
            _ => return Err(self.error(start + lead, PatternErrorKind::ExpectedQuote(operator))),
        };
        let mut value = String::new();
        let mut escaped = false;
        for (offset, c) in chars {
            if escaped {
                if c != quote && c != '\\' {
                    value.push('\\');
                }
                value.push(c);
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == quote {
                let after = start + lead + offset + c.len_utf8();
                if !self.rule[after..end].trim().is_empty() {
                    let trailing = after
                        + (self.rule[after..end].len() - self.rule[after..end].trim_start().len());
                    return Err(self.error(trailing, PatternErrorKind::TrailingInput));
                }
                return Ok((value, start + lead));
            } else {
                value.push(c);
            }
        }
        Err(self.error(start + lead, PatternErrorKind::UnterminatedQuote))
    }
}

/// Splits `field ~ …` / `field =~ …` into (field, operator, offset of what follows the
/// operator); `None` when `body` is not a field condition (then it is a primary glob).
fn split_field_condition(body: &str) -> Option<(&str, &'static str, usize)> {
    let field_len = body
        .find(|c: char| !(c.is_alphanumeric() || matches!(c, '_' | '-' | '.')))
        .unwrap_or(body.len());
    if field_len == 0 {
        return None;
    }
    let rest = &body[field_len..];
    let gap = rest.len() - rest.trim_start().len();
    let after_gap = &rest[gap..];
    let operator = if after_gap.starts_with("=~") {
        "=~"
    } else if after_gap.starts_with('~') {
        "~"
    } else {
        return None;
    };
    let value = after_gap[operator.len()..].trim_start();
    // `Bash(cd ~)` and `Bash(ls ~/*)` are primary-argument globs: a field condition
    // always quotes its value. `=~` never appears in such globs, so an unquoted regex
    // is reported instead of silently becoming a glob that never matches.
    if !value.starts_with(['"', '\'']) && operator == "~" {
        return None;
    }
    Some((
        &body[..field_len],
        operator,
        field_len + gap + operator.len(),
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn p(rule: &str) -> ToolPattern {
        ToolPattern::parse(rule).unwrap()
    }

    fn err(rule: &str) -> PatternError {
        ToolPattern::parse(rule).unwrap_err()
    }

    #[test]
    fn exact_names() {
        let pattern = p(" read_file ");
        assert_eq!(pattern.as_str(), "read_file");
        assert_eq!(pattern.exact_name(), Some("read_file"));
        assert!(pattern.matches("read_file", &json!({})));
        assert!(!pattern.matches("read_files", &json!({})));
        assert!(!pattern.matches("Read_file", &json!({})));
    }

    #[test]
    fn name_globs() {
        let pattern = p("mcp__*");
        assert_eq!(pattern.exact_name(), None);
        assert!(pattern.is_name_only());
        assert!(pattern.matches("mcp__github__create_issue", &json!(null)));
        assert!(!pattern.matches("xmcp__github", &json!(null)));
        let alternatives = p("file_{read,write}");
        assert!(alternatives.matches("file_read", &json!(null)));
        assert!(!alternatives.matches("file_delete", &json!(null)));
        assert!(p("*").matches("anything", &json!(null)));
    }

    #[test]
    fn name_regexes_search() {
        let pattern = p("/mcp__(gh|gl)__.*/");
        assert!(pattern.matches("mcp__gh__issues", &json!({})));
        assert!(!pattern.matches("mcp__bb__issues", &json!({})));
        assert!(p("/^delete_/").matches("delete_all", &json!({})));
        assert!(!p("/^delete_/").matches("undelete_all", &json!({})));
        assert!(
            p("/a/b/").matches("xa/by", &json!({})),
            "inner slashes are part of the regex"
        );
    }

    #[test]
    fn primary_argument_globs() {
        let npm = p("Bash(npm *)");
        assert!(!npm.is_name_only());
        assert!(npm.matches("Bash", &json!({"command": "npm install"})));
        assert!(npm.matches("Bash", &json!("npm run build/x")));
        assert!(!npm.matches("Bash", &json!({"command": "rm -rf /"})));
        assert!(!npm.matches("Shell", &json!({"command": "npm install"})));
        assert!(
            npm.matches("Bash", &json!("npm test\nrm -rf /")),
            "documented: `*` crosses lines and separators"
        );
        // Several fields: the canonical JSON is the primary argument.
        let json_glob = p(r#"Bash(*"command":"npm *)"#);
        assert!(json_glob.matches("Bash", &json!({"timeout": 5, "command": "npm test"})));
        assert!(!npm.matches("Bash", &json!({"command": "npm test", "timeout": 5})));
        // A lone non-string field is JSON too.
        assert!(p(r#"Sleep(\{"ms":1*\})"#).matches("Sleep", &json!({"ms": 100})));
        // `~` in a shell command is not a field operator.
        assert!(p("Bash(cd ~*)").matches("Bash", &json!({"command": "cd ~/src"})));
        // Name globs combine with argument conditions.
        assert!(p("mcp__*(*secret*)").matches("mcp__vault__get", &json!({"key": "my-secret"})));
    }

    #[test]
    fn field_globs_and_regexes() {
        let edit = p(r#"Edit(file_path ~ "src/**")"#);
        assert!(edit.matches("Edit", &json!({"file_path": "src/a/b.rs", "text": "x"})));
        assert!(!edit.matches("Edit", &json!({"file_path": "tests/a.rs"})));
        assert!(
            !edit.matches("Edit", &json!({"path": "src/a.rs"})),
            "missing field"
        );
        let single = p("Edit(file_path ~ '*.toml')");
        assert!(single.matches("Edit", &json!({"file_path": "Cargo.toml"})));

        let rm = p(r#"Bash(command =~ "(?i)\brm\b")"#);
        assert!(rm.matches("Bash", &json!({"command": "sudo RM -rf /"})));
        assert!(!rm.matches("Bash", &json!({"command": "npm run format"})));

        let nested = p(r#"Deploy(target.env =~ "^prod")"#);
        assert!(nested.matches("Deploy", &json!({"target": {"env": "production"}})));
        assert!(!nested.matches("Deploy", &json!({"target": {"env": "staging"}})));
        let indexed = p(r#"Copy(files.1 ~ "/etc/*")"#);
        assert!(indexed.matches("Copy", &json!({"files": ["a", "/etc/passwd"]})));
        assert!(!indexed.matches("Copy", &json!({"files": ["/etc/passwd"]})));
        let flag = p(r#"Bash(dangerous ~ "true")"#);
        assert!(flag.matches("Bash", &json!({"dangerous": true})));
    }

    #[test]
    fn quotes_and_escapes() {
        let quoted = p(r#"Say(text ~ "say \"hi\"")"#);
        assert!(quoted.matches("Say", &json!({"text": "say \"hi\""})));
        let doubled = p(r#"Grep(pattern =~ "\\d+")"#);
        assert!(
            doubled.matches("Grep", &json!({"pattern": "abc123"})),
            "\\\\ is one backslash, so this is the regex \\d+"
        );
        let literal = p(r#"Grep(pattern =~ "^\\\\d$")"#);
        assert!(literal.matches("Grep", &json!({"pattern": r"\d"})));
        assert!(!literal.matches("Grep", &json!({"pattern": "7"})));
        let kept = p(r#"Grep(pattern =~ "\d+")"#);
        assert!(
            kept.matches("Grep", &json!({"pattern": "abc123"})),
            "\\d stays a regex escape"
        );
    }

    #[test]
    fn errors_name_the_rule_and_position() {
        let e = err("Bash(npm *");
        assert_eq!(e.rule, "Bash(npm *");
        assert_eq!(
            (e.position, e.kind.clone()),
            (10, PatternErrorKind::UnclosedParen)
        );
        assert_eq!(
            e.to_string(),
            "invalid tool pattern `Bash(npm *` at byte 10: `(` is not closed by a `)` at the end"
        );
        assert_eq!(err("   ").kind, PatternErrorKind::Empty);
        assert_eq!(err("(x)").kind, PatternErrorKind::EmptyName);
        assert_eq!(err("Bash()").kind, PatternErrorKind::EmptyArgument);
        assert_eq!(err("Bash(  )").position, 5);
        let e = err("read file");
        assert_eq!(
            (e.position, e.kind),
            (4, PatternErrorKind::UnexpectedChar(' '))
        );
        assert_eq!(err("/mcp__.*").kind, PatternErrorKind::UnterminatedRegex);
        assert_eq!(err("//").kind, PatternErrorKind::EmptyRegex);
        assert!(matches!(
            err("/(unclosed/").kind,
            PatternErrorKind::InvalidRegex(_)
        ));
        assert!(matches!(
            err("file_[").kind,
            PatternErrorKind::InvalidGlob(_)
        ));
        assert!(matches!(
            err("Bash(npm [)").kind,
            PatternErrorKind::InvalidGlob(_)
        ));
        let e = err(r#"Bash(command =~ "(rm")"#);
        assert_eq!(e.position, 16);
        assert!(matches!(e.kind, PatternErrorKind::InvalidRegex(_)));
        let e = err(r#"Edit(path ~ "src/*" extra)"#);
        assert_eq!((e.position, e.kind), (20, PatternErrorKind::TrailingInput));
        assert_eq!(
            err(r#"Edit(path ~ "src/*)"#).kind,
            PatternErrorKind::UnterminatedQuote
        );
        assert!(
            p("Edit(path ~ src/*)").matches("Edit", &json!("path ~ src/x")),
            "an unquoted `~` value makes a primary-argument glob"
        );
        assert_eq!(
            err("Edit(path =~ src)").kind,
            PatternErrorKind::ExpectedQuote("=~")
        );
        assert!(matches!(
            err(r#"Edit(a..b ~ "x")"#).kind,
            PatternErrorKind::InvalidField(_)
        ));
        assert_eq!(err("/x/(a)").kind, PatternErrorKind::UnterminatedRegex);
    }

    #[test]
    fn display_and_from_str() {
        let pattern: ToolPattern = "Bash(npm *)".parse().unwrap();
        assert_eq!(pattern.to_string(), "Bash(npm *)");
    }
}
