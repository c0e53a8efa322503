//! `McpHub`: this node's connected MCP servers and their tools, shared by the
//! start-up configuration and the config API.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use awaken_actors::tool::Tool;

use super::session::{McpError, McpSession};
use super::spec::McpServerSpec;
use super::tool::McpTool;

/// One connected server: the spec it was connected with and its tools.
#[derive(Clone)]
struct Connected {
    spec: McpServerSpec,
    tools: Vec<Arc<McpTool>>,
}

/// The MCP servers this node is connected to, by id. A server keeps its
/// connection (and, for stdio, its process) while its spec is unchanged.
#[derive(Default)]
pub struct McpHub {
    servers: Mutex<HashMap<String, Connected>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort_unstable();
        f.debug_struct("McpHub").field("servers", &ids).finish()
    }
}

impl McpHub {
    /// A hub with no server.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Connected>> {
        self.servers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The tools of `specs`' servers. Servers not yet connected with the same
    /// spec are connected (together) and their tools listed; the first that
    /// fails fails the whole call.
    pub async fn tools<'a>(
        &self,
        specs: impl IntoIterator<Item = &'a McpServerSpec>,
    ) -> Result<Vec<Arc<McpTool>>, McpError> {
        let mut tools = Vec::new();
        let mut missing = Vec::new();
        {
            let servers = self.lock();
            for spec in specs {
                match servers.get(&spec.id) {
                    Some(connected) if connected.spec == *spec => {
                        tools.extend(connected.tools.iter().cloned());
                    }
                    _ => missing.push(spec.clone()),
                }
            }
        }
        let opened = futures::future::join_all(missing.into_iter().map(connect)).await;
        let mut servers = self.lock();
        for connected in opened {
            let connected = connected?;
            tools.extend(connected.tools.iter().cloned());
            servers.insert(connected.spec.id.clone(), connected);
        }
        Ok(tools)
    }

    /// Forgets every server `keep` says no to. Its connection (and a stdio
    /// server's process) ends once no registry holds its tools any more.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|id, _| keep(id));
    }
}

async fn connect(spec: McpServerSpec) -> Result<Connected, McpError> {
    let server = spec.id.clone();
    let (session, listed) = McpSession::open(spec.clone()).await?;
    let session = Arc::new(session);
    let mut names: HashMap<String, String> = HashMap::new();
    let mut tools = Vec::with_capacity(listed.len());
    for info in listed {
        let tool = McpTool::new(info, Arc::clone(&session));
        let id = tool.descriptor().id;
        if let Some(first) = names.insert(id.clone(), tool.mcp_name().to_owned()) {
            return Err(McpError::NameClash {
                server,
                id,
                first,
                second: tool.mcp_name().to_owned(),
            });
        }
        tools.push(Arc::new(tool));
    }
    tracing::info!(server = %server, tools = tools.len(), "mcp server connected");
    Ok(Connected { spec, tools })
}
