//! Storage composition in the config: every validation error, asserted on its message
//! (it must name the entry and say why), the side-effect-free check, and building
//! RAID0, pools, carves and caches across a restart.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;

/// A scratch directory, removed on drop. Only file metadata is read by the checks, so
/// any filesystem works; builds use buffered I/O in case it is tmpfs.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "sluice-config-validation-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Every file under the directory, for "nothing was created" checks.
    fn files(&self) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.0).unwrap().map(|entry| entry.unwrap().path()).collect();
        files.sort();
        files
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const HEAD: &str = "[[listener]]\naddress = \"127.0.0.1:4420\"\n";

/// A config of `HEAD` + `body`; `{dir}` in the body is the scratch directory.
fn config(scratch: &Scratch, body: &str) -> Config {
    let text = format!("{HEAD}{}", body.replace("{dir}", &scratch.0.display().to_string()));
    Config::parse(&text).unwrap_or_else(|error| panic!("{error}\n{text}"))
}

/// The error `check` reports, as the user sees it.
fn check_error(scratch: &Scratch, body: &str) -> String {
    match config(scratch, body).check() {
        Ok(report) => panic!("expected an error, got {:?}", report.lines),
        Err(error) => error.to_string(),
    }
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(message.contains(part), "{part:?} missing from: {message}");
    }
}

/// Three 4 MiB file backends disk0..disk2 with 4096-byte blocks (created on first build).
const THREE_DISKS: &str = r#"
[[backend]]
name = "disk0"
kind = "file"
path = "{dir}/disk0.img"
size = "4MiB"
direct_io = false
[[backend]]
name = "disk1"
kind = "file"
path = "{dir}/disk1.img"
size = "4MiB"
direct_io = false
[[backend]]
name = "disk2"
kind = "file"
path = "{dir}/disk2.img"
size = "4MiB"
direct_io = false
"#;

const STRIPE: &str = r#"
[[backend]]
name = "stripe"
kind = "raid0"
members = ["disk0", "disk1", "disk2"]
strip_size = "64KiB"
"#;

const SUBSYSTEM: &str = "[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:test\"\n";

#[test]
fn an_unknown_reference_names_the_entry_and_the_known_names() {
    let scratch = Scratch::new();
    let body = format!("{THREE_DISKS}{}", STRIPE.replace("\"disk2\"]", "\"disk9\"]"));
    let message = check_error(&scratch, &body);
    assert_contains(
        &message,
        &[
            "config backend \"stripe\" (raid0): member \"disk9\" is not the name of any [[backend]] entry",
            "known: disk0, disk1, disk2, stripe",
        ],
    );
    let message = check_error(&scratch, &format!("{SUBSYSTEM}[[subsystem.namespace]]\ndevice = \"nowhere\"\n"));
    assert_contains(
        &message,
        &["namespace[0]: device \"nowhere\" is not the name of any [[backend]] entry (there are none)"],
    );
}

#[test]
fn a_pool_where_a_backend_belongs_points_to_carve_backends() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"r\"\nkind = \"ram\"\nsize = \"8MiB\"\n[[pool]]\nname = \"p\"\ndevice = \"r\"\n\
                [[backend]]\nname = \"c\"\nkind = \"cache\"\nfast = \"p\"\nslow = \"r\"\nmode = \"write-through\"\n";
    let message = check_error(&scratch, body);
    assert_contains(
        &message,
        &["backend \"c\" (cache): fast tier \"p\" is a [[pool]], not a [[backend]]", "kind = \"carve\""],
    );
}

#[test]
fn cycles_are_reported_as_the_chain() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"a\"\nkind = \"raid0\"\nmembers = [\"b\"]\n\
                [[backend]]\nname = \"b\"\nkind = \"raid0\"\nmembers = [\"a\"]\n";
    assert_contains(&check_error(&scratch, body), &["config backend \"a\" (raid0): cycle a -> b -> a"]);
    // Through a pool: the cache's slow tier is carved from a pool on the cache itself.
    let body = "[[backend]]\nname = \"fast\"\nkind = \"ram\"\nsize = \"8MiB\"\n\
                [[backend]]\nname = \"tier\"\nkind = \"cache\"\nfast = \"fast\"\nslow = \"slice\"\nmode = \"write-through\"\n\
                [[pool]]\nname = \"p\"\ndevice = \"tier\"\n\
                [[backend]]\nname = \"slice\"\nkind = \"carve\"\npool = \"p\"\nsize = \"1MiB\"\n";
    assert_contains(
        &check_error(&scratch, body),
        &["cycle tier -> slice -> p -> tier", "cannot be built on top of itself"],
    );
}

