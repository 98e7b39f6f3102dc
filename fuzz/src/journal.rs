//! A mount's journal: any bytes, as a keeper hands them to a successor. A replay
//! never panics; one that succeeds yields a state that is its own (written out
//! again it replays to itself), and a takeover of the same bytes in a memory
//! file yields that state and leaves a file that replays to it.

use std::os::unix::fs::FileExt;

use shoal_mount::journal::{replay, Journal};

pub fn journal(data: &[u8]) {
    let Ok(r) = replay(data) else {
        return;
    };
    assert!(r.start <= r.end && r.end + r.torn <= data.len(), "{r:?}");
    let written = Journal::compacted(&r.state).expect("a memory file");
    let again = replay(&written.bytes().expect("read back")).expect("a state written out");
    assert_eq!(again.state, r.state, "written out, it replays to itself");

    let file = std::fs::File::from(Journal::create().expect("a memory file").into_fd());
    file.set_len(0).expect("emptied");
    file.write_all_at(data, 0).expect("written");
    let (j, state) = Journal::open(file.try_clone().expect("a copy").into())
        .expect("what replays is taken over");
    assert_eq!(state, r.state);
    let now = j.bytes().expect("read back");
    let len = file.metadata().expect("its size").len();
    assert_eq!(len, now.len() as u64, "nothing past its last record");
    let after = replay(&now).expect("a journal taken over replays");
    assert_eq!(
        after.state, state,
        "taken over in place, it is the same state"
    );
    assert_eq!(after.torn, 0, "its torn tail is cut off");
}
