//! Reads from S3 with shoal's client: `s3_get CONFIG ls s3://BUCKET/PREFIX` lists,
//! `s3_get CONFIG cat s3://BUCKET/KEY [FIRST-LAST]` writes the object (or a byte
//! range of it) to stdout. The config needs an `[origin]` section.

use std::io::Write;

use shoal::config::Config;
use shoal::store::{ByteRange, GetObject};

fn split(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| format!("{url:?} is not an s3:// URL"))?;
    let (b, k) = rest.split_once('/').unwrap_or((rest, ""));
    Ok((b.to_owned(), k.to_owned()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [config, cmd, url, rest @ ..] = args.as_slice() else {
        return Err("usage: s3_get CONFIG (ls|cat) s3://BUCKET/KEY [FIRST-LAST]".into());
    };
    let config = Config::load(config.as_ref())?;
    let client = (config.origin()?).client()?;
    let (bucket, key) = split(url)?;
    match cmd.as_str() {
        "ls" => {
            let page = client.list_all(&bucket, &key, None).await?;
            for o in page.objects {
                println!("{:>12}  {}  {}", o.size, o.etag, o.key);
            }
        }
        "cat" => {
            let mut req = GetObject::new(bucket, key);
            if let Some(r) = rest.first() {
                let (a, b) = r.split_once('-').ok_or("a range is FIRST-LAST")?;
                req.range = Some(ByteRange::From {
                    first: a.parse()?,
                    last: if b.is_empty() { None } else { Some(b.parse()?) },
                });
            }
            let (_, bytes) = client.get_bytes(&req).await?;
            std::io::stdout().write_all(&bytes)?;
        }
        other => return Err(format!("unknown command {other:?}: use ls or cat").into()),
    }
    Ok(())
}
