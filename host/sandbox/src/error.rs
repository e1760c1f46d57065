//! Errors of building the sandbox and loading handlers. Running a job never
//! returns an error: every ending is an [`Outcome`](boxcar_queue::Outcome).

/// Why the sandbox could not be built or a handler not loaded.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A [`SandboxConfig`](crate::SandboxConfig) field is out of range.
    #[error("invalid sandbox configuration: {0}")]
    Config(String),
    /// A [`HandlerLimits`](crate::HandlerLimits) field is out of range.
    #[error("invalid handler limits: {0}")]
    Limits(String),
    /// A [`Capabilities`](crate::Capabilities) grant is unusable.
    #[error("invalid capabilities: {0}")]
    Capabilities(String),
    /// wasmtime refused the engine configuration.
    #[error("cannot create the wasmtime engine: {0}")]
    Engine(String),
    /// The bytes are not a valid WebAssembly component.
    #[error("not a valid WebAssembly component (build it for wasm32-wasip2, or with a component toolchain): {0}")]
    Compile(String),
    /// A separate compile of the module was stopped (memory or time budget
    /// exceeded, or the compile process failed); the message says which
    /// and what to change.
    #[error("{0}")]
    CompileAborted(String),
    /// The component does not implement the `boxcar:handler/handler` world.
    #[error("the component does not implement the boxcar:handler@0.1.0 `handler` world: {0}")]
    World(String),
    /// The compile cache directory could not be used.
    #[error("compile cache at {path}: {message}")]
    Cache {
        /// The file or directory concerned.
        path: std::path::PathBuf,
        /// What failed.
        message: String,
    },
}