#[test]
fn a_backend_used_twice_names_both_users() {
    let scratch = Scratch::new();
    let body = format!("{THREE_DISKS}{STRIPE}{SUBSYSTEM}[[subsystem.namespace]]\ndevice = \"disk1\"\n");
    let message = check_error(&scratch, &body);
    assert_contains(
        &message,
        &[
            "config backend \"disk1\" (file): used by backend \"stripe\" (raid0) as a member and by subsystem[0] \
         (nqn.2026-11.io.sluice:test) namespace[0] as its device",
            "declare a separate backend",
        ],
    );
}

#[test]
fn two_entries_on_one_file_are_refused() {
    let scratch = Scratch::new();
    std::fs::create_dir_all(scratch.path("sub")).unwrap();
    let body = "[[backend]]\nname = \"a\"\nkind = \"file\"\npath = \"{dir}/same.img\"\nsize = \"1MiB\"\n\
                [[backend]]\nname = \"b\"\nkind = \"file\"\npath = \"{dir}/sub/../same.img\"\nsize = \"1MiB\"\n\
                [[backend]]\nname = \"s\"\nkind = \"raid0\"\nmembers = [\"a\", \"b\"]\n";
    let message = check_error(&scratch, body);
    assert_contains(
        &message,
        &["config backend \"b\" (file):", "same.img is also used by backend \"a\" (file)", "its own file"],
    );
    // A pool table on a data file is the same mistake.
    let body = "[[backend]]\nname = \"a\"\nkind = \"file\"\npath = \"{dir}/same.img\"\nsize = \"2MiB\"\n\
                [[pool]]\nname = \"p\"\ndevice = \"a\"\ntable = \"{dir}/same.img\"\n";
    assert_contains(&check_error(&scratch, body), &["config pool \"p\":", "is also used by backend \"a\" (file)"]);
}

#[test]
fn a_missing_file_without_size_is_refused() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"disk0\"\nkind = \"file\"\npath = \"{dir}/absent.img\"\n";
    let message = check_error(&scratch, body);
    assert_contains(
        &message,
        &["config backend \"disk0\" (file):", "absent.img does not exist and no `size` is given"],
    );
    let body =
        "[[backend]]\nname = \"disk0\"\nkind = \"file\"\npath = \"{dir}/no/such/dir/disk.img\"\nsize = \"1MiB\"\n";
    assert_contains(&check_error(&scratch, body), &["cannot create", "no/such/dir does not exist; create it first"]);
    // The same rule for an inline file namespace.
    let body = format!("{SUBSYSTEM}[[subsystem.namespace]]\nbackend = \"file\"\npath = \"{{dir}}/absent.img\"\n");
    assert_contains(&check_error(&scratch, &body), &["namespace[0]:", "does not exist and no `size` is given"]);
}

#[test]
fn mismatched_block_sizes_name_both_parts() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"disk0\"\nkind = \"ram\"\nsize = \"1MiB\"\nblock_size = 512\n\
                [[backend]]\nname = \"disk1\"\nkind = \"ram\"\nsize = \"1MiB\"\nblock_size = 4096\n\
                [[backend]]\nname = \"stripe\"\nkind = \"raid0\"\nmembers = [\"disk0\", \"disk1\"]\n";
    assert_eq!(
        check_error(&scratch, body),
        "config backend \"stripe\" (raid0): member \"disk1\" has 4096-byte blocks but member \"disk0\" has 512-byte \
         blocks; give every part the same block_size"
    );
    let body = body.replace(
        "kind = \"raid0\"\nmembers = [\"disk0\", \"disk1\"]",
        "kind = \"cache\"\nfast = \"disk0\"\nslow = \"disk1\"\nmode = \"write-through\"",
    );
    assert_contains(&check_error(&scratch, &body), &["config backend \"stripe\" (cache): slow tier \"disk1\" has 4096-byte blocks but fast tier \"disk0\" has 512-byte blocks"]);
}

