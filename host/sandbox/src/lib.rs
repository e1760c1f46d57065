//! boxcar-sandbox: runs handler components in wasmtime with hard limits.
