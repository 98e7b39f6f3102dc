//! The library's integration tests, one binary: the S3 client (and its socket reads), routing, the cluster reader, the example configs and the book's configuration reference.

mod common;

mod cluster_reader;
mod config_examples;
mod config_reference;
mod routing;
mod s3_client;
mod socket_reads;