#[test]
fn strips_lines_and_units_must_fit_the_blocks() {
    let scratch = Scratch::new();
    let body = format!("{THREE_DISKS}{}", STRIPE.replace("64KiB", "2KiB"));
    assert_contains(&check_error(&scratch, &body), &[
        "config backend \"stripe\" (raid0): strip_size 2 KiB is not a power of two multiple of the 4096-byte block size",
    ]);
    let body = format!("{THREE_DISKS}{}", STRIPE.replace("64KiB", "8MiB"));
    assert_contains(&check_error(&scratch, &body), &["member \"disk0\" holds 4 MiB, less than one 8 MiB strip"]);
    let cache = "[[backend]]\nname = \"c\"\nkind = \"cache\"\nfast = \"disk0\"\nslow = \"disk1\"\nmode = \"write-back\"\nline_size = 3000\n";
    assert_contains(
        &check_error(&scratch, &format!("{THREE_DISKS}{cache}")),
        &["backend \"c\" (cache): line_size 3000 bytes is not a power of two"],
    );
    let cache = cache.replace("line_size = 3000", "line_size = \"4MiB\"");
    assert_contains(
        &check_error(&scratch, &format!("{THREE_DISKS}{cache}")),
        &["fast tier \"disk0\" holds 4 MiB, too little for the cache's metadata and one 4 MiB line"],
    );
    let pool = "[[pool]]\nname = \"p\"\ndevice = \"disk0\"\ntable = \"{dir}/p.json\"\nunit_size = \"16MiB\"\n";
    assert_contains(
        &check_error(&scratch, &format!("{THREE_DISKS}{pool}")),
        &["config pool \"p\": device \"disk0\" holds 4 MiB, less than one 16 MiB allocation unit"],
    );
}

#[test]
fn pool_namespaces_need_distinct_explicit_nsids() {
    let scratch = Scratch::new();
    let pool = "[[backend]]\nname = \"r\"\nkind = \"ram\"\nsize = \"64MiB\"\n[[pool]]\nname = \"p\"\ndevice = \"r\"\n";
    let namespace = "[[subsystem.namespace]]\nnsid = 1\npool = \"p\"\nsize = \"1MiB\"\n";
    let message = check_error(&scratch, &format!("{pool}{SUBSYSTEM}{namespace}{namespace}"));
    assert_eq!(
        message,
        "config subsystem[0] (nqn.2026-11.io.sluice:test) namespace[1].nsid: nsid 1 is also used by subsystem[0] \
         (nqn.2026-11.io.sluice:test) namespace[0]; every namespace of a subsystem needs its own nsid"
    );
    let message = check_error(&scratch, &format!("{pool}{SUBSYSTEM}{}", namespace.replace("nsid = 1\n", "")));
    assert_contains(&message, &["namespace[0]: a pool namespace needs an explicit `nsid`"]);
    // A pool namespace may name its NGUID (its carve is made with it), but a valid one.
    let message = check_error(&scratch, &format!("{pool}{SUBSYSTEM}{namespace}nguid = \"0011\"\n"));
    assert_contains(&message, &["namespace[0].nguid"]);
    let message = check_error(&scratch, &format!("{pool}{SUBSYSTEM}{}", namespace.replace("1MiB", "1000")));
    assert_contains(&message, &["size 1000 bytes is not a positive multiple of pool \"p\"'s 512-byte blocks"]);
}

