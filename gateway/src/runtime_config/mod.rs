//! Runtime configuration: the config namespaces (`agents`, `models`, `providers`,
//! `mcp-servers`) that `awaken.toml` and the config API fill, and how a change
//! reaches every node.
//!
//! ```text
//! awaken.toml ──▶ built-in entries ─┐
//!                                   ├─▶ RegistrySet ──▶ AgentRuntime (swapped whole)
//! config API ──▶ ConfigDocument ────┘        ▲
//!                    │ compare-and-set        │ watch (every node)
//!                    ▼                        │
//!               ConfigStore (memory / file / NATS KV)
//! ```

mod document;
mod entries;
mod manager;
mod namespace;
mod policy;

pub use document::{ConfigDocument, DocumentError};
pub use entries::{McpServerSpec, McpTransport, ProviderConfig, ProviderError, SCRIPTED_ADAPTER};
pub use manager::{ConfigApiError, ConfigManager, Listing};
pub use namespace::{Entry, EntryError, MAX_ID_LEN, Namespace};
pub use policy::EntryPolicy;
