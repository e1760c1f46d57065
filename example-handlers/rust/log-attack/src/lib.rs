//! Hostile: log attacks selected by the payload, each cheap in text bytes.
//!
//! - `{"attack": "empty-logs", "count": N}`: N `log("")` calls.
//! - `{"attack": "stdout-newlines", "count": N}`: N bare `\n` on stdout,
//!   written in chunks of up to 4 KiB.
//! - `{"attack": "crlf", "text": "ok\r\nFORGED line"}`: one log call with
//!   the text as it is (CR/LF inside a message).
//!
//! Returns the number of lines it managed to write.

use std::io::Write;

use boxcar_guest::{terminal, Error, Job, Level};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    attack: String,
    #[serde(default)]
    count: u64,
    #[serde(default)]
    text: String,
}

fn log_attack(job: Job<Params>) -> Result<u64, Error> {
    let p = job.payload;
    match p.attack.as_str() {
        "empty-logs" => {
            for _ in 0..p.count {
                boxcar_guest::log(Level::Info, "");
            }
            Ok(p.count)
        }
        "stdout-newlines" => {
            let chunk = [b'\n'; 4096];
            let mut out = std::io::stdout().lock();
            let mut left = p.count;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                out.write_all(&chunk[..n])
                    .map_err(|e| terminal(format!("stdout refused: {e}")))?;
                left -= n as u64;
            }
            out.flush()
                .map_err(|e| terminal(format!("stdout refused: {e}")))?;
            Ok(p.count)
        }
        "crlf" => {
            boxcar_guest::log(Level::Info, &p.text);
            Ok(1)
        }
        other => Err(terminal(format!("unknown attack `{other}`")).into()),
    }
}

boxcar_guest::handler!(log_attack);