#[test]
fn a_write_back_cache_on_ram_over_a_file_is_refused_as_unsafe() {
    let scratch = Scratch::new();
    let body = format!(
        "{THREE_DISKS}[[backend]]\nname = \"memory\"\nkind = \"ram\"\nsize = \"4MiB\"\nblock_size = 4096\n\
         [[backend]]\nname = \"tier\"\nkind = \"cache\"\nfast = \"memory\"\nslow = \"disk0\"\nmode = \"write-back\"\n"
    );
    let message = check_error(&scratch, &body);
    assert_contains(&message, &[
        "config backend \"tier\" (cache): mode = \"write-back\" with fast tier \"memory\" (ram) that loses its data at every restart",
        "acknowledged writes would be lost on a crash",
        "mode = \"write-through\"",
    ]);
    // Write-through over the same tiers is fine: writes reach the file before they complete.
    let ok = body.replace("write-back", "write-through") + SUBSYSTEM + "[[subsystem.namespace]]\ndevice = \"tier\"\n";
    config(&scratch, &ok).check().unwrap();
    // A persistent fast tier over a volatile slow tier would replay stale dirty lines.
    let body = format!(
        "{THREE_DISKS}[[backend]]\nname = \"memory\"\nkind = \"ram\"\nsize = \"4MiB\"\nblock_size = 4096\n\
         [[backend]]\nname = \"tier\"\nkind = \"cache\"\nfast = \"disk0\"\nslow = \"memory\"\nmode = \"write-back\"\n"
    );
    assert_contains(&check_error(&scratch, &body), &["replay old dirty lines over an empty slow tier"]);
}

#[test]
fn pools_on_persistent_devices_need_a_table_in_an_existing_directory() {
    let scratch = Scratch::new();
    let body = format!("{THREE_DISKS}[[pool]]\nname = \"capacity\"\ndevice = \"disk0\"\n");
    assert_contains(
        &check_error(&scratch, &body),
        &[
            "config pool \"capacity\": `table` is missing: device \"disk0\" keeps its data across restarts",
            "table = \"/var/lib/sluice/capacity.table.json\"",
        ],
    );
    let body =
        format!("{THREE_DISKS}[[pool]]\nname = \"capacity\"\ndevice = \"disk0\"\ntable = \"{{dir}}/gone/t.json\"\n");
    assert_contains(
        &check_error(&scratch, &body),
        &["config pool \"capacity\": table", "gone does not exist; create it first"],
    );
}

#[test]
fn keys_must_fit_the_kind_and_required_keys_must_be_there() {
    let scratch = Scratch::new();
    let body =
        "[[backend]]\nname = \"d\"\nkind = \"file\"\npath = \"{dir}/d.img\"\nsize = \"1MiB\"\nmembers = [\"x\"]\n";
    assert_eq!(
        check_error(&scratch, body),
        "config backend \"d\" (file): `members` does not apply to kind = \"file\" (only to kind = \"raid0\"); remove it"
    );
    let body = "[[backend]]\nname = \"c\"\nkind = \"cache\"\nfast = \"a\"\nslow = \"b\"\n";
    assert_contains(
        &check_error(&scratch, body),
        &["backend \"c\" (cache): `mode` is missing", "mode = \"write-back\" or mode = \"write-through\""],
    );
    let body = "[[backend]]\nname = \"r\"\nkind = \"raid0\"\nmembers = []\n";
    assert_contains(&check_error(&scratch, body), &["`members` is empty"]);
    let body = "[[backend]]\nname = \"r\"\nkind = \"raid0\"\nmembers = [\"a\", \"b\", \"a\"]\n";
    assert_contains(
        &check_error(&scratch, body),
        &["backend \"r\" (raid0): member \"a\" is listed twice (positions 0 and 2)"],
    );
    let body = "[[backend]]\nname = \"c\"\nkind = \"cache\"\nfast = \"a\"\nslow = \"a\"\nmode = \"write-back\"\n";
    assert_contains(&check_error(&scratch, body), &["`fast` and `slow` name the same backend"]);
    let body = format!(
        "{THREE_DISKS}{SUBSYSTEM}[[subsystem.namespace]]\nbackend = \"ram\"\ndevice = \"disk0\"\nsize = \"1MiB\"\n"
    );
    assert_contains(&check_error(&scratch, &body), &["namespace[0]: give only one of `backend`, `device` and `pool`"]);
    let body = format!("{THREE_DISKS}{SUBSYSTEM}[[subsystem.namespace]]\ndevice = \"disk0\"\nsize = \"1MiB\"\n");
    assert_contains(&check_error(&scratch, &body), &["`size` does not apply to a namespace with `device`"]);
    let body = format!("{SUBSYSTEM}[[subsystem.namespace]]\nnsid = 1\n");
    assert_contains(&check_error(&scratch, &body), &["namespace[0]: no storage: give backend"]);
}

