//! The library's integration tests, one binary: the S3 client (and its socket reads), routing, the cluster reader and the example configs.

mod common;

mod cluster_reader;
mod config_examples;
mod routing;
mod s3_client;
mod socket_reads;
