//! What the node service asks of the machine, behind small seams so the logic is
//! testable: commands (`nvme`, `blkid`, `mkfs.*`, `mount`, `umount`, `resize2fs`,
//! `xfs_growfs`), the mount table, and the sysfs tree the NVMe host driver publishes.

use std::path::{Path, PathBuf};
use std::process::Command;

use uuid::Uuid;

/// Why a command did not succeed: its exit status (None: it could not be started or
/// was killed by a signal) and a message naming the command and its stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    pub status: Option<i32>,
    pub message: String,
}

impl std::fmt::Display for CommandError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

/// Runs a program and returns its standard output.
pub trait Commands: Send + Sync {
    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandError>;
}

/// The real machine.
pub struct SystemCommands;

impl Commands for SystemCommands {
    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandError> {
        let output = Command::new(program).args(args).output().map_err(|error| CommandError {
            status: None,
            message: format!("cannot run {program} (is it installed and on PATH?): {error}"),
        })?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            // The message is logged and may reach the CO: a DH-HMAC-CHAP key on the
            // command line (`nvme connect --dhchap-secret=...`), or quoted by the
            // program, must not.
            Err(CommandError {
                status: output.status.code(),
                message: crate::secrets::redact(&format!(
                    "`{program} {}` failed ({}): {}",
                    args.join(" "),
                    output.status,
                    String::from_utf8_lossy(&output.stderr).trim()
                )),
            })
        }
    }
}

/// Mount points in a mountinfo table (`/proc/self/mountinfo`), octal escapes undone.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|escaped| PathBuf::from(unescape_octal(escaped)))
        .collect()
}

fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'\\'
            && index + 4 <= bytes.len()
            && bytes[index + 1..index + 4].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            let digit = |offset: usize| u32::from(bytes[index + offset] - b'0');
            // Three octal digits can exceed a byte (\777); mountinfo never writes those.
            out.push(u8::try_from(digit(1) * 64 + digit(2) * 8 + digit(3)).unwrap_or(b'?'));
            index += 4;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The device number (`major:minor`) of the filesystem mounted at `path` in a
/// mountinfo table; the last entry wins (the mount on top).
pub fn mounted_device(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo.lines().rev().find_map(|line| {
        let mut fields = line.split(' ');
        let device = fields.nth(2)?;
        let point = fields.nth(1)?;
        (PathBuf::from(unescape_octal(point)) == path).then(|| device.to_string())
    })
}

/// The device number (`major:minor`) of a block device, from `sys_block`.
pub fn device_number(sys_block: &Path, device: &Path) -> Option<String> {
    let name = device.file_name()?;
    let text = std::fs::read_to_string(sys_block.join(name).join("dev")).ok()?;
    Some(text.trim().to_string())
}

pub fn is_mount_point(path: &Path) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mount_points(&table).iter().any(|mounted| mounted == path)
}

/// The block device (`/dev/nvmeXnY`) of the namespace with `uuid`, found in
/// `sys_block` (`/sys/block`) by its `uuid`, `nguid` or `wwid` attribute, never by
/// guessing a name. With native multipath the kernel shows one head device
/// (`nvmeXnY`) and hidden per-path devices (`nvmeXcYnZ`); the head is the one to use.
pub fn find_device(sys_block: &Path, uuid: &Uuid) -> Option<PathBuf> {
    let hyphenated = uuid.hyphenated().to_string();
    let simple = uuid.simple().to_string();
    let mut found: Vec<String> = Vec::new();
    for entry in std::fs::read_dir(sys_block).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("nvme") {
            continue;
        }
        let attribute =
            |file: &str| std::fs::read_to_string(entry.path().join(file)).map(|text| text.trim().to_lowercase());
        let matches = attribute("uuid").is_ok_and(|text| text == hyphenated)
            || attribute("nguid").is_ok_and(|text| text.replace('-', "") == simple)
            || attribute("wwid")
                .is_ok_and(|text| text == format!("uuid.{hyphenated}") || text == format!("eui.{simple}"));
        if matches {
            found.push(name);
        }
    }
    // Heads first: a path device's name has a controller part (`c<N>`).
    found.sort_by_key(|name| (is_path_device(name), name.clone()));
    found.first().map(|name| PathBuf::from("/dev").join(name))
}