#[test]
fn names_are_unique_and_plain() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"x\"\nkind = \"ram\"\nsize = \"1MiB\"\n[[pool]]\nname = \"x\"\ndevice = \"x\"\n";
    assert_contains(&check_error(&scratch, body), &["config pool[0]: name \"x\" is already used by backend[0]"]);
    let body = "[[backend]]\nname = \"my disk\"\nkind = \"ram\"\nsize = \"1MiB\"\n";
    assert_contains(&check_error(&scratch, body), &["config backend[0]: name \"my disk\" contains ' '"]);
    let body = "[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:backend:x\"\n";
    assert_contains(&check_error(&scratch, body), &["nqn: NQNs starting with", "are reserved"]);
}

#[test]
fn raid0_members_must_agree_on_keeping_data() {
    let scratch = Scratch::new();
    let body = format!(
        "{THREE_DISKS}[[backend]]\nname = \"memory\"\nkind = \"ram\"\nsize = \"4MiB\"\nblock_size = 4096\n\
         [[backend]]\nname = \"mixed\"\nkind = \"raid0\"\nmembers = [\"disk0\", \"memory\"]\n"
    );
    assert_contains(&check_error(&scratch, &body), &[
        "backend \"mixed\" (raid0): member \"disk0\" keeps its data across restarts but \"memory\" loses its data at every restart",
    ]);
}

#[test]
fn thick_carves_must_fit_their_pool() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"r\"\nkind = \"ram\"\nsize = \"8MiB\"\n[[pool]]\nname = \"p\"\ndevice = \"r\"\n\
                [[backend]]\nname = \"k\"\nkind = \"carve\"\npool = \"p\"\nsize = \"6MiB\"\n\
                [[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:t\"\n\
                [[subsystem.namespace]]\nnsid = 1\ndevice = \"k\"\n\
                [[subsystem.namespace]]\nnsid = 2\npool = \"p\"\nsize = \"3MiB\"\n";
    assert_contains(&check_error(&scratch, body), &[
        "config pool \"p\": the thick namespaces and carves in it (subsystem[0] (nqn.2026-11.io.sluice:t) namespace[1], backend \"k\" (carve))",
        "need 9 MiB in whole allocation units, but the pool holds 8 MiB",
    ]);
    // Thin carves reserve nothing.
    config(&scratch, &body.replace("size = \"3MiB\"\n", "size = \"3MiB\"\nthin = true\n")).check().unwrap();
}

#[test]
fn unused_entries_are_warnings_and_not_built() {
    let scratch = Scratch::new();
    let report = config(&scratch, THREE_DISKS).check().unwrap();
    assert_eq!(report.warnings.len(), 3, "{:?}", report.warnings);
    assert_contains(&report.warnings[0], &["backend \"disk0\" (file) is not used by any namespace"]);
    config(&scratch, THREE_DISKS).target_spec().unwrap();
    assert!(scratch.files().is_empty(), "unused backends must not create files: {:?}", scratch.files());
}

