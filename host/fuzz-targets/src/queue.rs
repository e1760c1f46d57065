//! One queue over the in-memory store, shared by the targets that run the
//! enqueue checks (`Queue::prepare` never touches the store).

use std::sync::OnceLock;

use boxcar_queue::{connect, Queue, QueueOptions};

/// The shared queue (built on first use).
pub(crate) fn shared() -> &'static Queue {
    static QUEUE: OnceLock<Queue> = OnceLock::new();
    QUEUE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("a runtime for the memory store: {e}"));
        let store = runtime
            .block_on(connect("memory://"))
            .unwrap_or_else(|e| panic!("the memory store: {e}"));
        Queue::new(store, QueueOptions::default())
            .unwrap_or_else(|e| panic!("the default options are valid: {e}"))
    })
}
