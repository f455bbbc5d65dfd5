#!/usr/bin/python3
"""Kernel samples of one thread grouped by what the kernel was doing.

Input (stdin): `perf report -n --sort sym -g none` lines of [k] symbols. Output: the sample count
and share per group. The groups are name patterns, first match wins; 'other' is the rest
(allocators, task work, elevator bookkeeping)."""
import collections
import re
import sys

GROUPS = [
    ('page pinning (gup, page refs)', r'gup|pin_user|unpin|put_page|folio|try_grab|follow_page|get_user_pages|bvec_release|bio_release'),
    ('virtio doorbell (VM exit)', r'iowrite|vp_notify|virtqueue_notify|virtqueue_kick'),
    ('interrupts, irq-off regions', r'irq'),
    ('lock spinning', r'spin_on_owner|queued_spin|osq_lock|mutex'),
    ('futex (thread pool waits)', r'futex'),
    ('scheduler', r'schedule|task_switch|sched_|pick_next|enqueue|dequeue|update_curr|try_to_wake'),
    ('io_uring', r'io_uring|io_submit|io_issue|io_read|io_import|io_rw|__io_|io_req'),
    ('block layer, driver', r'blk_|bio_|dd_|virtblk|virtio|sg_|submit_bio|vring|elv_'),
    ('file system (ext4, iomap)', r'ext4|iomap|dio|generic_file'),
    ('page faults, page clearing', r'page_fault|clear_page|handle_mm|do_anonymous|alloc_pages|free_unref|memcg'),
    ('syscall entry and exit', r'syscall|entry_|exit_to_user|x64_sys'),
]


def main():
    counts = collections.Counter()
    total = 0
    for line in sys.stdin:
        m = re.match(r'\s*[0-9.]+%\s+(\d+)\s+\[k\]\s+(\S+)', line)
        if not m:
            continue
        n, sym = int(m.group(1)), m.group(2)
        total += n
        counts[next((name for name, rx in GROUPS if re.search(rx, sym)), 'other')] += n
    print(f'  {total} kernel samples of the decoding thread')
    for name, n in counts.most_common():
        print(f'  {name:32s} {n:6d} {100.0 * n / max(total, 1):5.1f}%')


if __name__ == '__main__':
    main()