/// raid0 of three files, a pool on it with a file table, a write-back cache whose slow
/// tier is a carve of the pool, and namespaces on the cache, on the pool and inline.
fn tiered(scratch: &Scratch) -> String {
    format!(
        "{THREE_DISKS}{STRIPE}\
         [[pool]]\nname = \"capacity\"\ndevice = \"stripe\"\ntable = \"{{dir}}/capacity.json\"\nunit_size = \"1MiB\"\n\
         [[backend]]\nname = \"flash\"\nkind = \"file\"\npath = \"{{dir}}/flash.img\"\nsize = \"1MiB\"\ndirect_io = false\n\
         [[backend]]\nname = \"slice\"\nkind = \"carve\"\npool = \"capacity\"\nsize = \"4MiB\"\n\
         [[backend]]\nname = \"tier\"\nkind = \"cache\"\nfast = \"flash\"\nslow = \"slice\"\nmode = \"write-back\"\nline_size = \"16KiB\"\n\
         {SUBSYSTEM}\
         [[subsystem.namespace]]\nnsid = 1\ndevice = \"tier\"\n\
         [[subsystem.namespace]]\nnsid = 2\npool = \"capacity\"\nsize = \"2MiB\"\nthin = true\n\
         [[subsystem.namespace]]\nnsid = 3\nbackend = \"file\"\npath = \"{{dir}}/inline.img\"\nsize = \"1MiB\"\ndirect_io = false\n"
    )
    .replace("{dir}", &scratch.0.display().to_string())
}

