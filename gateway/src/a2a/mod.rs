//! The A2A protocol v1.0 on both sides: its wire types, and the client that runs
//! remote delegates (`endpoint.backend = "a2a"`). The server's routes are in
//! `server::routes::a2a`.

mod client;
pub(crate) mod wire;

pub use client::{A2A_BACKEND, A2aBackend};
