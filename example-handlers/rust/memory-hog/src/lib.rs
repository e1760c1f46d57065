//! Hostile: allocates 1 MiB blocks (touching every page) until the memory
//! cap stops it, or until `max_mib` (payload, optional) is reached.

use boxcar_guest::{Error, Job};
use serde::Deserialize;

#[derive(Deserialize)]
struct Params {
    #[serde(default)]
    max_mib: Option<usize>,
}

fn memory_hog(job: Job<Params>) -> Result<usize, Error> {
    let limit = job.payload.max_mib.unwrap_or(usize::MAX);
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    while blocks.len() < limit {
        let mut block = vec![0u8; 1 << 20];
        for i in (0..block.len()).step_by(4096) {
            block[i] = 1;
        }
        blocks.push(std::hint::black_box(block));
    }
    Ok(blocks.len())
}

boxcar_guest::handler!(memory_hog);
