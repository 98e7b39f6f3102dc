//! Answer headers that describe one connection or one request, not the answer:
//! whatever passes an answer on (the origin's, to a client asking past the
//! cache; a runner-up's listing, into the metadata cache) never copies them.
//! The node owns the list because both its peer fills and the API above it
//! pass answers on.

/// Lower-case names of the headers no copy of an answer carries.
pub const OWN_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "transfer-encoding",
    "date",
    "server",
    "x-amz-request-id",
    "x-amz-id-2",
];
