//! `-o` options, fstab style (`mount -t fuse.shoal BUCKET /mnt -o ...`), as the
//! flags they stand for.

use std::path::PathBuf;

use crate::Args;

/// Applies `-o` options onto the flags (flags given explicitly still win).
pub(crate) fn apply(args: &mut Args) -> Result<(), String> {
    let opts: Vec<String> = args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::to_owned)
        .collect();
    for o in opts {
        let (k, v) = match o.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim().to_owned())),
            None => (o.trim(), None),
        };
        let need = |v: Option<String>| v.ok_or_else(|| format!("-o {k} needs a value ({k}=...)"));
        match k {
            "" | "ro" | "_netdev" | "nofail" | "noauto" | "auto" | "defaults" | "user"
            | "nouser" | "users" | "exec" | "noexec" | "suid" | "nosuid" | "dev" | "nodev"
            | "atime" | "noatime" | "async" => {}
            // mount(8) may add rw on its own; the mount is read-only whatever it says.
            "rw" => eprintln!("shoal-mount: ignoring -o rw: shoal mounts are read-only"),
            "allow_other" => args.allow_other = true,
            "foreground" => args.foreground = true,
            "uid" => {
                args.uid = args.uid.or(Some(
                    need(v)?.parse().map_err(|_| "-o uid= takes a number")?,
                ))
            }
            "gid" => {
                args.gid = args.gid.or(Some(
                    need(v)?.parse().map_err(|_| "-o gid= takes a number")?,
                ))
            }
            "file_mode" => args.file_mode = args.file_mode.take().or(Some(need(v)?)),
            "dir_mode" => args.dir_mode = args.dir_mode.take().or(Some(need(v)?)),
            "metadata_ttl" => args.metadata_ttl = args.metadata_ttl.take().or(Some(need(v)?)),
            "metadata" => args.metadata = args.metadata.take().or(Some(need(v)?)),
            "cache_size" => args.cache_size = args.cache_size.take().or(Some(need(v)?)),
            "memory_limit" => args.memory_limit = args.memory_limit.take().or(Some(need(v)?)),
            "read_window" => {
                args.read_window = args.read_window.or(Some(
                    need(v)?
                        .parse()
                        .map_err(|_| "-o read_window= takes a number")?,
                ))
            }
            "prefetch_files" => {
                args.prefetch_files = args.prefetch_files.or(Some(
                    need(v)?
                        .parse()
                        .map_err(|_| "-o prefetch_files= takes a number")?,
                ))
            }
            "config" => args.config = args.config.take().or(Some(PathBuf::from(need(v)?))),
            "disk_cache" => {
                args.disk_cache = args.disk_cache.take().or(Some(PathBuf::from(need(v)?)))
            }
            "disk_cache_size" => {
                args.disk_cache_size = args.disk_cache_size.take().or(Some(need(v)?))
            }
            "zone" => args.zone = args.zone.take().or(Some(need(v)?)),
            other => return Err(format!("unknown mount option {other:?}")),
        }
    }
    Ok(())
}
