//! The modules of every crate import downward only (ARCHITECTURE.md,
//! "Layers of the engine"), and the core engine links no HTTP client.
//!
//! Drawn from the source of each crate: an edge `a -> b` for every
//! `crate::b` named in a non-test file of top-level module `a` (comments
//! excluded), and, inside a module directory, an edge between sibling files
//! for every `super::x` or `crate::m::x` naming another child of the same
//! parent. In every crate the graph has no cycle (no module imports one
//! that imports it back). In the engine, every top-level module also sits
//! in one of [`LAYERS`] and imports only from its own layer or the ones
//! below; a new module must be placed in a layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers of the engine, from the bottom. A module may import from its
/// own layer (without a cycle) and from any layer below, never from above.
const LAYERS: &[(&str, &[&str])] = &[
    ("leaves", &["json_text", "parallel", "timestamp"]),
    ("the data model", &["config", "event"]),
    (
        "the view, pure functions of events",
        &["dedup", "projection"],
    ),
    ("the core error", &["error"]),
    ("framing", &["log"]),
    ("conversations", &["conversation"]),
    ("the store", &["store"]),
    (
        "features, each over the store",
        &[
            "append",
            "compaction",
            "copy",
            "export",
            "fsck",
            "gc",
            "import",
            "search",
            "stats",
            "stream",
            "upgrade",
        ],
    ),
    ("the conversation handle, over the features", &["handle"]),
    (
        "what the other crates reach below the face, over everything",
        &["internal"],
    ),
];

type Graph = BTreeMap<String, BTreeSet<String>>;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Whether a file holds only tests (`#[cfg(test)] mod tests;` and kin).
fn is_test_file(path: &Path) -> bool {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    stem == "tests" || stem == "proptests" || stem.ends_with("_tests")
}

/// The code of a file without comments and without its inline test module
/// (by the project's convention, `#[cfg(test)]` followed by `mod tests {`
/// runs to the end of the file).
fn code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod ") && next.contains('{'))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Every identifier path that follows `prefix` (`crate::` or `super::`),
/// as its segments.
fn paths_after<'t>(code: &'t str, prefix: &str) -> Vec<Vec<&'t str>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let mut segments = Vec::new();
        let mut tail = rest;
        loop {
            let len = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if len == 0 {
                break;
            }
            segments.push(&tail[..len]);
            match tail[len..].strip_prefix("::") {
                Some(next) => tail = next,
                None => break,
            }
        }
        if !segments.is_empty() {
            found.push(segments);
        }
    }
    found
}

/// The module a source file is: its path below `src` as segments, with
/// `mod.rs` standing for its directory.
fn module_of(src: &Path, path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(src).expect("below src");
    let mut segments: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    let last = segments.pop().expect("a file name");
    if last != "mod.rs" {
        segments.push(last.trim_end_matches(".rs").to_string());
    }
    segments
}

/// The crates of the workspace whose modules are checked.
const CRATES: &[&str] = &["blobstore", "engine", "remote", "integrations", "cli"];

/// The workspace root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate is in the workspace")
        .to_path_buf()
}

fn graph(krate: &str) -> Graph {
    let src = workspace().join(krate).join("src");
    let mut files = Vec::new();
    source_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files
        .iter()
        .filter(|p| !is_test_file(p))
        .map(|p| module_of(&src, p))
        .collect();
    let is_module = |segments: &[String]| modules.contains(segments);
    let mut graph = Graph::new();
    for path in files.iter().filter(|p| !is_test_file(p)) {
        let module = module_of(&src, path);
        let Some(top) = module.first().cloned() else {
            continue;
        };
        if module == ["lib"] || module == ["main"] {
            continue; // The crate root declares and re-exports.
        }
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let code = code(&text);
        graph.entry(top.clone()).or_default();
        for segments in paths_after(&code, "crate::") {
            let target = segments[0].to_string();
            if target != top && is_module(std::slice::from_ref(&target)) {
                graph.entry(top.clone()).or_default().insert(target.clone());
            }
            // Siblings inside one module directory.
            if target == top && module.len() == 2 && segments.len() >= 2 {
                let sibling = vec![top.clone(), segments[1].to_string()];
                if sibling != module && is_module(&sibling) {
                    graph
                        .entry(module.join("/"))
                        .or_default()
                        .insert(sibling.join("/"));
                }
            }
        }
        if module.len() == 2 {
            for segments in paths_after(&code, "super::") {
                let sibling = vec![module[0].clone(), segments[0].to_string()];
                if sibling != module && is_module(&sibling) {
                    graph
                        .entry(module.join("/"))
                        .or_default()
                        .insert(sibling.join("/"));
                }
            }
        }
    }
    graph
}

