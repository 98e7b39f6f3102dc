//! The node's integration tests, one binary (one link, one run): real node processes or nodes in process, against the test origin, moto and real S3 clients.

mod common;

mod access;
mod aws_network;
mod boto3;
mod clients;
mod conformance;
mod crash;
mod cut_through;
mod disk_failures;
mod endpoint_slices;
mod fleet;
mod fleet_listings;
mod fuzz_corpora;
mod gateway;
mod handover;
mod hostile;
mod hostile_clients;
mod hot_object;
mod hot_set;
mod index_first;
mod metadata;
mod metrics_page;
mod node;
mod origin_budget;
mod process;
mod scopes;
mod security;
mod served_bytes;
