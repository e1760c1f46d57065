//! End-to-end tests: run the real `boxcar` binary in a fresh temporary
//! directory with a cleared environment, and print everything it said when
//! a test fails.

mod harness;
mod webdriver;

mod api;
mod boundary;
mod chaos;
mod cli;
mod compile;
mod containment;
mod dashboard;
mod db_faults;
mod deploy;
mod fleet;
mod history;
mod hostile;
mod job_defaults;
mod metrics;
mod netns;
mod openapi;
mod partition;
mod polyglot;
mod pools;
mod private_postgres;
mod relocatable;
mod replay;
mod results;
mod schedules;
mod soak;
mod sqlite_faults;
mod telemetry;
mod wait;