/// The strongly connected components of more than one node (Tarjan).
fn cycles(graph: &Graph) -> BTreeSet<BTreeSet<String>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: BTreeSet<BTreeSet<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = BTreeSet::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.insert(top.to_string());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.insert(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: BTreeSet::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found
}

/// The edges of `graph` between the nodes of `cycle`.
fn edges_within(graph: &Graph, cycle: &BTreeSet<String>) -> Vec<String> {
    cycle
        .iter()
        .flat_map(|a| {
            graph[a]
                .iter()
                .filter(|b| cycle.contains(*b))
                .map(move |b| format!("{a} -> {b}"))
        })
        .collect()
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    for krate in CRATES {
        let graph = graph(krate);
        assert!(
            graph.len() > 3,
            "the source walk of {krate} found its modules: {:?}",
            graph.keys().collect::<Vec<_>>()
        );
        let found = cycles(&graph);
        if let Some(cycle) = found.iter().next() {
            panic!(
                "an import cycle in {krate}: {cycle:?}, through {:?}; move the shared piece down a layer",
                edges_within(&graph, cycle)
            );
        }
    }
    let engine = graph("engine");
    assert!(
        engine.contains_key("log") && engine.contains_key("event/json"),
        "the source walk found the engine's modules: {:?}",
        engine.keys().collect::<Vec<_>>()
    );
}

#[test]
fn every_module_imports_from_its_layer_or_below() {
    let graph = graph("engine");
    let layer_of: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .flat_map(|(i, (_, modules))| modules.iter().map(move |m| (*m, i)))
        .collect();
    let top_level: Vec<&String> = graph.keys().filter(|m| !m.contains('/')).collect();
    assert!(top_level.len() > 10, "modules found: {top_level:?}");
    for module in &top_level {
        let Some(&layer) = layer_of.get(module.as_str()) else {
            panic!("module `{module}` is in no layer: add it to LAYERS");
        };
        for target in &graph[*module] {
            let Some(&target_layer) = layer_of.get(target.as_str()) else {
                panic!("module `{target}` is in no layer: add it to LAYERS");
            };
            assert!(
                target_layer <= layer,
                "`{module}` ({}) imports `{target}` ({}), a layer above it",
                LAYERS[layer].0,
                LAYERS[target_layer].0
            );
        }
    }
    for (_, modules) in LAYERS {
        for m in *modules {
            assert!(
                graph.contains_key(*m),
                "LAYERS names `{m}`, which is not a module of the engine"
            );
        }
    }
}

#[test]
fn the_cycle_finder_finds_cycles_and_only_cycles() {
    let edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e")];
    let mut graph = Graph::new();
    for (from, to) in edges {
        graph
            .entry(from.to_string())
            .or_default()
            .insert(to.to_string());
        graph.entry(to.to_string()).or_default();
    }
    let found = cycles(&graph);
    let abc: BTreeSet<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    assert_eq!(found, BTreeSet::from([abc]));
}

#[test]
fn comments_and_inline_tests_are_not_imports() {
    let text = "use crate::a::X;\n// crate::b in a comment\n/// [`crate::c`]\nfn f() { crate::d::g() }\n#[cfg(test)]\nmod tests {\n    use crate::e;\n}\n";
    let code = code(text);
    let targets: Vec<&str> = paths_after(&code, "crate::")
        .into_iter()
        .map(|s| s[0])
        .collect();
    assert_eq!(targets, ["a", "d"]);
}

/// Every package of the lock file at `path` with the names of its
/// dependencies.
fn lock_dependencies(path: &Path) -> BTreeMap<String, Vec<String>> {
    let lock = std::fs::read_to_string(path).expect("read a Cargo.lock");
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for package in lock.split("[[package]]").skip(1) {
        let mut name = None;
        let mut list = Vec::new();
        let mut in_deps = false;
        for line in package.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_string());
            } else if line.starts_with("dependencies = [") {
                in_deps = true;
            } else if in_deps && line.starts_with(']') {
                in_deps = false;
            } else if in_deps {
                // `"name"` or `"name version"` (when two versions are locked).
                let item = line.trim_end_matches(',').trim_matches('"');
                if let Some(dep) = item.split(' ').next() {
                    list.push(dep.to_string());
                }
            }
        }
        if let Some(name) = name {
            deps.entry(name).or_default().extend(list);
        }
    }
    deps
}

