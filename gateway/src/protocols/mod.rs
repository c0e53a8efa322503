//! The frontend protocols, each in one folder with everything it needs: the AI
//! SDK v6 UI stream (`ai_sdk`), AG-UI (`ag_ui`), A2A (`a2a`, server and client)
//! and MCP (`mcp`, server and client). Their handlers serve runs through the run
//! service ([`crate::runs::RunService`]) and their own state, never the whole
//! server's, so the server composes them without the two depending on each
//! other.

pub mod a2a;
pub(crate) mod ag_ui;
pub(crate) mod ai_sdk;
pub mod mcp;
