//! `sluice ana-log`: the Asymmetric Namespace Access log (0Ch) of one controller, like
//! `nvme ana-log`: each ANA group's state on this path and its namespaces. Reading it
//! from every gateway of a group shows the paths a multipath host would choose from.

use nvme_spec::ana::AnaLog;
use serde_json::{json, Value};

use super::args::{OutputArgs, TargetArgs};
use super::output::StatusContext;
use super::session::{command_error, print_json, print_text, Session};
use super::HostError;

pub(super) fn ana_log(args: &TargetArgs, output: OutputArgs) -> Result<(), HostError> {
    let session = Session::open(args)?;
    let controller = session.controller();
    let identify = controller.identify();
    if identify.multipath_capabilities & nvme_spec::identify::cmic::ANA_REPORTING == 0 {
        return Err(HostError::usage(format!("{} does not report ANA (CMIC bit 3 clear)", session.target.url)));
    }
    let log = controller
        .ana_log()
        .map_err(|error| command_error("ana-log", error, StatusContext::Admin, |_| String::new()))?;
    if output.json() {
        print_json(&json_of(&log, identify.controller_id.0))
    } else {
        print_text(&text_of(&log, &session.target.url, identify.controller_id.0))
    }
}

fn json_of(log: &AnaLog, controller_id: u16) -> Value {
    json!({
        "cntlid": controller_id,
        "chgcnt": log.change_count,
        "ngrps": log.groups.len(),
        "ana_log": log.groups.iter().map(|group| json!({
            "grpid": group.descriptor.group_id.0,
            "nnsids": group.descriptor.namespace_count,
            "grpchgcnt": group.descriptor.change_count,
            "state": group.descriptor.state.name(),
            "nsids": group.namespaces.iter().map(|nsid| json!({ "nsid": nsid.0 })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

fn text_of(log: &AnaLog, url: &str, controller_id: u16) -> String {
    let mut out = format!("Asymmetric Namespace Access Log for NVMe device: {url} (cntlid {controller_id})\n");
    out.push_str(&format!("chgcnt\t:\t{}\nngrps\t:\t{}\n", log.change_count, log.groups.len()));
    for group in &log.groups {
        let descriptor = &group.descriptor;
        out.push_str(&format!(
            "grpid\t:\t{}\nnnsids\t:\t{}\ngrpchgcnt\t:\t{}\nstate\t:\t{}\n",
            descriptor.group_id.0,
            descriptor.namespace_count,
            descriptor.change_count,
            descriptor.state.name()
        ));
        for nsid in &group.namespaces {
            out.push_str(&format!("\tnsid\t:\t{}\n", nsid.0));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nvme_spec::ana::{encode_ana_log_header, AnaGroupDescriptor, AnaGroupId, AnaState};
    use nvme_spec::NamespaceId;

    #[test]
    fn the_log_prints_like_nvme_cli() {
        let mut page = [0u8; 64];
        encode_ana_log_header(2, 1, &mut page);
        AnaGroupDescriptor {
            group_id: AnaGroupId(1),
            namespace_count: 1,
            change_count: 2,
            state: AnaState::NonOptimized,
        }
        .encode([NamespaceId(1)].into_iter(), &mut page[16..])
        .unwrap();
        let log = AnaLog::decode(&page).unwrap();
        let text = text_of(&log, "tcp://127.0.0.1:4421", 4096);
        assert!(
            text.contains("grpid\t:\t1\n")
                && text.contains("state\t:\tnon-optimized\n")
                && text.contains("\tnsid\t:\t1\n"),
            "{text}"
        );
        assert_eq!(json_of(&log, 4096)["ana_log"][0]["state"], "non-optimized");
    }
}