#[test]
fn check_touches_no_storage() {
    let scratch = Scratch::new();
    let report = config(&scratch, &tiered(&scratch)).check().unwrap();
    assert!(scratch.files().is_empty(), "check created {:?}", scratch.files());
    let text = report.lines.join("\n");
    assert_contains(&text, &[
        "backend \"stripe\": raid0 of \"disk0\", \"disk1\", \"disk2\" with 64 KiB strips, 4096-byte blocks, 12 MiB",
        "pool \"capacity\": on \"stripe\",",
        "backend \"tier\": cache (write-back), fast tier \"flash\" over slow tier \"slice\", 16 KiB lines, 4096-byte blocks, 4 MiB",
        "nqn.2026-11.io.sluice:test: 3 namespace(s)",
        "  nsid 2: pool \"capacity\" (thin), 4096-byte blocks, 2 MiB",
    ]);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn composed_storage_builds_and_keeps_carve_identities_across_a_restart() {
    let scratch = Scratch::new();
    let text = tiered(&scratch);
    /// NSID, NGUID, UUID and capacity of every namespace.
    type Identity = (u32, Option<[u8; 16]>, Option<[u8; 16]>, u64);
    let identities = |spec: &TargetSpec| -> Vec<Identity> {
        let namespaces = &spec.subsystems[0].namespaces;
        namespaces.iter().map(|ns| (ns.id.0, ns.nguid, ns.uuid, ns.backend.geometry().capacity_bytes())).collect()
    };
    let first = {
        let spec = config(&scratch, &text).target_spec().unwrap();
        let namespaces = &spec.subsystems[0].namespaces;
        assert_eq!(namespaces.len(), 3);
        assert_eq!(namespaces[0].backend.kind(), "cache-write-back");
        assert_eq!(namespaces[0].backend.geometry().block_size_bytes, 4096);
        assert!(
            namespaces[1].nguid.is_some() && namespaces[1].uuid.is_some(),
            "pool carves carry their record's identity"
        );
        identities(&spec)
    };
    assert!(scratch.path("capacity.json").exists(), "the pool table is written on first start");
    let second = identities(&config(&scratch, &text).target_spec().unwrap());
    assert_eq!(first, second, "a restart finds the same carves (NSID, NGUID, UUID, size)");

    // A larger size grows the carve (a resize finished at start); a smaller one is
    // refused, naming the entry, and the carve is left alone.
    let grown = text.replace("size = \"2MiB\"\nthin = true", "size = \"3MiB\"\nthin = true");
    let spec = config(&scratch, &grown).target_spec().unwrap();
    assert_eq!(spec.subsystems[0].namespaces[1].backend.geometry().capacity_bytes(), 3 << 20);
    let third = identities(&config(&scratch, &grown).target_spec().unwrap());
    assert_eq!((third[1].1, third[1].2, third[1].3), (first[1].1, first[1].2, 3 << 20), "the same carve, grown");
    let message = config(&scratch, &text).target_spec().err().unwrap().to_string();
    assert_contains(&message, &[
        "config subsystem[0] (nqn.2026-11.io.sluice:test) namespace[1].size: pool \"capacity\" already holds this carve",
        "with 3 MiB, but size = 2 MiB: carves never shrink; set size = \"3MiB\"",
    ]);
    let thick = text.replace("size = \"2MiB\"\nthin = true", "size = \"3MiB\"");
    assert_contains(
        &config(&scratch, &thick).target_spec().err().unwrap().to_string(),
        &["as thin, but the config says thick"],
    );
}

#[test]
fn a_carve_that_cannot_grow_at_start_is_served_at_its_size_and_the_start_goes_on() {
    let scratch = Scratch::new();
    let body = |first: &str| {
        format!(
            "[[backend]]\nname = \"disk\"\nkind = \"file\"\npath = \"{{dir}}/pool.img\"\nsize = \"8MiB\"\n\
             [[pool]]\nname = \"p\"\ndevice = \"disk\"\ntable = \"{{dir}}/p.json\"\n\
             [[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:grow\"\n\
             [[subsystem.namespace]]\nnsid = 1\npool = \"p\"\nsize = \"{first}\"\n\
             [[subsystem.namespace]]\nnsid = 2\npool = \"p\"\nsize = \"2MiB\"\n"
        )
    };
    let capacities = |spec: &TargetSpec| -> Vec<u64> {
        spec.subsystems[0].namespaces.iter().map(|namespace| namespace.backend.geometry().capacity_bytes()).collect()
    };
    assert_eq!(capacities(&config(&scratch, &body("2MiB")).target_spec().unwrap()), [2 << 20, 2 << 20]);
    // Thick carve 1 is followed by carve 2: it cannot grow in place.
    let spec = config(&scratch, &body("3MiB")).target_spec().expect("the start goes on");
    assert_eq!(capacities(&spec), [2 << 20, 2 << 20], "served at the size it has");
}

#[test]
fn a_namespace_management_pool_serves_its_own_namespaces() {
    let scratch = Scratch::new();
    let body = "[[backend]]\nname = \"r\"\nkind = \"ram\"\nsize = \"16MiB\"\n[[pool]]\nname = \"managed\"\ndevice = \"r\"\n\
                [[backend]]\nname = \"s\"\nkind = \"ram\"\nsize = \"16MiB\"\n[[pool]]\nname = \"other\"\ndevice = \"s\"\n\
                [[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:nm\"\npool = \"managed\"\n\
                [[subsystem.namespace]]\nnsid = 1\npool = \"managed\"\nsize = \"4MiB\"\n\
                [[subsystem.namespace]]\nnsid = 2\npool = \"other\"\nsize = \"4MiB\"\n\
                [[subsystem.namespace]]\nnsid = 3\nbackend = \"ram\"\nsize = \"1MiB\"\n";
    let spec = config(&scratch, body).target_spec().unwrap();
    let subsystem = &spec.subsystems[0];
    let pool = subsystem.pool.as_ref().expect("Namespace Management is on");
    let listed: Vec<u32> = subsystem.namespaces.iter().map(|namespace| namespace.id.0).collect();
    assert_eq!(listed, vec![2, 3], "the managed pool's own namespaces are loaded by the subsystem, not listed");
    let bound: Vec<_> = pool.records().into_iter().filter_map(|record| record.binding).collect();
    assert_eq!(bound.len(), 1);
    assert_eq!(
        (bound[0].subsystem_nqn.as_str(), bound[0].namespace_id, bound[0].all_hosts),
        ("nqn.2026-11.io.sluice:nm", 1, true)
    );
    let report = config(&scratch, body).check().unwrap();
    assert_contains(
        &report.lines.join("\n"),
        &["nqn.2026-11.io.sluice:nm: 3 namespace(s); Namespace Management with pool \"managed\""],
    );
}

#[test]
fn the_examples_in_docs_pass_the_check() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/examples");
    let mut checked = Vec::new();
    for entry in std::fs::read_dir(&directory).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|extension| extension != "toml") {
            continue;
        }
        // The examples keep their data under /var/lib/sluice; point that at a scratch
        // directory (the check needs the directories of files it would create).
        let scratch = Scratch::new();
        let text = std::fs::read_to_string(&path).unwrap().replace("/var/lib/sluice", &scratch.0.display().to_string());
        let config = Config::parse(&text).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let report = config.check().unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(report.warnings.is_empty(), "{}: {:?}", path.display(), report.warnings);
        assert!(scratch.files().is_empty(), "checking {} created files", path.display());
        checked.push(path.file_name().unwrap().to_string_lossy().into_owned());
    }
    assert!(checked.iter().any(|name| name == "tiered.toml"), "docs/examples/tiered.toml is missing: {checked:?}");
}

