//! Integration tests of the sandbox against the example guests: one binary,
//! one module per concern. Guests are compiled once per run and cached on
//! disk under the cargo target dir.

mod accounting;
mod boundary;
mod capabilities;
mod common;
mod egress;
mod hostile;
#[path = "../support/http_server.rs"]
mod http_server;
mod loading;
mod logs;
mod memory;
mod outcomes;
mod pool;
mod residency;
mod scratch;
mod timing;
