//! The crates' modules import one way: no module imports a module that
//! imports it back, directly or around a circle, except the circles listed in
//! [`KNOWN_CIRCLES`] (none is left), which may only go away.
//!
//! The graph is read from the source's `use` declarations and the `crate::`,
//! `super::` and `self::` paths written out in code: a module's file
//! imports another's when it names an item of that module or the module
//! itself. A module using its own submodules does not count (they are its
//! parts: `mod.rs` composing its folder), nor do test modules (`#[cfg(test)]
//! mod …` and what follows it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test may panic

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles that existed when the check was added, as sorted file lists. Remove
/// a line when its circle is untangled; the test fails while a listed circle is
/// gone, so the list cannot go stale.
const KNOWN_CIRCLES: &[&str] = &[];

/// The library crates whose modules are checked.
const CRATES: &[&str] = &["actors", "cluster", "gateway"];

/// A module path inside its crate (`["thread", "region"]`); empty for the root.
type ModulePath = Vec<String>;

#[test]
fn modules_import_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = BTreeSet::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let modules = modules_of(&src);
        let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
        let index: BTreeMap<&ModulePath, usize> = modules
            .iter()
            .enumerate()
            .map(|(i, (m, _))| (m, i))
            .collect();
        for (from, (module, file)) in modules.iter().enumerate() {
            for path in use_paths(&std::fs::read_to_string(file).unwrap()) {
                let Some(absolute) = absolute(module, &path) else {
                    continue;
                };
                let Some(target) = longest_module(&index, &absolute) else {
                    continue;
                };
                let target_path = &modules[target].0;
                // A module's own parts (and itself) are not a tie between modules.
                if target_path.starts_with(module) {
                    continue;
                }
                edges.entry(from).or_default().insert(target);
            }
        }
        for circle in strongly_connected(modules.len(), &edges) {
            let mut files: Vec<String> = circle
                .iter()
                .map(|&i| relative(&root, &modules[i].1))
                .collect();
            files.sort();
            found.insert(files.join(" "));
        }
    }
    let known: BTreeSet<String> = KNOWN_CIRCLES.iter().map(|c| (*c).to_owned()).collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    assert!(
        new.is_empty(),
        "modules that import each other (directly or around a circle): {new:#?}"
    );
    assert!(
        gone.is_empty(),
        "untangled: remove these from KNOWN_CIRCLES: {gone:#?}"
    );
}

/// Every module file of the crate under `src` with its module path (the
/// library's tree; `main.rs` and `bin/` are other crates).
fn modules_of(src: &Path) -> Vec<(ModulePath, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().unwrap();
            match last.as_str() {
                "main.rs" if parts.is_empty() => continue,
                _ if parts.first().is_some_and(|p| p == "bin") => continue,
                "lib.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                _ => parts.push(last.trim_end_matches(".rs").to_owned()),
            }
            out.push((parts, path));
        }
    }
    out.sort();
    out
}

/// The paths a file's `use` declarations name, before its test module; each
/// path as its segments (`crate`, `super`, `self` kept as written).
fn use_paths(source: &str) -> Vec<Vec<String>> {
    let code = production_part(source);
    let mut out = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = find_use(rest) {
        let after = &rest[at..];
        let Some(end) = after.find(';') else { break };
        // `a::{B as C, d}` → `a::{B@C,d}`: renames kept apart, spaces gone.
        let words: Vec<&str> = after["use ".len()..end].split_whitespace().collect();
        let tree = words.join(" ").replace(" as ", "@").replace(' ', "");
        expand(&tree, &mut Vec::new(), &mut out);
        rest = &after[end..];
    }
    out.extend(inline_paths(&code));
    out
}

/// Paths written out in code (`super::http::read_body(…)`, `crate::codec::encode`).
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].chars().next_back().is_some_and(is_ident) {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|&c| is_ident(c) || c == ':')
                .collect();
            let segments: Vec<String> = path
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            out.push(segments);
        }
    }
    out
}

/// The source up to its test module, with line comments removed.
fn production_part(source: &str) -> String {
    let mut out = String::new();
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let code = trimmed.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Where the next `use` declaration starts (at a line's start, after any `pub`).
fn find_use(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let mut rest = line;
        if let Some(after) = rest.strip_prefix("pub") {
            rest = after.trim_start();
            if rest.starts_with('(') {
                rest = rest.split_once(')').map_or("", |(_, r)| r).trim_start();
            }
        }
        if rest.starts_with("use ") {
            return Some(offset + (line.len() - rest.len()));
        }
        offset += line.len();
    }
    None
}

/// Expands a use tree (`a::b::{c, d::{e, f}}`) into its paths.
fn expand(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let (head, group) = match tree.find('{') {
        Some(open) if tree.ends_with('}') => (&tree[..open], Some(&tree[open + 1..tree.len() - 1])),
        _ => (tree, None),
    };
    let depth = prefix.len();
    for segment in head.split("::").filter(|s| !s.is_empty()) {
        let name = segment.split('@').next().unwrap_or(segment);
        if name != "*" {
            prefix.push(name.to_owned());
        }
    }
    match group {
        Some(group) => {
            for item in split_top_level(group) {
                expand(item, prefix, out);
            }
        }
        None => out.push(prefix.clone()),
    }
    prefix.truncate(depth);
}

/// `a, b::{c, d}, e` split at its top-level commas.
fn split_top_level(group: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&group[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// `path` as seen from `module` made absolute in its crate; `None` for another
/// crate's path.
fn absolute(module: &[String], path: &[String]) -> Option<ModulePath> {
    let mut segments = path.iter();
    let mut base: ModulePath = match segments.next()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => parent(module),
        _ => return None,
    };
    for segment in segments {
        match segment.as_str() {
            "super" => base = parent(&base),
            "self" => {}
            name => base.push(name.to_owned()),
        }
    }
    Some(base)
}

fn parent(module: &[String]) -> ModulePath {
    module[..module.len().saturating_sub(1)].to_vec()
}

/// The module the longest prefix of `path` names.
fn longest_module(index: &BTreeMap<&ModulePath, usize>, path: &[String]) -> Option<usize> {
    (0..=path.len())
        .rev()
        .find_map(|n| index.get(&path[..n].to_vec()).copied())
}

/// The strongly connected components of more than one module (Tarjan).
fn strongly_connected(n: usize, edges: &BTreeMap<usize, BTreeSet<usize>>) -> Vec<Vec<usize>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<usize, BTreeSet<usize>>,
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            let targets: Vec<usize> = self
                .edges
                .get(&v)
                .map(|t| t.iter().copied().collect())
                .unwrap_or_default();
            for w in targets {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(index) if self.on_stack[w] => self.low[v] = self.low[v].min(index),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if walk.index[v].is_none() {
            walk.visit(v);
        }
    }
    walk.out
}

fn relative(root: &Path, file: &Path) -> String {
    let root = root.canonicalize().unwrap();
    file.canonicalize()
        .unwrap()
        .strip_prefix(&root)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}