/// The size in bytes of the block device `device` (`/dev/NAME`), from
/// `sys_block/NAME/size` (in 512-byte sectors whatever the logical block size).
pub fn device_size_bytes(sys_block: &Path, device: &Path) -> Option<u64> {
    let name = device.file_name()?;
    let sectors: u64 = std::fs::read_to_string(sys_block.join(name).join("size")).ok()?.trim().parse().ok()?;
    sectors.checked_mul(512)
}

/// Whether `path` is a block device node (a raw block volume's publish target is
/// the device bind-mounted on a file).
pub fn is_block_device(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_block_device())
}

fn is_path_device(name: &str) -> bool {
    name.strip_prefix("nvme").is_some_and(|rest| rest.contains('c'))
}

/// NVMe/TCP discovery log records (`nvme discover -o json`) for `subsystem_nqn`:
/// (address, port) of every path the gateway announces.
pub fn discovered_paths(discover_json: &str, subsystem_nqn: &str) -> Vec<(String, String)> {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(discover_json) else {
        return Vec::new();
    };
    let records = value.get("records").and_then(|records| records.as_array()).cloned().unwrap_or_default();
    let mut paths: Vec<(String, String)> = records
        .iter()
        .filter(|record| record.get("subnqn").and_then(|nqn| nqn.as_str()) == Some(subsystem_nqn))
        .filter_map(|record| {
            let address = record.get("traddr")?.as_str()?.trim().to_string();
            let port = record.get("trsvcid")?.as_str()?.trim().to_string();
            Some((address, port))
        })
        .collect();
    paths.sort();
    paths.dedup();
    paths
}

/// The NVMe controllers (`nvmeN`, in `sys_class_nvme`, i.e. `/sys/class/nvme`)
/// connected to `subsystem_nqn`, with the (address, port) of each: what a stage
/// need not connect again, a rescan asks, and an unstage disconnects.
pub fn subsystem_controllers(sys_class_nvme: &Path, subsystem_nqn: &str) -> Vec<(String, (String, String))> {
    let Ok(entries) = std::fs::read_dir(sys_class_nvme) else {
        return Vec::new();
    };
    let mut controllers: Vec<(String, (String, String))> = entries
        .flatten()
        .filter_map(|entry| {
            let read = |file: &str| std::fs::read_to_string(entry.path().join(file)).ok();
            if read("subsysnqn")?.trim() != subsystem_nqn {
                return None;
            }
            let address = read("address").unwrap_or_default();
            let field = |key: &str| {
                address
                    .trim()
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                    .unwrap_or_default()
                    .to_string()
            };
            Some((entry.file_name().to_string_lossy().into_owned(), (field("traddr"), field("trsvcid"))))
        })
        .collect();
    controllers.sort();
    controllers
}

