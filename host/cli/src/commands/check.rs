//! `boxcar check`: validate without deploying. With a module: the manifest,
//! the pin, the world and compilation, then a summary of what the module
//! would get. Without one: the configuration alone (already validated when
//! it was loaded).

use std::sync::Arc;

use boxcar_sandbox::Sandbox;
use serde_json::json;

use super::context::Context;
use crate::error::usage;
use crate::{cli::CheckArgs, deploy, sandbox_glue};

pub async fn run(context: Context, args: CheckArgs) -> anyhow::Result<()> {
    let Some(module) = args.module else {
        if context.json {
            println!("{}", json!({"config": "ok"}));
        } else {
            println!("configuration is valid");
        }
        return Ok(());
    };
    let manifest = args
        .manifest
        .unwrap_or_else(|| module.with_extension("toml"));
    if !manifest.is_file() {
        return Err(usage(format!(
            "no manifest at {}: write NAME.toml beside NAME.wasm or pass --manifest",
            manifest.display()
        )));
    }
    let sandbox = Arc::new(Sandbox::new(sandbox_glue::sandbox_config(
        &context.config.sandbox,
    ))?);
    let budget = deploy::compile::CompileBudget::from_settings(&context.config.sandbox);
    let prepared = deploy::prepare(&sandbox, &budget, &module, &manifest).await?;
    let m = &prepared.manifest;
    if context.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "module": module.display().to_string(),
                "digest": prepared.digest,
                "job_types": m.job_types,
                "concurrency": m.settings.concurrency,
                "timeout_ms": m.settings.timeout.as_millis() as u64,
                "max_attempts": m.settings.max_attempts,
                "limits": {
                    "memory": m.limits.memory,
                    "fuel": m.limits.fuel,
                    "max_result": m.limits.max_result,
                    "max_log": m.limits.max_log,
                    "max_progress": m.limits.max_progress,
                    "max_enqueues": m.limits.max_enqueues,
                    "max_http_body": m.limits.max_http_body,
                },
                "capabilities": {
                    "may_enqueue": m.settings.may_enqueue,
                    "http": m.capabilities.http.iter().map(ToString::to_string).collect::<Vec<_>>(),
                    "dirs": m.capabilities.dirs.iter().map(|d| json!({
                        "host": d.host.display().to_string(),
                        "guest": d.guest,
                        "mode": d.mode.as_str(),
                    })).collect::<Vec<_>>(),
                    "scratch": m.capabilities.scratch,
                    "env": m.capabilities.env.keys().collect::<Vec<_>>(),
                },
            }))?
        );
        return Ok(());
    }
    println!("{} is valid", module.display());
    println!("  digest        {}", prepared.digest);
    println!("  job types     {}", m.job_types.join(", "));
    println!("  concurrency   {}", m.settings.concurrency);
    println!("  timeout       {:?}", m.settings.timeout);
    println!(
        "  limits        memory {}, result {}, log {}, progress {}, enqueues {}, fuel {}",
        crate::units::ByteSize(m.limits.memory),
        crate::units::ByteSize(m.limits.max_result as u64),
        crate::units::ByteSize(m.limits.max_log as u64),
        crate::units::ByteSize(m.limits.max_progress as u64),
        m.limits.max_enqueues,
        m.limits.fuel.map_or("off".to_string(), |f| f.to_string()),
    );
    println!("  capabilities");
    let caps = &m.capabilities;
    if m.settings.may_enqueue.is_empty()
        && caps.http.is_empty()
        && caps.dirs.is_empty()
        && caps.scratch.is_none()
        && caps.env.is_empty()
    {
        println!("    none: computation, logging, progress and clocks only");
    }
    if !m.settings.may_enqueue.is_empty() {
        println!("    may enqueue: {}", m.settings.may_enqueue.join(", "));
    }
    if !caps.http.is_empty() {
        let origins: Vec<String> = caps.http.iter().map(ToString::to_string).collect();
        println!(
            "    http:        {} (responses up to {})",
            origins.join(", "),
            crate::units::ByteSize(m.limits.max_http_body)
        );
    }
    for dir in &caps.dirs {
        println!(
            "    dir:         {} -> {} ({})",
            dir.host.display(),
            dir.guest,
            dir.mode.as_str()
        );
    }
    if let Some(cap) = caps.scratch {
        println!(
            "    scratch:     {} at {} (fresh per job)",
            crate::units::ByteSize(cap),
            boxcar_sandbox::SCRATCH_GUEST_PATH
        );
    }
    if !caps.env.is_empty() {
        let names: Vec<&str> = caps.env.keys().map(String::as_str).collect();
        println!("    env:         {} (values not shown)", names.join(", "));
    }
    Ok(())
}
