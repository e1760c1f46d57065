//! Sandbox integration tests.
