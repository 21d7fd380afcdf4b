//! How `[[backend]]` and `[[pool]]` entries refer to each other: names, references,
//! cycles, and the rule that every backend has exactly one user.

use std::collections::HashMap;

use super::schema::{check_name, StorageKind};
use super::{invalid, Config, ConfigError};

/// One storage entry: an index into `Config::backends` or `Config::pools`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    Backend(usize),
    Pool(usize),
}

/// Who uses a node, for messages (`backend "stripe" (raid0) as a member`).
#[derive(Clone, Debug)]
pub struct Use {
    pub user: String,
    pub role: &'static str,
    /// The entry that uses it; `None` for a namespace or a subsystem.
    pub owner: Option<Node>,
}

impl std::fmt::Display for Use {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let article = if self.role == "member" { "a" } else { "its" };
        write!(f, "{} as {article} {}", self.user, self.role)
    }
}

/// The storage entries with their references resolved.
pub struct Graph {
    names: HashMap<String, Node>,
    /// What each node is built from, in the entry's order, with the role of each part.
    pub parts: HashMap<Node, Vec<(&'static str, Node)>>,
    /// Who uses each node.
    pub uses: HashMap<Node, Vec<Use>>,
}

impl Graph {
    /// Checks names and per-entry keys, and resolves every reference between entries.
    pub fn new(config: &Config) -> Result<Graph, ConfigError> {
        let mut names: HashMap<String, Node> = HashMap::new();
        let mut locations: HashMap<Node, String> = HashMap::new();
        let entries = config
            .backends
            .iter()
            .enumerate()
            .map(|(index, backend)| (Node::Backend(index), &backend.name, format!("backend[{index}]")))
            .chain(
                config
                    .pools
                    .iter()
                    .enumerate()
                    .map(|(index, pool)| (Node::Pool(index), &pool.name, format!("pool[{index}]"))),
            );
        for (node, name, location) in entries {
            check_name(name, &location)?;
            if let Some(&other) = names.get(name.as_str()) {
                return Err(invalid(
                    location,
                    format!("name {name:?} is already used by {}; names must be unique across [[backend]] and [[pool]] entries", locations[&other]),
                ));
            }
            names.insert(name.clone(), node);
            locations.insert(node, location);
        }
        let mut graph = Graph { names, parts: HashMap::new(), uses: HashMap::new() };
        for (index, backend) in config.backends.iter().enumerate() {
            backend.check_keys()?;
            let node = Node::Backend(index);
            let mut parts = Vec::new();
            for (role, name) in backend.references() {
                let wants_pool = backend.kind == StorageKind::Carve;
                let part = graph.resolve(config, name, wants_pool, &backend.location(), role)?;
                parts.push((role, part));
                graph.add_use(part, backend.location(), role, Some(node));
            }
            graph.parts.insert(node, parts);
        }
        for (index, pool) in config.pools.iter().enumerate() {
            let device = graph.resolve(config, &pool.device, false, &pool.location(), "device")?;
            graph.parts.insert(Node::Pool(index), vec![("device", device)]);
            graph.add_use(device, pool.location(), "device", Some(Node::Pool(index)));
        }
        Ok(graph)
    }

    /// The node a reference names; `wants_pool` says whether a `[[pool]]` or a
    /// `[[backend]]` is expected there.
    pub fn resolve(
        &self,
        config: &Config,
        name: &str,
        wants_pool: bool,
        location: &str,
        role: &str,
    ) -> Result<Node, ConfigError> {
        match (self.names.get(name), wants_pool) {
            (Some(&node @ Node::Backend(_)), false) | (Some(&node @ Node::Pool(_)), true) => Ok(node),
            (Some(Node::Pool(_)), false) => Err(invalid(
                location,
                format!(
                    "{role} {name:?} is a [[pool]], not a [[backend]]; to use space of the pool here, declare a \
                     [[backend]] with kind = \"carve\" and pool = {name:?}, and name that backend instead"
                ),
            )),
            (Some(Node::Backend(_)), true) => Err(invalid(
                location,
                format!("{role} {name:?} is a [[backend]], not a [[pool]]; declare a [[pool]] with device = {name:?} and name the pool"),
            )),
            (None, _) => {
                let known: Vec<&str> = if wants_pool {
                    config.pools.iter().map(|pool| pool.name.as_str()).collect()
                } else {
                    config.backends.iter().map(|backend| backend.name.as_str()).collect()
                };
                let section = if wants_pool { "[[pool]]" } else { "[[backend]]" };
                let known = if known.is_empty() { "there are none".to_string() } else { format!("known: {}", known.join(", ")) };
                Err(invalid(location, format!("{role} {name:?} is not the name of any {section} entry ({known})")))
            }
        }
    }

