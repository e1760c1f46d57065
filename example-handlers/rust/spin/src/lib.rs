//! Hostile: spins forever without calling the host. Only epoch
//! interruption stops it.

fn spin(_job: boxcar_guest::Job<serde_json::Value>) -> Result<(), boxcar_guest::Error> {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

boxcar_guest::handler!(spin);
