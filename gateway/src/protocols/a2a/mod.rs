//! The A2A protocol v1.0 on both sides: its wire types (`wire`), the server's
//! routes under `/v1/a2a` (`server`), and the client that runs remote delegates
//! (`client`, `endpoint.backend = "a2a"`). See `docs/a2a.md`.

mod client;
pub(crate) mod server;
pub(crate) mod wire;

pub use client::{A2A_BACKEND, A2aBackend};