/// The packages `root` depends on, directly or not, as `Cargo.lock` lists
/// them (normal, build and dev dependencies alike: the lock file does not
/// tell them apart, so this errs on the side of finding too much).
fn dependency_closure(root: &str) -> BTreeSet<String> {
    let deps = lock_dependencies(&workspace().join("Cargo.lock"));
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(p) = todo.pop() {
        for d in deps.get(&p).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

#[test]
fn the_core_engine_links_no_http_client_walker_or_mime_table() {
    let core = dependency_closure("jpstore-engine");
    assert!(
        core.contains("jpstore-blobstore") && core.contains("zstd"),
        "{core:?}"
    );
    for outside in ["ureq", "rustls", "http", "ignore", "mime_guess", "url"] {
        assert!(
            !core.contains(outside),
            "jpstore-engine depends on {outside}; what needs it belongs in jpstore-integrations"
        );
    }
    let integrations = dependency_closure("jpstore-integrations");
    assert!(
        integrations.contains("ureq") && integrations.contains("jpstore-engine"),
        "the closure finds what the integrations crate links: {integrations:?}"
    );
}

/// ARCHITECTURE.md stays a map: under 250 lines, and every path it names
/// in backticks (a folder or file of the repository) exists, so the map
/// cannot drift from the tree unnoticed.
#[test]
fn the_architecture_map_is_short_and_names_what_exists() {
    let root = workspace();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let lines = text.lines().count();
    assert!(lines < 250, "ARCHITECTURE.md has {lines} lines: a map is under 250; per-file detail goes in the modules' //! docs");
    let mut named = 0;
    for (n, piece) in text.split('`').enumerate() {
        // Odd pieces are inside backticks; a path has a slash and no space.
        // (A pattern such as `<command>.rs` names no one file.)
        if n % 2 == 0 || piece.contains([' ', '<', '*']) || !piece.contains('/') {
            continue;
        }
        let path = piece.trim_end_matches('/');
        let (first, _) = path.split_once('/').unwrap_or((path, ""));
        let top = [
            "blobstore",
            "engine",
            "remote",
            "integrations",
            "cli",
            "benches",
            "tests",
            "test-env",
            "jp-backend",
            "docs",
            ".ci",
        ];
        if !top.contains(&first) {
            continue;
        }
        named += 1;
        assert!(
            root.join(path).exists(),
            "ARCHITECTURE.md names `{piece}`, which does not exist"
        );
    }
    assert!(
        named > 20,
        "the paths ARCHITECTURE.md names were found: {named}"
    );
}

/// `jp-backend/` (a workspace of its own) builds this workspace's crates by
/// path with a lock file of its own, which CI builds `--locked`: every
/// normal and build dependency of those crates (as `cargo metadata` reads
/// their manifests) is locked there too, so a dependency added here without
/// updating `jp-backend/Cargo.lock` fails this test rather than CI's last
/// step. (Dev-dependencies of path crates are not in that lock, and need not
/// be.)
#[test]
fn jp_backend_locks_the_dependencies_of_this_workspaces_crates() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let there = lock_dependencies(&workspace().join("jp-backend").join("Cargo.lock"));
    let mut compared = 0;
    for package in meta["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().expect("a package's name");
        let Some(locked) = there.get(name) else {
            continue;
        };
        for dep in package["dependencies"].as_array().expect("dependencies") {
            if dep["kind"].as_str() == Some("dev") {
                continue;
            }
            let dep_name = dep["name"].as_str().expect("a dependency's name");
            assert!(
                locked.iter().any(|l| l == dep_name),
                "{name} depends on {dep_name}, which jp-backend/Cargo.lock does not lock for it: from jp-backend/, run `cargo metadata --format-version 1 --config ../../shared/jp/cargo-config.toml` (or plain `cargo metadata` where GitHub is reachable) and commit the lock"
            );
        }
        compared += 1;
    }
    assert!(
        compared >= 4,
        "the crates jp-backend builds were found in its lock: {compared}"
    );
}
