//! The native Run API: threads, runs, decisions and cancellation (`threads`,
//! `runs`), the approvals inbox (`approvals`), the config namespaces (`config`), health and metrics (`health`),
//! and the OpenAPI document of every route (`openapi`). See `docs/http.md`.

pub(crate) mod approvals;
pub(crate) mod config;
pub(crate) mod health;
pub(crate) mod openapi;
pub(crate) mod runs;
pub(crate) mod threads;