    /// Who uses the entry named `name` (none when the name is unknown).
    pub fn uses_of(&self, name: &str) -> &[Use] {
        self.names.get(name).and_then(|node| self.uses.get(node)).map(Vec::as_slice).unwrap_or_default()
    }

    pub fn add_use(&mut self, node: Node, user: String, role: &'static str, owner: Option<Node>) {
        self.uses.entry(node).or_default().push(Use { user, role, owner });
    }

    /// The entry's name, as cycles and parts are reported.
    pub fn name(config: &Config, node: Node) -> &str {
        match node {
            Node::Backend(index) => &config.backends[index].name,
            Node::Pool(index) => &config.pools[index].name,
        }
    }

    pub fn location(config: &Config, node: Node) -> String {
        match node {
            Node::Backend(index) => config.backends[index].location(),
            Node::Pool(index) => config.pools[index].location(),
        }
    }

    /// Refuses cycles (reported as the chain, e.g. `a -> b -> a`) and returns every node
    /// with its parts before it: the order to build in.
    pub fn build_order(&self, config: &Config) -> Result<Vec<Node>, ConfigError> {
        #[derive(Clone, Copy, PartialEq)]
        enum Visit {
            New,
            InProgress,
            Done,
        }
        let nodes: Vec<Node> =
            (0..config.backends.len()).map(Node::Backend).chain((0..config.pools.len()).map(Node::Pool)).collect();
        let mut state: HashMap<Node, Visit> = nodes.iter().map(|&node| (node, Visit::New)).collect();
        let mut order = Vec::with_capacity(nodes.len());
        // Iterative depth-first search, so a long chain in a hostile file cannot overflow
        // the stack. `path` holds the nodes in progress and the next part to visit.
        for &root in &nodes {
            if state[&root] != Visit::New {
                continue;
            }
            let mut path: Vec<(Node, usize)> = vec![(root, 0)];
            state.insert(root, Visit::InProgress);
            while let Some((node, next_part)) = path.last().copied() {
                let parts = self.parts.get(&node).map(Vec::as_slice).unwrap_or_default();
                let Some(&(_, part)) = parts.get(next_part) else {
                    state.insert(node, Visit::Done);
                    order.push(node);
                    path.pop();
                    continue;
                };
                if let Some(last) = path.last_mut() {
                    last.1 += 1;
                }
                match state[&part] {
                    Visit::Done => {}
                    Visit::New => {
                        state.insert(part, Visit::InProgress);
                        path.push((part, 0));
                    }
                    Visit::InProgress => {
                        let start = path.iter().position(|&(on_path, _)| on_path == part).unwrap_or(0);
                        let mut chain: Vec<&str> =
                            path[start..].iter().map(|&(on_path, _)| Self::name(config, on_path)).collect();
                        chain.push(Self::name(config, part));
                        return Err(invalid(
                            Self::location(config, part),
                            format!(
                                "cycle {}: an entry cannot be built on top of itself; break the chain",
                                chain.join(" -> ")
                            ),
                        ));
                    }
                }
            }
        }
        Ok(order)
    }

    /// Every backend may have one user; a pool may serve many. Returns the nodes nothing
    /// uses (they are reported as warnings and not built).
    pub fn check_single_use(&self, config: &Config) -> Result<Vec<Node>, ConfigError> {
        let mut unused = Vec::new();
        for index in 0..config.backends.len() {
            let node = Node::Backend(index);
            match self.uses.get(&node).map(Vec::as_slice).unwrap_or_default() {
                [] => unused.push(node),
                [_] => {}
                [first, second, ..] => {
                    return Err(invalid(
                        config.backends[index].location(),
                        format!(
                            "used by {first} and by {second}; a backend serves exactly one user (a namespace, a raid0 \
                             set, a cache or a pool), so declare a separate backend for each"
                        ),
                    ))
                }
            }
        }
        for index in 0..config.pools.len() {
            if self.uses.get(&Node::Pool(index)).is_none_or(Vec::is_empty) {
                unused.push(Node::Pool(index));
            }
        }
        Ok(unused)
    }

    /// The nodes to build, in build order: those a namespace or subsystem uses, directly
    /// or through other needed nodes. Unused entries (reported as warnings) and whatever
    /// only they use are left out.
    pub fn needed(&self, order: &[Node]) -> Vec<Node> {
        let mut needed: HashMap<Node, bool> = HashMap::new();
        // Users come after their parts in `order`, so walking it backwards decides every
        // user before the parts it uses.
        for &node in order.iter().rev() {
            let is_needed = self.uses.get(&node).is_some_and(|uses| {
                uses.iter().any(|using| match using.owner {
                    Some(owner) => needed.get(&owner).copied().unwrap_or(false),
                    None => true,
                })
            });
            needed.insert(node, is_needed);
        }
        order.iter().copied().filter(|node| needed.get(node).copied().unwrap_or(false)).collect()
    }
}
