//! The mount's integration tests, one binary: real FUSE mounts of real node processes and the test origin, read with ordinary tools.

mod common;

mod analytics;
mod archived;
mod aws_credentials;
mod chaos;
mod cli;
mod control;
mod data_path;
mod disk_tier;
mod fuzz_journal;
mod handover;
mod hostile_node;
mod journal;
mod memory;
mod memory_limit;
mod metadata;
mod mount;
mod second_host;
mod served_bytes;
