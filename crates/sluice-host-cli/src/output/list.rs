//! `sluice list` rows.

use super::*;
use units::format::{scale, Base};

// ---------------------------------------------------------------------------------
// list

/// One row of `sluice list`: one namespace of the target.
#[derive(Debug, Clone)]
pub struct ListRow {
    /// tcp://ADDR:PORT/NQN.
    pub node: String,
    pub nsid: u32,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    /// NUSE in bytes.
    pub used_bytes: u64,
    /// NSZE in blocks (MaximumLBA in nvme-cli's JSON).
    pub size_blocks: u64,
    pub block_bytes: u64,
    pub metadata_bytes: u16,
}

impl ListRow {
    fn total_bytes(&self) -> u64 {
        self.size_blocks.saturating_mul(self.block_bytes)
    }
}

/// `nvme list` text: a header, a dashed rule, one row per namespace.
pub fn list_text(rows: &[ListRow]) -> String {
    let node_width = rows.iter().map(|row| row.node.len()).max().unwrap_or(0).max(21);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<node_width$} {:<20} {:<40} {:<10} {:<26} {:<16} {:<8}",
        "Node", "SN", "Model", "Namespace", "Usage", "Format", "FW Rev"
    );
    let _ = writeln!(
        out,
        "{} {} {} {} {} {} {}",
        "-".repeat(node_width),
        "-".repeat(20),
        "-".repeat(40),
        "-".repeat(10),
        "-".repeat(26),
        "-".repeat(16),
        "-".repeat(8)
    );
    for row in rows {
        // nvme-cli's columns: usage in SI units, the block size in binary ones.
        let (used, used_suffix) = scale(row.used_bytes as f64, Base::Decimal);
        let (total, total_suffix) = scale(row.total_bytes() as f64, Base::Decimal);
        let usage = format!("{used:6.2} {used_suffix:>2}B / {total:6.2} {total_suffix:>2}B");
        let (block, block_suffix) = scale(row.block_bytes as f64, Base::Binary);
        let format = format!("{block:3.0} {block_suffix:>3}B + {:2} B", row.metadata_bytes);
        let nsid = format!("{:#x}", row.nsid);
        let _ = writeln!(
            out,
            "{:<node_width$} {:<20} {:<40} {:<10} {:<26} {:<16} {:<8}",
            row.node, row.serial, row.model, nsid, usage, format, row.firmware
        );
    }
    out
}

/// `nvme list -o json`: `{"Devices":[...]}` with nvme-cli's keys.
pub fn list_json(rows: &[ListRow]) -> Value {
    let devices: Vec<Value> = rows
        .iter()
        .map(|row| {
            json!({
                "NameSpace": row.nsid,
                "DevicePath": row.node,
                "Firmware": row.firmware,
                "ModelNumber": row.model,
                "SerialNumber": row.serial,
                "UsedBytes": row.used_bytes,
                "MaximumLBA": row.size_blocks,
                "PhysicalSize": row.total_bytes(),
                "SectorSize": row.block_bytes,
            })
        })
        .collect();
    json!({ "Devices": devices })
}