/// A gateway config with one namespace described by `namespace` (TOML keys).
fn gateway_config(namespace: &str, extra: &str) -> Config {
    Config::parse(&format!(
        r#"[[listener]]
address = "127.0.0.1:4420"

[gateway]
name = "a"
group = "ha"
[[gateway.member]]
name = "a"
address = "127.0.0.1:4420"
[[gateway.member]]
name = "b"
address = "127.0.0.1:4421"

[[backend]]
name = "image"
kind = "rbd"
pool = "rbd"
image = "vol"
size = "1GiB"
{extra}

[[subsystem]]
nqn = "nqn.2026-11.io.sluice:ha"
allow_any_host = true
[[subsystem.namespace]]
nsid = 1
{namespace}
"#
    ))
    .unwrap()
}

#[test]
fn a_gateway_serves_only_rbd_images_of_its_own_cluster_connection() {
    let good = gateway_config("device = \"image\"\nana_group = 2", "");
    let plan = good.gateway_plan().unwrap().unwrap();
    assert_eq!(plan.controller_id_range(), (1, 4094));
    let spec = good.spec_with(Vec::new()).unwrap();
    assert_eq!((spec.settings.controller_id_min, spec.settings.controller_id_max), (1, 4094));

    let ram = gateway_config("backend = \"ram\"\nsize = \"1GiB\"", "").gateway_plan().unwrap_err().to_string();
    assert!(ram.contains("a gateway serves only namespaces on rbd images"), "{ram}");
    let other_cluster =
        gateway_config("device = \"image\"", "client = \"other\"").gateway_plan().unwrap_err().to_string();
    assert!(
        other_cluster.contains("client.other") && other_cluster.contains("same ceph_conf, client"),
        "{other_cluster}"
    );
    let group = gateway_config("device = \"image\"\nana_group = 65", "").check().unwrap_err().to_string();
    assert!(group.contains("ana_group = 65 is outside 1..=64"), "{group}");
}

#[test]
fn a_namespace_hosts_list_names_allowed_hosts_once() {
    let file = |hosts: &str, allow_any: bool| {
        format!(
            "[[listener]]\naddress = \"127.0.0.1:4420\"\n[[subsystem]]\nnqn = \"nqn.2026-11.io.sluice:h\"\n{}\
             [[subsystem.host]]\nnqn = \"nqn.2014-08.io.sluice:one\"\n[[subsystem.namespace]]\nbackend = \"ram\"\n\
             size = \"1MiB\"\nhosts = {hosts}\n",
            if allow_any { "allow_any_host = true\n" } else { "" }
        )
    };
    let check = |text: String| Config::parse(&text).unwrap().check().map(|_| ()).map_err(|error| error.to_string());
    check(file("[]", false)).unwrap();
    check(file("[\"nqn.2014-08.io.sluice:one\"]", false)).unwrap();
    let error = check(file("[\"nqn.2014-08.io.sluice:two\"]", false)).unwrap_err();
    assert!(error.contains("namespace[0].hosts") && error.contains("not allowed on the subsystem"), "{error}");
    // A subsystem that admits any host may name any host.
    check(file("[\"nqn.2014-08.io.sluice:two\"]", true)).unwrap();
    let error = check(file("[\"nqn.2014-08.io.sluice:one\", \"nqn.2014-08.io.sluice:one\"]", false)).unwrap_err();
    assert!(error.contains("namespace[0].hosts") && error.contains("twice"), "{error}");
    let error = check(file("[\"not an nqn\"]", true)).unwrap_err();
    assert!(error.contains("namespace[0].hosts") && error.contains("not a host NQN"), "{error}");
}
