#!/usr/bin/env python3
"""Where a target's CPU goes, from `perf script` output of `perf record -g` profiles.

    profile-breakdown.py LABEL=FILE[:US_PER_IO] ...

Each sample is put in the category of the frame nearest the leaf of its stack that
names one (CATEGORIES, in that order for a frame named by two), else "other kernel",
"user: Sluice's code" or "user: other". Prints one Markdown table, a column of shares per
profile and, given the target's CPU per I/O over the profiled run, its microseconds
per I/O.
"""
import sys

CATEGORIES = [
    ("loopback delivery into the peer's socket (softirq; on a NIC: the host's CPU)",
     {"net_rx_action", "__napi_poll", "process_backlog", "__netif_receive_skb_one_core"}),
    ("send: TCP transmit of sendmsg SQEs", {"io_sendmsg", "io_send", "io_send_zc", "io_sendmsg_zc"}),
    ("receive: recv SQEs (TCP receive, copy out)", {"io_recv", "io_recvmsg"}),
    ("poll arm and wake-up of recvs that found no data (io_uring apoll)",
     {"io_arm_apoll", "io_arm_poll_handler", "io_poll_task_func", "io_poll_wake", "__io_poll_execute",
      "io_poll_check_events", "io_apoll_task_func"}),
    ("timers (hrtimers, TCP timers)", {"hrtimer_interrupt", "__hrtimer_run_queues", "run_timer_softirq",
                                        "tcp_write_timer", "tcp_delack_timer", "sysvec_apic_timer_interrupt"}),
    ("sleep and wake-up (scheduler, CQ wait)", {"schedule", "__schedule", "io_cqring_wait", "finish_task_switch",
                                                "do_nanosleep", "futex_wait", "schedule_hrtimeout_range"}),
    ("io_uring_enter: submission, completions, task work",
     {"io_submit_sqes", "__do_sys_io_uring_enter", "io_run_task_work", "tctx_task_work", "io_handle_tw_list",
      "__io_run_local_work", "io_req_task_complete", "__io_submit_flush_completions"}),
    ("user: libc memory copies and zeroing", {"__memmove_avx512_unaligned_erms", "__memset_avx512_unaligned_erms",
                                              "__memmove_avx_unaligned_erms", "__memset_avx2_unaligned_erms",
                                              "__memcpy_avx_unaligned_erms"}),
]
ORDER = [name for name, _ in CATEGORIES] + ["other kernel", "user: Sluice's code", "user: other"]


def frame(line):
    # "\t ffffffff81234567 tcp_sendmsg+0x2a ([kernel.kallsyms])" -> ("tcp_sendmsg", "[kernel.kallsyms]")
    parts = line.split(None, 1)
    if len(parts) < 2:
        return "", ""
    rest = parts[1]
    dso = rest[rest.rfind("(") + 1:rest.rfind(")")] if "(" in rest else ""
    return rest.split(" (")[0].split("+0x")[0], dso


def classify(stack):
    for sym, _ in stack:  # leaf first
        for name, frames in CATEGORIES:
            if sym in frames:
                return name
    dso = stack[0][1] if stack else ""
    if "kernel" in dso:
        return "other kernel"
    return "user: Sluice's code" if "sluice" in dso else "user: other"


def breakdown(path):
    counts, stack = {}, []
    for line in list(open(path, errors="replace")) + [""]:
        if line[:1] in (" ", "\t"):
            stack.append(frame(line))
            continue
        if stack:
            c = classify(stack)
            counts[c] = counts.get(c, 0) + 1
        stack = []
    return counts


def main():
    runs = []
    for arg in sys.argv[1:]:
        label, _, rest = arg.partition("=")
        path, _, us = rest.partition(":")
        runs.append((label, breakdown(path), float(us) if us else None))
    if not runs:
        sys.exit(__doc__)
    head, rule = "| where the target's CPU goes |", "| --- |"
    for label, _, us in runs:
        head += f" {label} |" + (f" {label} us/IO |" if us else "")
        rule += " --: |" + (" --: |" if us else "")
    print(head)
    print(rule)
    for name in ORDER:
        if not any(counts.get(name) for _, counts, _ in runs):
            continue
        row = f"| {name} |"
        for _, counts, us in runs:
            share = counts.get(name, 0) / max(sum(counts.values()), 1)
            row += f" {share * 100:.1f} % |" + (f" {share * us:.2f} |" if us else "")
        print(row)
    print("| samples |" + "".join(f" {sum(c.values())} |" + (" |" if us else "") for _, c, us in runs))


if __name__ == "__main__":
    main()
