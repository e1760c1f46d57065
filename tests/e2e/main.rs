//! End-to-end tests: run the real `boxcar` binary.
