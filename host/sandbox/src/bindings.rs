//! Host-side bindings generated from `wit/handler.wit`.
//!
//! Every import is async (so host services can await) and trappable (so a
//! bound exceeded inside an import can stop the guest).
#![allow(missing_docs, clippy::all)]

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "handler",
    imports: { default: async | trappable },
    exports: { default: async },
});
