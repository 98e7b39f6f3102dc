//! The kinds of write a gateway passes on to the origin: named here, below
//! the HTTP API that tells them apart, so that the metrics that count them by
//! kind need nothing of that API.

/// What a passed-on write is, for its metric and what follows it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Kind {
    Put,
    Part,
    Copy,
    PartCopy,
    Create,
    Complete,
    Abort,
    Delete,
    DeleteMany,
    Bucket,
    ObjectSubresource,
}

impl Kind {
    /// Each, for their series at 0 from the start.
    pub const ALL: [Kind; 11] = [
        Kind::Put,
        Kind::Part,
        Kind::Copy,
        Kind::PartCopy,
        Kind::Create,
        Kind::Complete,
        Kind::Abort,
        Kind::Delete,
        Kind::DeleteMany,
        Kind::Bucket,
        Kind::ObjectSubresource,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Part => "multipart_part",
            Kind::Copy => "copy",
            Kind::PartCopy => "part_copy",
            Kind::Create => "multipart_create",
            Kind::Complete => "multipart_complete",
            Kind::Abort => "multipart_abort",
            Kind::Delete => "delete",
            Kind::DeleteMany => "delete_many",
            Kind::Bucket => "bucket",
            Kind::ObjectSubresource => "object_subresource",
        }
    }
}
