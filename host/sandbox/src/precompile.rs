//! Compiling outside the serving engine: the settings that decide compiled
//! code ([`CodegenSettings`]), and [`precompile`], which a separate,
//! resource-limited process runs to turn component bytes into an artifact
//! that [`Sandbox::load_compiled_by`](crate::Sandbox::load_compiled_by)
//! then loads.
//!
//! Invariant: the serving engine and a precompiling engine are built from
//! the same [`engine_config`], so an artifact made with a sandbox's
//! [`SandboxConfig::codegen`] settings has that engine's compatibility
//! hash (wasmtime refuses to load anything else). The pooling allocator
//! does not change compiled code, so a precompiling engine leaves it out
//! and reserves no pool.

use std::fmt;

use crate::{SandboxConfig, SandboxError};

/// The engine settings that change compiled code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodegenSettings {
    /// Epoch interruption checks compiled in.
    pub epoch_interruption: bool,
    /// Fuel metering compiled in.
    pub fuel: bool,
    /// Wasm stack cap, in bytes.
    pub max_wasm_stack: usize,
}

impl SandboxConfig {
    /// The settings a separate compile process needs to produce code this
    /// configuration's engine can load.
    pub fn codegen(&self) -> CodegenSettings {
        CodegenSettings {
            epoch_interruption: self.epoch_interruption,
            fuel: self.fuel,
            max_wasm_stack: self.max_wasm_stack,
        }
    }
}

impl fmt::Display for CodegenSettings {
    /// `epoch=1,fuel=0,stack=524288`: the form [`CodegenSettings::parse`] reads.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch={},fuel={},stack={}",
            u8::from(self.epoch_interruption),
            u8::from(self.fuel),
            self.max_wasm_stack
        )
    }
}

impl CodegenSettings {
    /// Reads the [`Display`](fmt::Display) form back.
    ///
    /// # Errors
    /// [`SandboxError::Config`] naming the part that is wrong.
    pub fn parse(text: &str) -> Result<Self, SandboxError> {
        let bad = || {
            SandboxError::Config(format!(
                "codegen settings `{}` are not `epoch=0|1,fuel=0|1,stack=BYTES`",
                text.escape_debug()
            ))
        };
        let mut epoch = None;
        let mut fuel = None;
        let mut stack = None;
        for part in text.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let flag = || match value {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(bad()),
            };
            match key {
                "epoch" => epoch = Some(flag()?),
                "fuel" => fuel = Some(flag()?),
                "stack" => stack = Some(value.parse::<usize>().map_err(|_| bad())?),
                _ => return Err(bad()),
            }
        }
        Ok(Self {
            epoch_interruption: epoch.ok_or_else(bad)?,
            fuel: fuel.ok_or_else(bad)?,
            max_wasm_stack: stack.ok_or_else(bad)?,
        })
    }
}

/// The wasmtime configuration every engine of boxcar starts from.
///
/// Component-model concurrency (the async ABI, `run_concurrent`) is off:
/// handlers are synchronous WIT exports called with `call_async`, and with
/// it on every store's drop disposes the concurrency worker fiber by
/// resuming it with a "future dropped" error, which captures a backtrace
/// whenever `RUST_BACKTRACE` is set: a cost on every job's success path.
pub(crate) fn engine_config(settings: &CodegenSettings) -> wasmtime::Config {
    let mut wc = wasmtime::Config::new();
    wc.wasm_component_model(true)
        .concurrency_support(false)
        .epoch_interruption(settings.epoch_interruption)
        .consume_fuel(settings.fuel)
        .max_wasm_stack(settings.max_wasm_stack)
        .async_stack_size(settings.max_wasm_stack.max(1 << 20) + (1 << 20));
    wc
}

/// Compiles component bytes into an artifact for
/// [`Sandbox::load_compiled_by`](crate::Sandbox::load_compiled_by) of a
/// sandbox whose [`SandboxConfig::codegen`] is `settings`. CPU- and
/// memory-heavy: meant for a separate process with resource limits.
///
/// # Errors
/// [`SandboxError::Engine`] when wasmtime refuses the settings,
/// [`SandboxError::Compile`] when the bytes are not a valid component.
pub fn precompile(settings: &CodegenSettings, wasm: &[u8]) -> Result<Vec<u8>, SandboxError> {
    let engine = wasmtime::Engine::new(&engine_config(settings))
        .map_err(|e| SandboxError::Engine(format!("{e:#}")))?;
    engine
        .precompile_component(wasm)
        .map_err(|e| SandboxError::Compile(format!("{e:#}")))
}

#[cfg(test)]
mod tests {
    use super::{engine_config, CodegenSettings};
    use crate::SandboxConfig;

    #[tokio::test]
    async fn engines_run_without_component_model_concurrency() {
        let settings = SandboxConfig::default().codegen();
        let engine = wasmtime::Engine::new(&engine_config(&settings)).expect("engine");
        let mut store = wasmtime::Store::new(&engine, ());
        let refused = store.run_concurrent(async |_| ()).await;
        assert!(refused.is_err(), "concurrency support must be off");
    }

    #[test]
    fn settings_round_trip_and_bad_forms_are_refused() {
        let s = SandboxConfig {
            fuel: true,
            ..SandboxConfig::default()
        }
        .codegen();
        assert_eq!(s.to_string(), "epoch=1,fuel=1,stack=524288");
        assert_eq!(CodegenSettings::parse(&s.to_string()).expect("parses"), s);
        for bad in [
            "",
            "epoch=1",
            "epoch=2,fuel=0,stack=1",
            "epoch=1,fuel=0,stack=x,y=1",
        ] {
            assert!(CodegenSettings::parse(bad).is_err(), "{bad}");
        }
    }
}
