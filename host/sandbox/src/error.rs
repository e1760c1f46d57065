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
    /// A handler's reservation does not fit in the instance pool.
    #[error("handler `{handler}` needs {asked} concurrent instances (its concurrency for each of its job types), but only {free} of the sandbox's pool_instances ({capacity}) are not reserved by other handlers; lower its concurrency or raise pool_instances")]
    PoolFull {
        /// The handler that asked.
        handler: String,
        /// Instances it asked for.
        asked: u32,
        /// Instances not reserved by other handlers.
        free: u32,
        /// The pool's size (`pool_instances`).
        capacity: u32,
    },
    /// The component needs more than one job's share of the instance pool.
    #[error("the component needs more than one job's share of the instance pool: {0}; raise the sandbox's job_instances / job_memories / job_tables, or build a smaller component")]
    PoolShare(String),
    /// The compile cache directory could not be used.
    #[error("compile cache at {path}: {message}")]
    Cache {
        /// The file or directory concerned.
        path: std::path::PathBuf,
        /// What failed.
        message: String,
    },
}
