//! The handover's messages, one per packet, as words separated by single
//! spaces: what each end may say, read strictly (a refusal's reason aside: it is
//! taken as any version wrote it, made one line). The other end is a process of
//! this node's user (or root), possibly another version, possibly not a node at
//! all: anything else it sends is a protocol error that ends the handover, with
//! the old node serving on.

use std::fmt;

/// The longest version string taken (a semver with a build tag is far less).
const VERSION_LIMIT: usize = 64;
/// The longest reason a successor gives for refusing (it is logged), in
/// characters: the message fits the packet the other end reads (4 KiB).
const REASON_LIMIT: usize = 512;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// The successor: its pid, version and disk tier format.
    Hello {
        pid: u32,
        version: String,
        format: u32,
    },
    /// The old node: its pid, version and disk tier format, and whether the
    /// control socket comes with the listening socket.
    Offer {
        pid: u32,
        version: String,
        format: u32,
        control: bool,
    },
    /// The successor takes over.
    Take,
    /// The successor will not (why, for the old node's log).
    Refuse(String),
    /// The old node has let go of the disk tier.
    Released,
    /// The successor serves.
    Serving,
}

/// What was received, when it is not a message of the handover.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("not a handover message: {0:?}")]
pub struct Malformed(pub String);

impl Message {
    pub fn parse(text: &str) -> Result<Message, Malformed> {
        let bad = || Malformed(text.chars().take(200).collect());
        // A reason is taken as any version wrote it (an error of several
        // lines, say), made one line of at most REASON_LIMIT characters.
        if let Some(why) = text.strip_prefix("refuse ") {
            return Ok(Message::Refuse(one_line(why)));
        }
        let words: Vec<&str> = text.split(' ').collect();
        let pid = |w: &str| w.parse::<u32>().ok().filter(|p| *p > 0).ok_or_else(bad);
        let version = |w: &str| {
            let fine = !w.is_empty()
                && w.len() <= VERSION_LIMIT
                && w.bytes().all(|b| b.is_ascii_graphic());
            fine.then(|| w.to_owned()).ok_or_else(bad)
        };
        let format = |w: &str| w.parse::<u32>().map_err(|_| bad());
        match words[..] {
            ["hello", p, v, f] => Ok(Message::Hello {
                pid: pid(p)?,
                version: version(v)?,
                format: format(f)?,
            }),
            ["offer", p, v, f, c] => Ok(Message::Offer {
                pid: pid(p)?,
                version: version(v)?,
                format: format(f)?,
                control: match c {
                    "0" => false,
                    "1" => true,
                    _ => return Err(bad()),
                },
            }),
            ["take"] => Ok(Message::Take),
            ["released"] => Ok(Message::Released),
            ["serving"] => Ok(Message::Serving),
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Hello {
                pid,
                version,
                format,
            } => write!(f, "hello {pid} {version} {format}"),
            Message::Offer {
                pid,
                version,
                format,
                control,
            } => write!(f, "offer {pid} {version} {format} {}", *control as u8),
            Message::Take => f.write_str("take"),
            Message::Refuse(why) => write!(f, "refuse {}", one_line(why)),
            Message::Released => f.write_str("released"),
            Message::Serving => f.write_str("serving"),
        }
    }
}

/// `why` as one line (control characters as spaces) of at most
/// `REASON_LIMIT` characters; "no reason" for none.
fn one_line(why: &str) -> String {
    let one: String = why
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(REASON_LIMIT)
        .collect();
    if one.trim().is_empty() {
        "no reason".into()
    } else {
        one
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_written() {
        for m in [
            Message::Hello {
                pid: 12,
                version: "0.1.0".into(),
                format: 3,
            },
            Message::Offer {
                pid: 7,
                version: "1.2.3-rc.1+g00ab".into(),
                format: 3,
                control: true,
            },
            Message::Offer {
                pid: 7,
                version: "1".into(),
                format: 0,
                control: false,
            },
            Message::Take,
            Message::Refuse("disk tier format 99 cannot be read".into()),
            Message::Released,
            Message::Serving,
        ] {
            assert_eq!(Message::parse(&m.to_string()), Ok(m));
        }
    }

    #[test]
    fn a_reason_of_several_lines_is_sent_as_one() {
        let m = Message::Refuse("bad config:\n  line 3\tthere".into());
        assert_eq!(m.to_string(), "refuse bad config:   line 3 there");
        assert_eq!(
            Message::parse(&m.to_string()),
            Ok(Message::Refuse("bad config:   line 3 there".into()))
        );
        assert!(Message::parse(&m.to_string()).is_ok());
        let empty = Message::Refuse("\n".into()).to_string();
        assert_eq!(empty, "refuse no reason");
        // As an older node may send it: taken, as one line.
        assert_eq!(
            Message::parse("refuse a\nb"),
            Ok(Message::Refuse("a b".into()))
        );
        let long = format!("refuse {}", "x".repeat(REASON_LIMIT + 1));
        assert_eq!(
            Message::parse(&long),
            Ok(Message::Refuse("x".repeat(REASON_LIMIT)))
        );
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            " ",
            "hello",
            "hello 1 0.1.0",
            "hello 1 0.1.0 3 extra",
            "hello 0 0.1.0 3",
            "hello -1 0.1.0 3",
            "hello 4294967296 0.1.0 3",
            "hello 1  3",
            "hello 1 0.1.0 x",
            "hello  1 0.1.0 3",
            "hello 1 0.1.0 3 ",
            "HELLO 1 0.1.0 3",
            "hello 1 v\u{e9} 3",
            "offer 1 0.1.0 3 2",
            "offer 1 0.1.0 3",
            "offer 1 0.1.0 3 1 1",
            "take ",
            "take\n",
            "released now",
            "serving\0",
            "refuse",
            "refuse\tno",
        ] {
            assert!(Message::parse(text).is_err(), "{text:?} was taken");
        }
        let long = format!("hello 1 {} 3", "v".repeat(VERSION_LIMIT + 1));
        assert!(Message::parse(&long).is_err());
    }
}
