//! A kernel request: any bytes as one read of `/dev/fuse`, parsed as the
//! session's readers parse it. Kept out of `lib.rs` so that only the fuzz target
//! and `fusewire`'s own corpus replay (`fusewire/tests/fuzz_corpus.rs`) build it.

use fusewire::abi::{self, op};
use fusewire::request::{parse, Op};

pub fn fuse_request(data: &[u8]) {
    let Ok((h, o)) = parse(data) else {
        return;
    };
    // What parses was read whole, header first.
    assert_eq!(h.len as usize, data.len());
    assert!(data.len() >= abi::IN_HEADER);
    let body = data.len() - abi::IN_HEADER;
    let wants_reply = o.wants_reply();
    match o {
        Op::Lookup { name } => {
            assert!(!name.contains(&0));
            assert!(name.len() < body);
        }
        Op::BatchForget { items } => {
            assert!(!wants_reply);
            assert_eq!(h.opcode, op::BATCH_FORGET);
            assert!(8 + items.len() * 16 <= body);
        }
        Op::Read { .. } => assert!(h.opcode == op::READ && body >= 20),
        Op::Readdir { plus, .. } => {
            assert_eq!(h.opcode, if plus { op::READDIRPLUS } else { op::READDIR });
            assert!(body >= 20);
        }
        Op::Write => assert!(op::WRITES.contains(&h.opcode)),
        Op::Init { .. } => assert!(h.opcode == op::INIT && body >= 16),
        Op::Forget { .. } | Op::Interrupt => assert!(!wants_reply),
        _ => assert!(wants_reply),
    }
}
