//! Running against AWS itself: credentials from the SDK's chain with refresh, the
//! region chain, and AWS's endpoint names (regional, FIPS, dual-stack).

pub mod credentials;
pub mod endpoint;
pub mod env;
pub mod http;
pub mod region;