/// Splits `HOST:PORT` (`[v6]:PORT` too); the port defaults to 8009 (discovery).
pub fn split_address(address: &str) -> (String, String) {
    if let Ok(socket) = address.parse::<std::net::SocketAddr>() {
        return (socket.ip().to_string(), socket.port().to_string());
    }
    match address.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host.to_string(), port.to_string()),
        _ => (address.to_string(), "8009".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_line_never_shows_a_key() {
        let key = "DHHC-1:00:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:";
        let error = SystemCommands.run("false", &["connect", &format!("--dhchap-secret={key}")]).unwrap_err();
        assert_eq!(error.status, Some(1));
        assert!(error.message.contains("--dhchap-secret=DHHC-1:<redacted>"), "{}", error.message);
        assert!(!error.message.contains("AAAA"), "{}", error.message);
    }

    #[test]
    fn the_device_mounted_at_a_path_is_the_one_on_top() {
        let table = "36 35 98:0 / /mnt1 rw - ext3 /dev/root rw\n\
                     40 36 259:3 / /var/lib/kubelet/stage\\040a rw - ext4 /dev/nvme0n1 rw\n\
                     41 40 259:7 / /var/lib/kubelet/stage\\040a rw - ext4 /dev/nvme1n1 rw\n";
        assert_eq!(mounted_device(table, Path::new("/var/lib/kubelet/stage a")).as_deref(), Some("259:7"));
        assert_eq!(mounted_device(table, Path::new("/mnt1")).as_deref(), Some("98:0"));
        assert_eq!(mounted_device(table, Path::new("/elsewhere")), None);
    }

    #[test]
    fn mount_points_are_read_with_escapes_undone() {
        let table =
            "36 35 98:0 / /mnt/a\\040b rw - ext4 /dev/x rw\n37 35 98:0 / /var/lib/kubelet rw - ext4 /dev/y rw\n";
        assert_eq!(mount_points(table), vec![PathBuf::from("/mnt/a b"), PathBuf::from("/var/lib/kubelet")]);
    }

    #[test]
    fn the_device_is_found_by_uuid_and_the_head_wins_over_paths() {
        let root = std::env::temp_dir().join(format!("sluice-csi-sys-{}", std::process::id()));
        let uuid = crate::volume_id::namespace_uuid_for_name("pvc-a");
        for (name, file, text) in [
            ("nvme0c0n1", "uuid", uuid.hyphenated().to_string()),
            ("nvme0n1", "uuid", uuid.hyphenated().to_string()),
            ("nvme1n1", "uuid", "00000000-0000-0000-0000-000000000000".to_string()),
            ("nvme2n1", "wwid", format!("eui.{}", crate::volume_id::namespace_uuid_for_name("pvc-b").simple())),
            ("sda", "uuid", uuid.hyphenated().to_string()),
        ] {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join(file), format!("{text}\n")).unwrap();
        }
        assert_eq!(find_device(&root, &uuid), Some(PathBuf::from("/dev/nvme0n1")));
        let other = crate::volume_id::namespace_uuid_for_name("pvc-b");
        assert_eq!(find_device(&root, &other), Some(PathBuf::from("/dev/nvme2n1")));
        assert_eq!(find_device(&root, &crate::volume_id::namespace_uuid_for_name("pvc-c")), None);
        std::fs::write(root.join("nvme0n1/size"), "2097152\n").unwrap();
        assert_eq!(device_size_bytes(&root, Path::new("/dev/nvme0n1")), Some(1 << 30));
        assert_eq!(device_size_bytes(&root, Path::new("/dev/nvme1n1")), None);
        assert!(!is_block_device(&root));
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn discovery_records_of_the_subsystem_become_paths() {
        let log = r#"{"genctr":3,"records":[
            {"trtype":"tcp","traddr":"10.0.0.1","trsvcid":"4420","subnqn":"nqn.a:gold"},
            {"trtype":"tcp","traddr":"10.0.0.2","trsvcid":"4420","subnqn":"nqn.a:gold"},
            {"trtype":"tcp","traddr":"10.0.0.1","trsvcid":"4420","subnqn":"nqn.a:other"}]}"#;
        assert_eq!(
            discovered_paths(log, "nqn.a:gold"),
            vec![("10.0.0.1".to_string(), "4420".to_string()), ("10.0.0.2".to_string(), "4420".to_string())]
        );
        assert!(discovered_paths("not json", "nqn.a:gold").is_empty());
        assert_eq!(split_address("10.0.0.1:8009"), ("10.0.0.1".to_string(), "8009".to_string()));
        assert_eq!(split_address("[fd00::1]:4420"), ("fd00::1".to_string(), "4420".to_string()));
        assert_eq!(split_address("gw.example"), ("gw.example".to_string(), "8009".to_string()));
    }

    #[test]
    fn the_controllers_of_a_subsystem_are_found_with_their_paths() {
        let root = std::env::temp_dir().join(format!("sluice-csi-class-{}", std::process::id()));
        for (name, nqn, address) in [
            ("nvme0", "nqn.a:gold", "traddr=10.0.2.2,trsvcid=4420,src_addr=10.0.2.15\n"),
            ("nvme1", "nqn.a:gold", "traddr=10.0.2.2,trsvcid=4421\n"),
            ("nvme2", "nqn.a:other", "traddr=10.0.2.2,trsvcid=4420\n"),
        ] {
            std::fs::create_dir_all(root.join(name)).unwrap();
            std::fs::write(root.join(name).join("subsysnqn"), format!("{nqn}\n")).unwrap();
            std::fs::write(root.join(name).join("address"), address).unwrap();
        }
        let path = |address: &str, port: &str| (address.to_string(), port.to_string());
        assert_eq!(
            subsystem_controllers(&root, "nqn.a:gold"),
            vec![("nvme0".to_string(), path("10.0.2.2", "4420")), ("nvme1".to_string(), path("10.0.2.2", "4421"))]
        );
        assert!(subsystem_controllers(&root, "nqn.a:none").is_empty());
        assert!(subsystem_controllers(&root.join("missing"), "nqn.a:gold").is_empty());
        let _ = std::fs::remove_dir_all(root);
    }
}
